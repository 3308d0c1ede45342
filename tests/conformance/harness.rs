//! A store-agnostic driver: one member's backend started directly (no
//! runtime, no core), fed commands with made-up request ids, its events
//! collected and waited for with a timeout.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use tenure::core::{
    ClaimOutcome, Command, Event, FencingToken, MemberId, MemberInfo, Offset, RegisterOutcome,
    RequestId, SessionId, StoreError, TopicPartition,
};
use tenure::tokio::Backend;
use tokio::sync::mpsc;

use crate::stores::EndSession;

/// How long any one expected event may take.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a negative check waits for an event that must not come. Only
/// used where nothing but time can show an absence (a watch that must not
/// fire, a notification that must not repeat).
pub const QUIET: Duration = Duration::from_millis(300);

pub const GROUP: &str = "g";
pub const TOPIC: &str = "t";

pub fn info(member: &str) -> MemberInfo {
    MemberInfo {
        id: MemberId::new(member).expect("valid member id"),
        topics: BTreeSet::from([TOPIC.to_owned()]),
        strategy: "sticky".to_owned(),
    }
}

pub fn partition(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// A started backend and the events it sent.
pub struct Driver {
    pub backend: Box<dyn Backend>,
    pub info: MemberInfo,
    /// The session commands are issued under (the one of the first
    /// `SessionEstablished`; tests may move it on).
    pub session: SessionId,
    /// What ends this member's session on the server, for members started
    /// as mortal.
    pub ender: Option<Box<dyn EndSession>>,
    store: &'static str,
    events: mpsc::UnboundedReceiver<Event>,
    /// Events received while waiting for another one.
    pending: VecDeque<Event>,
    /// The backend dropped every sender of its event channel.
    closed: bool,
    next_id: u64,
}

impl Driver {
    /// Starts `backend` for `member` of [`GROUP`] and waits for its first
    /// session.
    pub async fn start(store: &'static str, mut backend: Box<dyn Backend>, member: &str) -> Driver {
        let info = info(member);
        let (tx, events) = mpsc::unbounded_channel();
        if let Err(e) = backend.start(GROUP, &info, tx).await {
            panic!(
                "the {store} backend does not start ({e}); start the servers with \
                 `eval \"$(scripts/services start)\"` and run the tests again"
            );
        }
        let mut driver = Driver {
            backend,
            info,
            session: SessionId(0),
            ender: None,
            store,
            events,
            pending: VecDeque::new(),
            closed: false,
            next_id: 1,
        };
        driver.session = driver
            .wait_for("SessionEstablished", |e| match e {
                Event::SessionEstablished { session } => Some(*session),
                _ => None,
            })
            .await;
        driver
    }

    pub fn id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Waits for the first event `pick` accepts; keeps the others for later.
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        mut pick: impl FnMut(&Event) -> Option<T>,
    ) -> T {
        match self.wait_within(EVENT_TIMEOUT, &mut pick).await {
            Some(found) => found,
            None if self.closed => panic!(
                "{}: the backend closed its event channel while we waited for {what}; \
                 other events: {:?}",
                self.store, self.pending
            ),
            None => panic!(
                "{}: no {what} within {EVENT_TIMEOUT:?}; other events: {:?}",
                self.store, self.pending
            ),
        }
    }

    /// Waits up to `window` for an event `pick` accepts; `None` if none
    /// came (or the channel closed). The others are kept for later.
    pub async fn wait_within<T>(
        &mut self,
        window: Duration,
        mut pick: impl FnMut(&Event) -> Option<T>,
    ) -> Option<T> {
        if let Some(i) = self.pending.iter().position(|e| pick(e).is_some()) {
            let event = self.pending.remove(i).expect("index in range");
            return pick(&event);
        }
        let deadline = tokio::time::Instant::now() + window;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Err(_) => return None,
                Ok(None) => {
                    self.closed = true;
                    return None;
                }
                Ok(Some(event)) => match pick(&event) {
                    Some(found) => return Some(found),
                    None => self.pending.push_back(event),
                },
            }
        }
    }

    /// Asserts that no event `pick` accepts arrives within [`QUIET`].
    pub async fn assert_quiet(&mut self, what: &str, mut pick: impl FnMut(&Event) -> bool) {
        if let Some(event) = self
            .wait_within(QUIET, |e| pick(e).then(|| e.clone()))
            .await
        {
            panic!("{}: unexpected {what}: {event:?}", self.store);
        }
    }

    /// Whether the backend has dropped every sender of its event channel
    /// (and every event it sent has been received): it can never report
    /// anything again.
    pub fn events_closed(&mut self) -> bool {
        loop {
            match self.events.try_recv() {
                Ok(event) => self.pending.push_back(event),
                Err(mpsc::error::TryRecvError::Empty) => return self.closed,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.closed = true;
                    return true;
                }
            }
        }
    }

    /// Whether an event `pick` accepts has arrived already (no waiting).
    pub fn has(&mut self, mut pick: impl FnMut(&Event) -> bool) -> bool {
        while let Ok(event) = self.events.try_recv() {
            self.pending.push_back(event);
        }
        self.pending.iter().any(&mut pick)
    }

    /// Submits the command `make` builds from a fresh id and this
    /// driver's session; returns the id.
    pub fn submit(&mut self, make: impl FnOnce(RequestId, SessionId) -> Command) -> RequestId {
        let id = self.id();
        let command = make(id, self.session);
        self.backend.submit(command);
        id
    }

    /// Waits for the result event of request `id`.
    pub async fn result(&mut self, id: RequestId) -> Event {
        self.wait_for(&format!("result of {id:?}"), |e| {
            (e.request_id() == Some(id)).then(|| e.clone())
        })
        .await
    }

    /// Ends this member's session on the server, as if the member had
    /// gone silent (see [`EndSession`]).
    pub async fn end_session(&mut self) {
        let session = self.session;
        self.ender
            .as_mut()
            .expect("a member started as mortal")
            .end(session)
            .await;
    }

    /// Lets a member whose session was ended reach the store again.
    pub async fn restore(&mut self) {
        self.ender
            .as_mut()
            .expect("a member started as mortal")
            .restore()
            .await;
    }

    pub async fn register(&mut self) -> Result<RegisterOutcome, StoreError> {
        let member = self.info.clone();
        let id = self.submit(|id, session| Command::Register {
            id,
            session,
            member,
        });
        match self.result(id).await {
            Event::RegisterResult { result, .. } => result,
            other => panic!("{}: Register answered {other:?}", self.store),
        }
    }

    pub async fn deregister(&mut self) -> Result<(), StoreError> {
        let id = self.submit(|id, session| Command::Deregister { id, session });
        match self.result(id).await {
            Event::DeregisterResult { result, .. } => result,
            other => panic!("{}: Deregister answered {other:?}", self.store),
        }
    }

    /// The registered members' ids, sorted; sets the one-shot watch.
    pub async fn watch_members(&mut self) -> Vec<String> {
        let id = self.submit(|id, session| Command::WatchMembers { id, session });
        match self.result(id).await {
            Event::MembersResult {
                result: Ok(members),
                ..
            } => {
                let mut ids: Vec<String> = members
                    .into_iter()
                    .map(|m| m.id.as_str().to_owned())
                    .collect();
                ids.sort();
                ids
            }
            other => panic!("{}: WatchMembers answered {other:?}", self.store),
        }
    }

    pub async fn claim(&mut self, p: u32) -> Result<ClaimOutcome, StoreError> {
        let id = self.submit(|id, session| Command::Claim {
            id,
            session,
            partition: partition(p),
        });
        match self.result(id).await {
            Event::ClaimResult { result, .. } => result,
            other => panic!("{}: Claim answered {other:?}", self.store),
        }
    }

    /// Claims `p`, which must be free; returns the new claim's token.
    pub async fn claim_created(&mut self, p: u32) -> FencingToken {
        match self.claim(p).await {
            Ok(ClaimOutcome::Created { token }) => token,
            other => panic!(
                "{}: a claim of a free partition answered {other:?}",
                self.store
            ),
        }
    }

    pub async fn watch_owner(&mut self, p: u32) -> Result<bool, StoreError> {
        let id = self.submit(|id, session| Command::WatchOwner {
            id,
            session,
            partition: partition(p),
        });
        match self.result(id).await {
            Event::OwnerWatchResult { result, .. } => result,
            other => panic!("{}: WatchOwner answered {other:?}", self.store),
        }
    }

    pub async fn release(&mut self, p: u32, token: Option<FencingToken>) -> Result<(), StoreError> {
        let id = self.submit(|id, session| Command::Release {
            id,
            session,
            partition: partition(p),
            token,
        });
        match self.result(id).await {
            Event::ReleaseResult { result, .. } => result,
            other => panic!("{}: Release answered {other:?}", self.store),
        }
    }

    pub async fn commit(
        &mut self,
        p: u32,
        offset: Offset,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let id = self.submit(|id, session| Command::CommitOffset {
            id,
            session,
            partition: partition(p),
            offset,
            token,
        });
        match self.result(id).await {
            Event::CommitResult { result, .. } => result,
            other => panic!("{}: CommitOffset answered {other:?}", self.store),
        }
    }

    pub async fn read_offset(&mut self, p: u32) -> Result<Option<Offset>, StoreError> {
        let id = self.submit(|id, session| Command::ReadOffset {
            id,
            session,
            partition: partition(p),
        });
        match self.result(id).await {
            Event::OffsetResult { result, .. } => result,
            other => panic!("{}: ReadOffset answered {other:?}", self.store),
        }
    }

    pub async fn heartbeat(&mut self) -> Result<(), StoreError> {
        let id = self.submit(|id, session| Command::Heartbeat { id, session });
        match self.result(id).await {
            Event::HeartbeatResult { result, .. } => result,
            other => panic!("{}: Heartbeat answered {other:?}", self.store),
        }
    }

    /// Waits for the `OwnerDeleted` of `p`.
    pub async fn owner_deleted(&mut self, p: u32) {
        let wanted = partition(p);
        self.wait_for(&format!("OwnerDeleted of {wanted}"), |e| {
            matches!(e, Event::OwnerDeleted { partition } if *partition == wanted).then_some(())
        })
        .await
    }

    /// Waits for a `MembersChanged`.
    pub async fn members_changed(&mut self) {
        self.wait_for("MembersChanged", |e| {
            matches!(e, Event::MembersChanged).then_some(())
        })
        .await
    }

    pub async fn shutdown(mut self) {
        self.backend.shutdown().await;
        if let Some(mut ender) = self.ender.take() {
            ender.restore().await;
        }
    }
}
