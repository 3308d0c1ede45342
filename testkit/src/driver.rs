//! One member's backend started directly (no runtime, no core), fed core
//! commands with made-up request ids under its current session, its events
//! collected and waited for with a timeout. Works with any
//! `tenure_tokio::Backend`.
//!
//! Used by the ZooKeeper and etcd backends' tests and by the workspace's
//! conformance suite, which wraps it with typed results and session enders.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use tenure_core::{
    Event, FencingToken, MemberId, MemberInfo, Offset, Progress, RequestId, SessionId, StoreOp,
    StoreRequest, TopicPartition,
};
use tenure_tokio::{Backend, BackendError, Joining};
use tokio::sync::mpsc;

/// How long any one expected event may take.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

pub const GROUP: &str = "g";
pub const TOPIC: &str = "t";

pub fn info(member: &str) -> MemberInfo {
    MemberInfo {
        id: MemberId::new(member).expect("valid member id"),
        subscription: tenure_core::Subscription::Topics(BTreeSet::from([TOPIC.to_owned()])),
        strategy: "sticky".to_owned(),
    }
}

pub fn partition(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// Starts `backend` as `member` of [`GROUP`] with sessions of
/// `session_timeout`, its events dropped: for tests of how a start fails.
pub async fn start_alone(
    mut backend: impl Backend,
    member: &MemberInfo,
    session_timeout: Duration,
) -> Result<(), BackendError> {
    let (tx, _rx) = mpsc::unbounded_channel();
    let joining = Joining::new(GROUP, member.clone(), session_timeout, tx);
    backend.start(joining).await
}

/// A started backend and the events it sent.
pub struct Driver<B> {
    pub backend: B,
    pub info: MemberInfo,
    /// The session commands are issued under (the one of the first
    /// `SessionEstablished`; tests may move it on).
    pub session: SessionId,
    /// The store's name, so that a failure says which store it came from.
    pub store: &'static str,
    events: mpsc::UnboundedReceiver<Event>,
    /// Events received while waiting for another one.
    pending: VecDeque<Event>,
    /// The backend dropped every sender of its event channel.
    closed: bool,
    next_id: u64,
}

impl<B: Backend> Driver<B> {
    /// Starts `backend` as `info` in [`GROUP`], with sessions of
    /// `session_timeout`, and waits for its first session.
    pub async fn start(
        store: &'static str,
        mut backend: B,
        info: MemberInfo,
        session_timeout: Duration,
    ) -> Driver<B> {
        let (tx, events) = mpsc::unbounded_channel();
        let joining = Joining::new(GROUP, info.clone(), session_timeout, tx);
        if let Err(e) = backend.start(joining).await {
            panic!(
                "the {store} backend does not start ({e}); start the servers with \
                 `eval \"$(scripts/services start)\"` and run the tests again"
            );
        }
        let mut driver = Driver {
            backend,
            info,
            session: SessionId(0),
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

    /// Whether an event `pick` accepts has arrived already (no waiting).
    pub fn has(&mut self, mut pick: impl FnMut(&Event) -> bool) -> bool {
        while let Ok(event) = self.events.try_recv() {
            self.pending.push_back(event);
        }
        self.pending.iter().any(&mut pick)
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

    /// Submits the command `make` builds from a fresh id and this
    /// driver's session; returns the id.
    pub fn submit(&mut self, make: impl FnOnce(RequestId, SessionId) -> StoreRequest) -> RequestId {
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

    /// Submits the command `make` builds and waits for its result event.
    pub async fn request(
        &mut self,
        make: impl FnOnce(RequestId, SessionId) -> StoreRequest,
    ) -> Event {
        let id = self.submit(make);
        self.result(id).await
    }

    pub async fn register(&mut self) -> Event {
        let member = self.info.clone();
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::Register { member },
        })
        .await
    }

    pub async fn deregister(&mut self) -> Event {
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::Deregister,
        })
        .await
    }

    /// The registered members' ids, sorted; sets the one-shot watch.
    pub async fn watch_members(&mut self) -> Vec<String> {
        match self
            .request(|id, session| StoreRequest {
                id,
                session,
                op: StoreOp::WatchMembers,
            })
            .await
        {
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

    pub async fn heartbeat(&mut self) -> Event {
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::Heartbeat,
        })
        .await
    }

    pub async fn claim(&mut self, p: u32) -> Event {
        self.claim_reading(p, false).await
    }

    /// Claims `p`, reading its committed offset with the claim if
    /// `read_offset`.
    pub async fn claim_reading(&mut self, p: u32, read_offset: bool) -> Event {
        let partition = partition(p);
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::Claim {
                partition,
                read_offset,
            },
        })
        .await
    }

    /// Submits every one of `ops` in one go, as a member's step does
    /// (every request submitted before any is awaited), and waits for each
    /// result, in the same order.
    pub async fn together(&mut self, ops: impl IntoIterator<Item = StoreOp>) -> Vec<Event> {
        let ids: Vec<RequestId> = ops
            .into_iter()
            .map(|op| self.submit(|id, session| StoreRequest { id, session, op }))
            .collect();
        let mut results = Vec::with_capacity(ids.len());
        for id in ids {
            results.push(self.result(id).await);
        }
        results
    }

    /// Claims every partition of `partitions` in one go ([`Driver::together`]).
    pub async fn claim_together(
        &mut self,
        partitions: impl IntoIterator<Item = u32>,
    ) -> Vec<Event> {
        self.claim_reading_together(partitions, false).await
    }

    /// Claims every partition of `partitions` in one go, reading their
    /// committed offsets with the claims if `read_offset`.
    pub async fn claim_reading_together(
        &mut self,
        partitions: impl IntoIterator<Item = u32>,
        read_offset: bool,
    ) -> Vec<Event> {
        let ops = partitions.into_iter().map(|p| StoreOp::Claim {
            partition: partition(p),
            read_offset,
        });
        self.together(ops).await
    }

    /// Reads the offsets of every partition of `partitions` in one go.
    pub async fn read_offsets_together(
        &mut self,
        partitions: impl IntoIterator<Item = u32>,
    ) -> Vec<Event> {
        let ops = partitions.into_iter().map(|p| StoreOp::ReadOffset {
            partition: partition(p),
        });
        self.together(ops).await
    }

    /// Commits every `(partition, offset, token)` of `commits` in one go.
    pub async fn commit_together(
        &mut self,
        commits: impl IntoIterator<Item = (u32, Offset, FencingToken)>,
    ) -> Vec<Event> {
        let ops = commits
            .into_iter()
            .map(|(p, offset, token)| StoreOp::CommitOffset {
                partition: partition(p),
                offset,
                token,
                progress: Progress::new(),
            });
        self.together(ops).await
    }

    /// Releases every `(partition, token, final commit)` of `releases` in
    /// one go.
    pub async fn release_together(
        &mut self,
        releases: impl IntoIterator<Item = (u32, Option<FencingToken>, Option<Offset>)>,
    ) -> Vec<Event> {
        let ops = releases
            .into_iter()
            .map(|(p, token, commit)| StoreOp::Release {
                partition: partition(p),
                token,
                commit,
                progress: Progress::new(),
            });
        self.together(ops).await
    }

    pub async fn release(&mut self, p: u32, token: Option<FencingToken>) -> Event {
        self.release_committing(p, token, None).await
    }

    /// Releases `p`, carrying `commit` as its final commit if given.
    pub async fn release_committing(
        &mut self,
        p: u32,
        token: Option<FencingToken>,
        commit: Option<Offset>,
    ) -> Event {
        self.release_progressing(p, token, commit, Progress::new())
            .await
    }

    /// Releases `p`, carrying `commit` as its final commit if given, with
    /// `progress` as its progress record.
    pub async fn release_progressing(
        &mut self,
        p: u32,
        token: Option<FencingToken>,
        commit: Option<Offset>,
        progress: Progress,
    ) -> Event {
        let partition = partition(p);
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::Release {
                partition,
                token,
                commit,
                progress,
            },
        })
        .await
    }

    pub async fn commit(&mut self, p: u32, offset: Offset, token: FencingToken) -> Event {
        self.commit_progress(p, offset, token, Progress::new())
            .await
    }

    /// Commits `offset` of `p` under `token`, with `progress` as its
    /// progress record.
    pub async fn commit_progress(
        &mut self,
        p: u32,
        offset: Offset,
        token: FencingToken,
        progress: Progress,
    ) -> Event {
        let partition = partition(p);
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::CommitOffset {
                partition,
                offset,
                token,
                progress,
            },
        })
        .await
    }

    pub async fn read_offset(&mut self, p: u32) -> Event {
        let partition = partition(p);
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::ReadOffset { partition },
        })
        .await
    }

    pub async fn watch_owner(&mut self, p: u32) -> Event {
        let partition = partition(p);
        self.request(|id, session| StoreRequest {
            id,
            session,
            op: StoreOp::WatchOwner { partition },
        })
        .await
    }
}
