//! The session loop against a store client the test scripts: no network.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::FutureExt;
use tenure_core::{
    ClaimOutcome, Committed, Event, FencingToken, MemberId, MemberInfo, Operation, RegisterOutcome,
    RequestId, SessionId, StoreError, StoreOp, StoreRequest, Subscription, TopicPartition,
};
use tokio::sync::mpsc;

use super::shared::Shared;
use super::{
    Connected, Connector, MemberList, SessionChange, SessionKeeper, StoreBackend, StoreClient,
    StoreOps, Watch, Wire,
};
use crate::backend::{Backend, BackendError, Joining, SessionTicket};

/// A session of the scripted store: its id.
#[derive(Clone, Debug)]
struct Session(u64);

/// A store whose session changes the test sends, whose requests are
/// answered at once, and which records the batches it was given.
struct Scripted {
    changes: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<SessionChange>>>,
    sessions: AtomicU64,
    /// The size of each `commit_many` call.
    commit_batches: Arc<Mutex<Vec<usize>>>,
}

struct ScriptedKeeper(Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<SessionChange>>>);

#[async_trait]
impl SessionKeeper for ScriptedKeeper {
    async fn next_change(&mut self, _wire: &Wire) -> SessionChange {
        match self.0.lock().await.recv().await {
            Some(change) => change,
            None => std::future::pending().await,
        }
    }
}

struct ScriptedOps {
    commit_batches: Arc<Mutex<Vec<usize>>>,
    wire: Wire,
}

fn never() -> Watch {
    Box::pin(std::future::pending())
}

#[async_trait]
impl StoreOps for ScriptedOps {
    async fn register(&self, _: &MemberInfo) -> Result<RegisterOutcome, StoreError> {
        Ok(RegisterOutcome::Registered)
    }
    async fn deregister(&self) -> Result<(), StoreError> {
        Ok(())
    }
    async fn heartbeat(&self) -> Result<(), StoreError> {
        self.wire
            .send_to_leader(|| async { Ok(()) }, Result::is_ok)
            .await
    }
    async fn watch_members(&self) -> Result<(MemberList, Watch), StoreError> {
        let mut list = MemberList::new(Vec::new());
        list.problems.push((
            Operation::ReadRegistration,
            StoreError::Corrupt {
                path: "/ids/x".to_owned(),
                detail: "not JSON".to_owned(),
                source: None,
            },
        ));
        Ok((list, never()))
    }
    async fn claim(&self, _: &TopicPartition, _: bool) -> Result<ClaimOutcome, StoreError> {
        Ok(ClaimOutcome::Created {
            token: FencingToken(1),
            committed: None,
        })
    }
    async fn watch_owner(&self, _: &TopicPartition) -> Result<(bool, Option<Watch>), StoreError> {
        Ok((true, Some(never())))
    }
    async fn release(
        &self,
        _: &TopicPartition,
        _: Option<FencingToken>,
        _: Option<&Committed>,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    async fn read_offset(&self, _: &TopicPartition) -> Result<Option<Committed>, StoreError> {
        Ok(None)
    }
    async fn commit(
        &self,
        _: &TopicPartition,
        _: &Committed,
        _: FencingToken,
    ) -> Result<(), StoreError> {
        Ok(())
    }
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Committed, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        self.commit_batches
            .lock()
            .expect("not poisoned")
            .push(commits.len());
        commits.iter().map(|_| Ok(())).collect()
    }
}

#[async_trait]
impl StoreClient for Scripted {
    type Session = Session;
    type Keeper = ScriptedKeeper;
    type Ops = ScriptedOps;

    fn store(&self) -> String {
        "the scripted store".to_owned()
    }
    fn session_id(session: &Session) -> SessionId {
        SessionId(session.0)
    }
    fn counted_after(&self, _: &Session) -> Duration {
        COUNTED_AFTER
    }
    fn keeper(&self, _: &Session) -> ScriptedKeeper {
        ScriptedKeeper(self.changes.clone())
    }
    fn ops(self: &Arc<Self>, _: &Session, wire: &Wire) -> ScriptedOps {
        ScriptedOps {
            commit_batches: self.commit_batches.clone(),
            wire: wire.clone(),
        }
    }
    async fn reopen(&self, _: &Session) -> Result<Session, BackendError> {
        Ok(Session(self.sessions.fetch_add(1, Ordering::SeqCst) + 1))
    }
    fn ticket(&self, session: &Session) -> Option<SessionTicket> {
        Some(SessionTicket {
            id: session.0 as i64,
            secret: Vec::new(),
        })
    }
    async fn close(&self, _: Session) {}
    async fn detach(&self, _: Session) {}
    fn abandon(&self, _: Session) {}
}

struct ScriptedConnector(Option<Scripted>);

#[async_trait]
impl Connector for ScriptedConnector {
    type Client = Scripted;

    fn request_counts(&self) -> Arc<super::RequestCounts> {
        Arc::default()
    }

    async fn connect(&mut self, _: &Joining) -> Result<Connected<Scripted>, BackendError> {
        let client = self
            .0
            .take()
            .ok_or_else(|| BackendError::Config("used".to_owned()))?;
        Ok(Connected::new(client, Session(1), Instant::now()))
    }
}

/// A started backend on the scripted store: the backend, where its
/// session changes go, the member's events, and the commit batches.
async fn started() -> (
    StoreBackend<ScriptedConnector>,
    mpsc::UnboundedSender<SessionChange>,
    mpsc::UnboundedReceiver<Event>,
    Arc<Mutex<Vec<usize>>>,
) {
    let (changes, script) = mpsc::unbounded_channel();
    let commit_batches = Arc::default();
    let scripted = Scripted {
        changes: Arc::new(tokio::sync::Mutex::new(script)),
        sessions: AtomicU64::new(1),
        commit_batches: Arc::clone(&commit_batches),
    };
    let mut backend = StoreBackend::new(ScriptedConnector(Some(scripted)));
    let (events, heard) = mpsc::unbounded_channel();
    let member = MemberInfo {
        id: MemberId::new("m1").expect("a valid id"),
        subscription: Subscription::topics(["t"]).expect("a valid subscription"),
        strategy: "sticky".to_owned(),
    };
    backend
        .start(Joining::new("g", member, Duration::from_secs(10), events))
        .await
        .expect("the scripted store connects");
    (backend, changes, heard, commit_batches)
}

fn request(id: u64, session: u64, op: StoreOp) -> StoreRequest {
    StoreRequest {
        id: RequestId(id),
        session: SessionId(session),
        op,
    }
}

/// How late the scripted store's leader counts what it answers.
const COUNTED_AFTER: Duration = Duration::from_secs(3);

/// The next event, renewals included.
async fn next_any(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("an event within 10 s")
        .expect("the backend is alive")
}

/// The next event other than a renewal (they have their own test).
async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    loop {
        match next_any(events).await {
            Event::SessionRenewed { .. } => continue,
            event => return event,
        }
    }
}

#[tokio::test]
async fn the_member_hears_of_each_renewal_with_how_late_the_leader_counts_it() {
    let before = Instant::now();
    let (mut backend, changes, mut events, _) = started().await;
    assert!(matches!(
        next_any(&mut events).await,
        Event::SessionEstablished { .. }
    ));
    // The session counts from its opening, at once.
    let Event::SessionRenewed {
        sent: opened,
        counted_after: Duration::ZERO,
    } = next_any(&mut events).await
    else {
        panic!("the opening is a renewal counted at once");
    };
    assert!(opened <= Instant::now());
    // A leader's answer comes before its result, with the store's delay.
    let sent = Instant::now();
    backend.submit(request(1, 1, StoreOp::Heartbeat));
    match next_any(&mut events).await {
        Event::SessionRenewed {
            sent: at,
            counted_after,
        } => {
            assert!(at >= sent);
            assert_eq!(counted_after, COUNTED_AFTER);
        }
        other => panic!("expected the heartbeat's renewal, got {other:?}"),
    }
    assert!(matches!(
        next_any(&mut events).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    // A read's answer renews nothing (the scripted list reports a
    // problem first).
    backend.submit(request(2, 1, StoreOp::WatchMembers));
    loop {
        match next_any(&mut events).await {
            Event::MembersResult { .. } => break,
            Event::StoreProblem { .. } => {}
            other => panic!("expected the member list, got {other:?}"),
        }
    }
    // The keeper's word (a keep-alive answered) is counted at once, after
    // the resumption it brings.
    changes
        .send(SessionChange::Suspended {
            why: "a test".to_owned(),
        })
        .expect("the keeper listens");
    assert!(matches!(
        next_any(&mut events).await,
        Event::SessionSuspended { .. }
    ));
    let heard = Instant::now();
    changes
        .send(SessionChange::Alive { heard })
        .expect("the keeper listens");
    assert!(matches!(next_any(&mut events).await, Event::SessionResumed));
    assert_eq!(
        next_any(&mut events).await,
        Event::SessionRenewed {
            sent: heard,
            counted_after: Duration::ZERO
        }
    );
    assert!(before <= opened);
}

#[tokio::test]
async fn a_suspension_and_a_resumption_reach_the_member_once_each() {
    let (_backend, changes, mut events, _) = started().await;
    assert!(matches!(
        next(&mut events).await,
        Event::SessionEstablished {
            session: SessionId(1)
        }
    ));
    for _ in 0..2 {
        changes
            .send(SessionChange::Suspended {
                why: "a test".to_owned(),
            })
            .expect("the keeper listens");
    }
    let resumed_at = Instant::now();
    changes
        .send(SessionChange::Alive { heard: resumed_at })
        .expect("the keeper listens");
    assert!(matches!(
        next(&mut events).await,
        Event::SessionSuspended { .. }
    ));
    assert!(
        matches!(next(&mut events).await, Event::SessionResumed),
        "a second suspension while suspended is not told again"
    );
}

#[tokio::test]
async fn an_expired_session_is_replaced_and_its_commands_fail() {
    let (mut backend, changes, mut events, _) = started().await;
    assert!(matches!(
        next(&mut events).await,
        Event::SessionEstablished { .. }
    ));
    changes
        .send(SessionChange::Expired)
        .expect("the keeper listens");
    assert!(matches!(next(&mut events).await, Event::SessionExpired));
    assert!(matches!(
        next(&mut events).await,
        Event::SessionEstablished {
            session: SessionId(2)
        }
    ));
    assert_eq!(backend.ticket().map(|t| t.id), Some(2));
    // Issued under the session that ended: it must not act under the next.
    backend.submit(request(7, 1, StoreOp::Heartbeat));
    assert!(matches!(
        next(&mut events).await,
        Event::HeartbeatResult {
            id: RequestId(7),
            result: Err(StoreError::SessionExpired)
        }
    ));
    backend.submit(request(8, 2, StoreOp::Heartbeat));
    assert!(matches!(
        next(&mut events).await,
        Event::HeartbeatResult {
            id: RequestId(8),
            result: Ok(())
        }
    ));
}

#[tokio::test]
async fn a_steps_commits_go_to_the_store_in_one_batch() {
    let (mut backend, _changes, mut events, commit_batches) = started().await;
    assert!(matches!(
        next(&mut events).await,
        Event::SessionEstablished { .. }
    ));
    for partition in 0..3 {
        backend.submit(request(
            u64::from(partition),
            1,
            StoreOp::CommitOffset {
                partition: TopicPartition::new("t", partition),
                offset: 10,
                token: FencingToken(1),
                progress: Default::default(),
            },
        ));
    }
    let mut answered = Vec::new();
    for _ in 0..3 {
        match next(&mut events).await {
            Event::CommitResult { id, result: Ok(()) } => answered.push(id.0),
            other => panic!("expected a commit's answer, got {other:?}"),
        }
    }
    assert_eq!(answered, [0, 1, 2], "each answered, in order");
    assert_eq!(*commit_batches.lock().expect("not poisoned"), [3]);
}

#[tokio::test]
async fn a_member_list_reports_what_its_read_found_wrong_first() {
    let (mut backend, _changes, mut events, _) = started().await;
    assert!(matches!(
        next(&mut events).await,
        Event::SessionEstablished { .. }
    ));
    backend.submit(request(3, 1, StoreOp::WatchMembers));
    assert!(matches!(
        next(&mut events).await,
        Event::StoreProblem {
            operation: Operation::ReadRegistration,
            error: StoreError::Corrupt { .. }
        }
    ));
    assert!(matches!(
        next(&mut events).await,
        Event::MembersResult {
            id: RequestId(3),
            result: Ok(_)
        }
    ));
}

#[tokio::test]
async fn an_expiry_with_requests_unanswered_tells_the_member_what_waited() {
    let (events, mut heard) = mpsc::unbounded_channel();
    let scripted = Scripted {
        changes: Arc::new(tokio::sync::Mutex::new(mpsc::unbounded_channel().1)),
        sessions: AtomicU64::new(1),
        commit_batches: Arc::default(),
    };
    let wire = Wire::new(Arc::default(), Instant::now());
    let shared = Shared::new(scripted, Session(1), events, wire.clone());
    let unanswered = wire.send(std::future::pending::<()>);
    tokio::pin!(unanswered);
    // Polled once: it holds its turn, unanswered.
    assert!(unanswered.as_mut().now_or_never().is_none());
    shared.expired();
    match heard.recv().await {
        Some(Event::StoreProblem {
            operation: Operation::KeepSession,
            error: StoreError::Other(why),
        }) => {
            let why = why.to_string();
            assert!(
                why.contains("1 requests unanswered (1 sent"),
                "the problem names the requests: {why}"
            );
        }
        other => panic!("the member was told {other:?} first"),
    }
    assert!(matches!(heard.recv().await, Some(Event::SessionExpired)));

    // With nothing unanswered, only the expiry.
    let (events, mut heard) = mpsc::unbounded_channel();
    let scripted = Scripted {
        changes: Arc::new(tokio::sync::Mutex::new(mpsc::unbounded_channel().1)),
        sessions: AtomicU64::new(1),
        commit_batches: Arc::default(),
    };
    let shared = Shared::new(
        scripted,
        Session(1),
        events,
        Wire::new(Arc::default(), Instant::now()),
    );
    shared.expired();
    assert!(matches!(heard.recv().await, Some(Event::SessionExpired)));
}
