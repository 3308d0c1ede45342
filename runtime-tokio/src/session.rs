//! What every store backend needs around its store-specific requests: the
//! session it currently holds, the tasks that carry commands out under it,
//! and the one way a command becomes its result event. A backend supplies
//! its session type and its [`StoreOps`]; the rest is here, once.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::{
    ClaimOutcome, ClientError, Event, FencingToken, MemberInfo, Offset, Operation, RegisterOutcome,
    RequestId, SessionId, StoreError, StoreOp, StoreRequest, TopicPartition,
};
use tokio::sync::{watch, OwnedMutexGuard};
use tokio::task::{JoinHandle, JoinSet};

use crate::backend::{BackendError, EventSender};

pub use tenure_core::records::OPS_PER_BATCH;

/// A store session as a backend holds it (a client and its session id, a
/// lease): cheap to clone, and it knows the core's id of the session.
pub trait StoreSession: Clone + Send + Sync + 'static {
    /// The core's id of this session.
    fn id(&self) -> SessionId;
}

/// Sends `event` to the member; a closed channel means the runtime is gone
/// and there is no one left to tell.
fn send_event(events: &EventSender, event: Event) {
    if events.send(event).is_err() {
        tracing::debug!("event channel closed; event dropped");
    }
}

/// What a backend shares between itself, the tasks that carry out its
/// commands and the task that follows its session.
#[derive(Debug)]
pub struct SessionState<S> {
    events: EventSender,
    /// `None` while a new session is being opened after an expiry, and after
    /// shutdown. A watch channel, so that a task can wait for its session to
    /// end.
    current: watch::Sender<Option<S>>,
    last_heard: LastHeard,
    closing: AtomicBool,
    partition_locks: PartitionLocks,
    turns: RequestTurns,
}

impl<S: StoreSession> SessionState<S> {
    /// The state of a backend whose first session is `first`, opened at or
    /// after `heard` (the moment the connection attempt began), whose
    /// events go to `events`.
    pub fn new(events: EventSender, first: S, heard: Instant) -> SessionState<S> {
        SessionState {
            events,
            current: watch::Sender::new(Some(first)),
            last_heard: LastHeard::new(heard),
            closing: AtomicBool::new(false),
            partition_locks: PartitionLocks::default(),
            turns: RequestTurns::default(),
        }
    }

    /// The turns of the member's requests: a backend takes one for every
    /// request it sends, except keep-alives.
    pub fn turns(&self) -> &RequestTurns {
        &self.turns
    }

    /// The session held now, if any.
    pub fn current(&self) -> Option<S> {
        self.current.borrow().clone()
    }

    /// Replaces the session held (`None`: none until a new one opens).
    fn set_current(&self, session: Option<S>) {
        self.current.send_replace(session);
    }

    /// A new session is open (after an expiry), at or after `opened`:
    /// holds it and tells the member.
    pub fn established(&self, session: S, opened: Instant) {
        let id = session.id();
        self.last_heard.heard(opened);
        self.set_current(Some(session));
        self.send(Event::SessionEstablished { session: id });
    }

    /// The session held is gone: holds none and tells the member. When
    /// requests were unanswered, the member is first told (a problem of
    /// [`Operation::KeepSession`]) what they were doing, so that an expiry
    /// under load says what waited and for how long.
    pub fn expired(&self) {
        let heard_ago = self.last_heard.get().elapsed();
        match self.turns.backlog() {
            Some(backlog) => {
                let why = format!(
                    "the session expired with {} requests unanswered ({} sent, the others \
                     waiting for their turn); the oldest had waited {:?}, {:?} of it for its \
                     turn; the store was last heard {heard_ago:?} ago",
                    backlog.requests, backlog.sent, backlog.oldest, backlog.oldest_waited,
                );
                tracing::warn!(%why, "store session expired with requests unanswered");
                self.send(Event::StoreProblem {
                    operation: Operation::KeepSession,
                    error: StoreError::Other(ClientError::message(why)),
                });
            }
            None => tracing::warn!(
                ?heard_ago,
                "store session expired with no request unanswered"
            ),
        }
        self.set_current(None);
        self.send(Event::SessionExpired);
    }

    /// Resolves once `session` is no longer the session held.
    pub async fn session_ended(&self, session: SessionId) {
        let mut changes = self.current.subscribe();
        // The sender lives as long as `self`: it cannot close while we
        // borrow it.
        let _ = changes
            .wait_for(|s| s.as_ref().map(StoreSession::id) != Some(session))
            .await;
    }

    /// Sends an event to the member (dropped if the runtime is gone).
    pub fn send(&self, event: Event) {
        send_event(&self.events, event);
    }

    /// A moment at or before the latest moment the store heard from the
    /// session: what [`Event::SessionSuspended`] reports.
    pub fn last_heard(&self) -> &LastHeard {
        &self.last_heard
    }

    /// Marks the backend as closing: its session follower must not open a
    /// new session any more.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether [`SessionState::close`] was called.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Opens a new session after an expiry with `open`, retrying after a
    /// growing pause until it works or the backend closes (`None`). Gives
    /// what `open` made and the moment the successful attempt began, for
    /// [`SessionState::established`] once the caller has checked that the
    /// backend is still not closing.
    ///
    /// An error retrying cannot mend (a configuration or session timeout the
    /// store refuses) is sent to the member once, as a store problem: the
    /// application must hear of it, not only the log.
    pub async fn reopen<T, F, Fut>(&self, store: &str, mut open: F) -> Option<(T, Instant)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BackendError>>,
    {
        let mut backoff = ReconnectBackoff::new();
        let mut reported = false;
        loop {
            if self.is_closing() {
                return None;
            }
            let before = Instant::now();
            match open().await {
                Ok(opened) => return Some((opened, before)),
                Err(error) => {
                    tracing::warn!(%error, store, "cannot open a new session; retrying in {:?}", backoff.next());
                    let permanent = matches!(
                        error,
                        BackendError::Config(_) | BackendError::SessionTimeout { .. }
                    );
                    if permanent && !reported {
                        reported = true;
                        self.send(Event::StoreProblem {
                            operation: Operation::OpenSession,
                            error: StoreError::Other(ClientError::new(error)),
                        });
                    }
                    backoff.wait().await;
                }
            }
        }
    }
}

/// One lock per partition, for a backend whose claims, releases and commits
/// of one partition must reach the store in the order they were submitted
/// and must not interleave. Locks nobody holds or waits for are forgotten.
#[derive(Debug, Default)]
struct PartitionLocks {
    locks: Mutex<HashMap<TopicPartition, Arc<tokio::sync::Mutex<()>>>>,
}

/// The fewest locks kept before the unused ones are forgotten.
const PARTITION_LOCKS_KEPT: usize = 64;

impl PartitionLocks {
    /// Waits for the lock of `partition`; it is released when the guard is
    /// dropped.
    async fn lock(&self, partition: &TopicPartition) -> OwnedMutexGuard<()> {
        let lock = {
            // A panic while holding the map leaves it consistent: entries
            // are only added or removed whole.
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            // Unused locks are forgotten once the map has doubled since,
            // so that a burst of thousands of partitions costs each lock
            // a constant share of the sweeps, not a sweep of its own.
            if locks.len() >= PARTITION_LOCKS_KEPT && locks.len() == locks.capacity() {
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            locks.entry(partition.clone()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

/// A moment at or before the latest moment the store is known to have heard
/// from a session (renewed it): what [`Event::SessionSuspended`] reports.
/// It only moves forward.
#[derive(Debug)]
pub struct LastHeard(Mutex<Instant>);

impl LastHeard {
    /// Heard at `at` (the session's start, say).
    pub fn new(at: Instant) -> LastHeard {
        LastHeard(Mutex::new(at))
    }

    /// Notes that the store heard from the session at or after `at`.
    pub fn heard(&self, at: Instant) {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if at > *last {
            *last = at;
        }
    }

    /// The moment noted last.
    pub fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Checks what every backend checks before it opens its first session.
pub fn check_start(started: bool, session_timeout: Duration) -> Result<(), BackendError> {
    if started {
        return Err(BackendError::Config(
            "the backend has been started already".to_owned(),
        ));
    }
    if session_timeout.is_zero() {
        return Err(BackendError::Config(
            "session timeout must be greater than zero".to_owned(),
        ));
    }
    Ok(())
}

/// What a backend shares between itself, the tasks that carry out its
/// commands and the task that follows its session: its configuration and
/// layout, and a [`SessionState`].
pub trait SharedState: Send + Sync + 'static {
    /// The backend's session type.
    type Session: StoreSession;

    /// The session state.
    fn state(&self) -> &SessionState<Self::Session>;
}

/// A started backend: what it shares, and its tasks — one per command in
/// flight (and the watch it leaves behind), and the one that follows the
/// session.
#[derive(Debug)]
pub struct Running<T> {
    shared: Arc<T>,
    commands: JoinSet<()>,
    follower: JoinHandle<()>,
    /// Claims, offset reads, commits and releases submitted and not taken
    /// yet by the task that sends them as batches ([`submit`]).
    gathered: Arc<Mutex<Vec<StoreRequest>>>,
}

impl<T: SharedState> Running<T> {
    /// A backend sharing `shared`, whose session `follower` follows.
    pub fn new(shared: Arc<T>, follower: JoinHandle<()>) -> Running<T> {
        Running {
            shared,
            commands: JoinSet::new(),
            follower,
            gathered: Arc::default(),
        }
    }

    /// What the backend shares.
    pub fn shared(&self) -> &Arc<T> {
        &self.shared
    }

    /// Stops the follower and every command task, waits until they have
    /// ended (and dropped what they held of the session), and takes the
    /// session held, if any, for the backend to close.
    pub async fn stop(mut self) -> Option<T::Session> {
        self.shared.state().close();
        self.follower.abort();
        let _ = (&mut self.follower).await;
        self.commands.abort_all();
        while self.commands.join_next().await.is_some() {}
        self.take_session()
    }

    /// Stops the follower and every command task without waiting (for
    /// `Drop`), and takes the session held, if any.
    pub fn abort(mut self) -> Option<T::Session> {
        self.shared.state().close();
        self.follower.abort();
        // Dropping the set aborts the command tasks.
        self.commands.abort_all();
        self.take_session()
    }

    fn take_session(&self) -> Option<T::Session> {
        let state = self.shared.state();
        let current = state.current();
        state.set_current(None);
        current
    }
}

/// Carries out `command` on the backend `running`, in a task of its own, by
/// `execute`, if it was issued under the session held now. Claims, offset
/// reads, commits and releases are gathered instead: the first one
/// submitted after the last batch left starts a task that, once the
/// submitting task yields (the member's step is over: every request the
/// step decided is submitted), takes all that was gathered and carries it
/// out with `execute_batch`, in batches of one kind and at most
/// [`OPS_PER_BATCH`].
///
/// A command issued under a session that ended fails with
/// [`StoreError::SessionExpired`]: it must not act under the next one (a
/// claim would leave a record no member tracks). A backend that is not
/// running (not started, or shut down) has no one to answer: the command is
/// logged and dropped.
pub fn submit<T, F, G>(
    running: Option<&mut Running<T>>,
    command: StoreRequest,
    execute: impl FnOnce(Arc<T>, T::Session, StoreRequest) -> F,
    execute_batch: impl Fn(Arc<T>, T::Session, Vec<StoreRequest>) -> G + Send + 'static,
) where
    T: SharedState,
    F: Future<Output = ()> + Send + 'static,
    G: Future<Output = ()> + Send + 'static,
{
    let Some(running) = running else {
        let event = command.failed(StoreError::SessionExpired);
        tracing::warn!(?event, "command submitted to a backend that is not running");
        return;
    };
    // Forget finished tasks so the set does not grow.
    while running.commands.try_join_next().is_some() {}
    let state = running.shared.state();
    match state.current() {
        Some(current) if current.id() == command.session => {
            if command.op.batch_kind().is_some() {
                let mut gathered = running.gathered.lock().unwrap_or_else(|e| e.into_inner());
                gathered.push(command);
                if gathered.len() == 1 {
                    let (shared, gathered) = (running.shared.clone(), running.gathered.clone());
                    running
                        .commands
                        .spawn(send_gathered(shared, gathered, execute_batch));
                }
                return;
            }
            let task = execute(running.shared.clone(), current, command);
            running.commands.spawn(task);
        }
        _ => state.send(command.failed(StoreError::SessionExpired)),
    }
}

/// Takes the requests gathered once the member's step is over, and carries
/// them out in batches of one kind, all at once, under the session they
/// were issued under (failed with [`StoreError::SessionExpired`] if it
/// ended since).
async fn send_gathered<T, G>(
    shared: Arc<T>,
    gathered: Arc<Mutex<Vec<StoreRequest>>>,
    execute_batch: impl Fn(Arc<T>, T::Session, Vec<StoreRequest>) -> G,
) where
    T: SharedState,
    G: Future<Output = ()>,
{
    // The member's task submits a step's requests without yielding: they
    // are all gathered when this task runs after it.
    tokio::task::yield_now().await;
    let gathered = std::mem::take(&mut *gathered.lock().unwrap_or_else(|e| e.into_inner()));
    let state = shared.state();
    let current = state.current();
    let mut kinds: [Vec<Vec<StoreRequest>>; StoreOp::BATCH_KINDS] = Default::default();
    for command in gathered {
        match (&current, command.op.batch_kind()) {
            (Some(current), Some(kind)) if current.id() == command.session => {
                let batches = &mut kinds[kind];
                match batches.last_mut() {
                    Some(batch) if batch.len() < OPS_PER_BATCH => batch.push(command),
                    _ => batches.push(vec![command]),
                }
            }
            _ => state.send(command.failed(StoreError::SessionExpired)),
        }
    }
    let Some(current) = current else {
        return;
    };
    let sends = kinds
        .into_iter()
        .flatten()
        .map(|batch| execute_batch(shared.clone(), current.clone(), batch));
    futures_util::future::join_all(sends).await;
}

/// How many of one member's store requests are on the wire at once: the
/// others wait their turn in the member's process.
pub const REQUESTS_IN_FLIGHT: usize = 64;

/// The turns of a member's store requests: at most [`REQUESTS_IN_FLIGHT`]
/// are sent and unanswered at once.
///
/// A cold start or a rebalance asks the store for a few requests per
/// partition at once. Sent all together, thousands of them would queue in
/// the server ahead of the session's keep-alives (ZooKeeper answers a
/// session's requests in order), and those that time out on the wire are
/// cancelled, which an HTTP/2 server counts against the connection (etcd
/// closes it with `ENHANCE_YOUR_CALM` after too many), taking the
/// keep-alives with it. Waiting here instead, the keep-alives, which do not
/// take a turn, stay behind at most this many requests; a request's
/// timeout starts when it is sent.
#[derive(Debug)]
pub struct RequestTurns {
    slots: tokio::sync::Semaphore,
    /// Every request waiting for its turn or unanswered: when it began
    /// waiting, and when it was sent.
    requests: Mutex<BTreeMap<u64, (Instant, Option<Instant>)>>,
    next: AtomicU64,
}

impl Default for RequestTurns {
    fn default() -> Self {
        RequestTurns {
            slots: tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT),
            requests: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        }
    }
}

/// What a member's requests are doing at one moment
/// ([`RequestTurns::backlog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog {
    /// Requests waiting for their turn or unanswered.
    pub requests: usize,
    /// Of those, the ones sent.
    pub sent: usize,
    /// How long the oldest has waited so far.
    pub oldest: Duration,
    /// How much of that it waited for its turn.
    pub oldest_waited: Duration,
}

/// A request's turn, from [`RequestTurns::take`]: the request may be sent
/// while it is held, and is forgotten when it is dropped.
#[derive(Debug)]
pub struct Turn<'a> {
    turns: &'a RequestTurns,
    id: u64,
    _slot: Option<tokio::sync::SemaphorePermit<'a>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.lock().remove(&self.id);
    }
}

impl RequestTurns {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Instant, Option<Instant>)>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a request's turn, held until the guard is dropped (once
    /// the request is answered or given up).
    pub async fn take(&self) -> Turn<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // Forgotten if this future is dropped while it waits.
        let mut turn = Turn {
            turns: self,
            id,
            _slot: None,
        };
        self.lock().insert(id, (Instant::now(), None));
        // Never closed: an error would only mean no bound.
        turn._slot = self.slots.acquire().await.ok();
        if let Some(entry) = self.lock().get_mut(&id) {
            entry.1 = Some(Instant::now());
        }
        turn
    }

    /// What the requests are doing now; `None` when none waits or is
    /// unanswered.
    pub fn backlog(&self) -> Option<Backlog> {
        let requests = self.lock();
        let (&_, &(began, sent)) = requests.iter().next()?;
        let now = Instant::now();
        Some(Backlog {
            requests: requests.len(),
            sent: requests.values().filter(|(_, sent)| sent.is_some()).count(),
            oldest: now.saturating_duration_since(began),
            oldest_waited: sent.unwrap_or(now).saturating_duration_since(began),
        })
    }
}

/// A watch left behind by a request: resolves to `true` when what it
/// watches changed, `false` when it ended without a change (the session
/// ended, say). It must not keep the session open.
pub type Watch = Pin<Box<dyn Future<Output = bool> + Send + 'static>>;

/// The core's store commands, carried out by one store under one session:
/// each method is one command's work, with the semantics of the reference
/// adapter (`tenure_core::model::adapter`). [`execute`] turns a command into
/// calls of these and their results into events.
#[async_trait]
pub trait StoreOps: Send + Sync + Sized + 'static {
    /// Creates the member's registration under this session, or says
    /// whose session holds it.
    async fn register(&self, member: &MemberInfo) -> Result<RegisterOutcome, StoreError>;

    /// Deletes this member's registration if this session holds it.
    async fn deregister(&self) -> Result<(), StoreError>;

    /// Confirms the session is alive on the server.
    async fn heartbeat(&self) -> Result<(), StoreError>;

    /// Reads the registered members and watches their list.
    async fn watch_members(&self) -> Result<(Vec<MemberInfo>, Watch), StoreError>;

    /// Creates the owner record of `partition`, or reads the one there is.
    async fn claim(&self, partition: &TopicPartition) -> Result<ClaimOutcome, StoreError>;

    /// Claims every one of `partitions` (at most [`OPS_PER_BATCH`]),
    /// each with its own outcome, in their order, as [`StoreOps::claim`]
    /// would: a store that can do many writes in one request does them
    /// together, and falls back to one claim per partition where the batch
    /// fails as a whole (one partition held must not fail the others). By
    /// default, [`StoreOps::claim_each`].
    async fn claim_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        self.claim_each(partitions).await
    }

    /// Claims each of `partitions` on its own, all at once: what a batch
    /// falls back to.
    async fn claim_each(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        futures_util::future::join_all(partitions.iter().map(|p| self.claim(p))).await
    }

    /// Reads the committed offsets of every one of `partitions` (at most
    /// [`OPS_PER_BATCH`]), each with its own outcome, in their order, as
    /// [`StoreOps::read_offset`] would: in one request where the store can.
    /// By default, [`StoreOps::read_offset_each`].
    async fn read_offset_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Offset>, StoreError>> {
        self.read_offset_each(partitions).await
    }

    /// Reads the offset of each of `partitions` on its own, all at once.
    async fn read_offset_each(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Offset>, StoreError>> {
        futures_util::future::join_all(partitions.iter().map(|p| self.read_offset(p))).await
    }

    /// Writes each of `commits` (partition, offset, claim token; at most
    /// [`OPS_PER_BATCH`]) as [`StoreOps::commit`] would, each with its own
    /// outcome, in their order: in one request where the store can, and
    /// one commit per partition where the batch fails as a whole (one
    /// partition no longer ours must not fail the others). By default,
    /// [`StoreOps::commit_each`].
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Offset, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        self.commit_each(commits).await
    }

    /// Commits each of `commits` on its own, all at once.
    async fn commit_each(
        &self,
        commits: &[(TopicPartition, Offset, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        let each = commits.iter().map(|(p, o, t)| self.commit(p, *o, *t));
        futures_util::future::join_all(each).await
    }

    /// Releases each of `releases` (partition, claim token if known; at
    /// most [`OPS_PER_BATCH`]) as [`StoreOps::release`] would, each with its
    /// own outcome, in their order: in one request where the store can. By
    /// default, [`StoreOps::release_each`].
    async fn release_many(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>)],
    ) -> Vec<Result<(), StoreError>> {
        self.release_each(releases).await
    }

    /// Releases each of `releases` on its own, all at once.
    async fn release_each(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>)],
    ) -> Vec<Result<(), StoreError>> {
        let each = releases.iter().map(|(p, t)| self.release(p, *t));
        futures_util::future::join_all(each).await
    }

    /// Whether the owner record of `partition` exists, and a watch on it:
    /// a store may leave none when the record is absent, or one that fires
    /// when it is created.
    async fn watch_owner(
        &self,
        partition: &TopicPartition,
    ) -> Result<(bool, Option<Watch>), StoreError>;

    /// Deletes the owner record of `partition` if it is this session's
    /// claim (with `token`, when given).
    async fn release(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
    ) -> Result<(), StoreError>;

    /// Reads the committed offset of `partition`.
    async fn read_offset(&self, partition: &TopicPartition) -> Result<Option<Offset>, StoreError>;

    /// Writes `offset` as the committed offset of `partition`, only while
    /// its owner record is the claim `token` of this session.
    async fn commit(
        &self,
        partition: &TopicPartition,
        offset: Offset,
        token: FencingToken,
    ) -> Result<(), StoreError>;
}

/// Carries out `command` by `ops` and sends its result event to the member
/// of `state`; for a watch, goes on (with `ops` dropped, so that it holds no
/// session) to wait for the notification and send it.
///
/// Claims, releases and commits of one partition run one at a time, in the
/// order they were submitted: a commit submitted before a release reaches
/// the store before it.
pub async fn execute<S: StoreSession, O: StoreOps>(
    state: &SessionState<S>,
    ops: O,
    command: StoreRequest,
) {
    let events = state.events.clone();
    let partition_turn = match &command.op {
        StoreOp::Claim { partition }
        | StoreOp::Release { partition, .. }
        | StoreOp::CommitOffset { partition, .. } => {
            Some(state.partition_locks.lock(partition).await)
        }
        _ => None,
    };
    let id = command.id;
    let (event, watch) = match command.op {
        StoreOp::Register { member } => {
            let result = ops.register(&member).await;
            (Event::RegisterResult { id, result }, None)
        }
        StoreOp::Deregister => {
            let result = ops.deregister().await;
            (Event::DeregisterResult { id, result }, None)
        }
        StoreOp::Heartbeat => {
            let result = ops.heartbeat().await;
            (Event::HeartbeatResult { id, result }, None)
        }
        StoreOp::WatchMembers => match ops.watch_members().await {
            Ok((members, watch)) => (
                Event::MembersResult {
                    id,
                    result: Ok(members),
                },
                Some((watch, Event::MembersChanged)),
            ),
            Err(e) => (Event::MembersResult { id, result: Err(e) }, None),
        },
        StoreOp::Claim { partition } => {
            let result = ops.claim(&partition).await;
            (Event::ClaimResult { id, result }, None)
        }
        StoreOp::WatchOwner { partition } => match ops.watch_owner(&partition).await {
            Ok((exists, watch)) => (
                Event::OwnerWatchResult {
                    id,
                    result: Ok(exists),
                },
                watch.map(|watch| (watch, Event::OwnerDeleted { partition })),
            ),
            Err(e) => (Event::OwnerWatchResult { id, result: Err(e) }, None),
        },
        StoreOp::Release { partition, token } => {
            let result = ops.release(&partition, token).await;
            (Event::ReleaseResult { id, result }, None)
        }
        StoreOp::ReadOffset { partition } => {
            let result = ops.read_offset(&partition).await;
            (Event::OffsetResult { id, result }, None)
        }
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
        } => {
            let result = ops.commit(&partition, offset, token).await;
            (Event::CommitResult { id, result }, None)
        }
    };
    send_event(&events, event);
    if let Some((watch, notification)) = watch {
        // The watch must not keep the session open (at shutdown, say), nor
        // the partition's lock.
        drop(partition_turn);
        drop(ops);
        if watch.await {
            send_event(&events, notification);
        }
    }
}

/// Carries out requests of one kind gathered together (at most
/// [`OPS_PER_BATCH`]) with the `_many` methods of [`StoreOps`], and answers
/// each with its own result event. The partitions of claims, commits and
/// releases are locked first, as [`execute`] locks each.
pub async fn execute_batch<S: StoreSession, O: StoreOps>(
    state: &SessionState<S>,
    ops: O,
    commands: Vec<StoreRequest>,
) {
    let mut claims = Vec::new();
    let mut reads = Vec::new();
    let mut commits = Vec::new();
    let mut releases = Vec::new();
    for command in commands {
        let id = command.id;
        match command.op {
            StoreOp::Claim { partition } => claims.push((id, partition)),
            StoreOp::ReadOffset { partition } => reads.push((id, partition)),
            StoreOp::CommitOffset {
                partition,
                offset,
                token,
            } => commits.push((id, (partition, offset, token))),
            StoreOp::Release { partition, token } => releases.push((id, (partition, token))),
            op => {
                let command = StoreRequest { op, ..command };
                tracing::error!(?command, "a command that does not go in batches in a batch");
                state.send(command.failed(StoreError::Other(ClientError::message(
                    "a command that does not go in batches in a batch",
                ))));
            }
        }
    }
    // Locked in order, so that two batches never wait for each other.
    let mut locked: Vec<&TopicPartition> = claims
        .iter()
        .map(|(_, p)| p)
        .chain(commits.iter().map(|(_, (p, _, _))| p))
        .chain(releases.iter().map(|(_, (p, _))| p))
        .collect();
    locked.sort();
    locked.dedup();
    let mut turns = Vec::with_capacity(locked.len());
    for partition in locked {
        turns.push(state.partition_locks.lock(partition).await);
    }
    if !reads.is_empty() {
        let (ids, partitions) = reads.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = ops.read_offset_many(&partitions).await;
        answer(state, ids, results, "offset reads", |id, result| {
            Event::OffsetResult { id, result }
        });
    }
    if !claims.is_empty() {
        let (ids, partitions) = claims.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = ops.claim_many(&partitions).await;
        answer(state, ids, results, "claims", |id, result| {
            Event::ClaimResult { id, result }
        });
    }
    if !commits.is_empty() {
        let (ids, commits) = commits.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = ops.commit_many(&commits).await;
        answer(state, ids, results, "commits", |id, result| {
            Event::CommitResult { id, result }
        });
    }
    if !releases.is_empty() {
        let (ids, releases) = releases.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = ops.release_many(&releases).await;
        answer(state, ids, results, "releases", |id, result| {
            Event::ReleaseResult { id, result }
        });
    }
}

/// Sends the result event of each of `ids`, from `results` in the same
/// order; a request the store's batch (of `what`) left unanswered fails.
fn answer<S: StoreSession, T>(
    state: &SessionState<S>,
    ids: Vec<RequestId>,
    results: Vec<Result<T, StoreError>>,
    what: &str,
    event: impl Fn(RequestId, Result<T, StoreError>) -> Event,
) {
    let mut results = results.into_iter();
    for id in ids {
        let result = results.next().unwrap_or_else(|| {
            Err(StoreError::Other(ClientError::message(format!(
                "the store's batch of {what} answered fewer than it was given"
            ))))
        });
        state.send(event(id, result));
    }
}

/// Delays injected into command execution, for reproducing races in tests
/// (a backend's `hooks` builder method, feature `testing`).
///
/// Both default to zero (no delay). Production code has no reason to set
/// them, and without the feature no backend takes them.
#[cfg_attr(not(feature = "testing"), doc(hidden))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Sleep before a claim that met an existing owner record reads it.
    ///
    /// On ZooKeeper this delay sits between a failed create and the separate
    /// read of the owner, where the original system's NodeExists → NoNode
    /// race lives: it widens the window in which the owner can release, so
    /// that the read fails with NoNode. On etcd a claim is a single
    /// transaction ("create the key if its create_revision is 0, else read
    /// it"), evaluated atomically by the server: the owner cannot vanish
    /// between the failed compare and the read, so that race cannot happen
    /// at all. There the delay comes before the transaction and only widens
    /// the window between the claim's submission and its evaluation.
    pub delay_owner_read: Duration,
    /// Sleep before a release deletes the owner record (ZooKeeper: between
    /// its read of the record and the delete; etcd: before its
    /// transaction).
    pub delay_release: Duration,
}

impl Hooks {
    /// Waits [`Hooks::delay_owner_read`].
    pub async fn before_owner_read(&self) {
        pause(self.delay_owner_read).await;
    }

    /// Waits [`Hooks::delay_release`].
    pub async fn before_release(&self) {
        pause(self.delay_release).await;
    }
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Why opening a session failed, before it becomes a [`BackendError`]; `E`
/// is the store client's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError<E> {
    /// No server answered within the connect timeout.
    #[error("no server answered within {0:?}")]
    Timeout(Duration),
    /// The client refused the address it was given.
    #[error("invalid address {address:?}: {source}")]
    BadAddress {
        /// The address, as given.
        address: String,
        /// What the client said.
        source: E,
    },
    /// The store is reachable but cannot be used as configured (a missing
    /// ZooKeeper chroot, say).
    #[error("{0}")]
    Unusable(String),
    /// The store granted a shorter session than asked.
    #[error("the server granted a session of {granted:?}, shorter than the {asked:?} asked")]
    ShorterSession {
        /// The member's session timeout.
        asked: Duration,
        /// What the store granted.
        granted: Duration,
    },
    /// The store refused this client: its credentials or certificates
    /// (the detail says what to fix).
    #[error("{0}")]
    Denied(String),
    /// The client failed otherwise.
    #[error("{0}")]
    Client(E),
}

impl<E: std::error::Error + Send + Sync + 'static> OpenError<E> {
    /// The error as the runtime sees it, naming `store`: configuration
    /// errors (retrying cannot help) apart from failures to connect.
    pub fn into_backend_error(self, store: String) -> BackendError {
        match self {
            OpenError::BadAddress { .. } | OpenError::Unusable(_) => {
                BackendError::Config(format!("{store}: {self}"))
            }
            OpenError::ShorterSession { asked, granted } => BackendError::SessionTimeout {
                store,
                asked,
                granted,
            },
            OpenError::Denied(detail) => BackendError::Denied { store, detail },
            OpenError::Timeout(_) | OpenError::Client(_) => BackendError::Connect {
                store,
                detail: self.to_string(),
            },
        }
    }
}

/// The growing pause between attempts to open a new session after an
/// expiry: from half a second, doubling, up to five.
#[derive(Debug)]
struct ReconnectBackoff(Duration);

impl ReconnectBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);

    /// The first pause.
    fn new() -> ReconnectBackoff {
        ReconnectBackoff(Self::FIRST)
    }

    /// The next pause.
    fn next(&self) -> Duration {
        self.0
    }

    /// Waits the next pause, and makes the one after it longer.
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Self::MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use futures_util::FutureExt;

    use tenure_core::{Event, Operation, SessionId, StoreError};

    use super::{RequestTurns, SessionState, StoreSession, REQUESTS_IN_FLIGHT};

    #[derive(Clone)]
    struct Session;

    impl StoreSession for Session {
        fn id(&self) -> SessionId {
            SessionId(1)
        }
    }

    #[tokio::test]
    async fn an_expiry_with_requests_unanswered_tells_the_member_what_waited() {
        let (events, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let state = SessionState::new(events, Session, std::time::Instant::now());
        let turn = state.turns().take().await;
        state.expired();
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
        drop(turn);

        // With nothing unanswered, only the expiry.
        let (events, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let state = SessionState::new(events, Session, std::time::Instant::now());
        state.expired();
        assert!(matches!(heard.recv().await, Some(Event::SessionExpired)));
    }

    #[tokio::test]
    async fn a_backlog_names_the_oldest_request_and_how_long_it_waited_for_its_turn() {
        let turns = RequestTurns::default();
        assert_eq!(turns.backlog(), None);
        let mut held = Vec::new();
        for _ in 0..REQUESTS_IN_FLIGHT {
            held.push(turns.take().await);
        }
        let waiting = turns.take();
        tokio::pin!(waiting);
        // Polled once: it waits for a turn.
        assert!(waiting.as_mut().now_or_never().is_none());
        let backlog = turns.backlog().expect("requests are unanswered");
        assert_eq!(
            (backlog.requests, backlog.sent),
            (REQUESTS_IN_FLIGHT + 1, REQUESTS_IN_FLIGHT)
        );
        drop(held.remove(0));
        let turn = waiting.await;
        let backlog = turns.backlog().expect("requests are unanswered");
        assert_eq!(
            (backlog.requests, backlog.sent),
            (REQUESTS_IN_FLIGHT, REQUESTS_IN_FLIGHT)
        );
        drop(held);
        drop(turn);
        assert_eq!(turns.backlog(), None, "answered requests are forgotten");
    }

    #[tokio::test]
    async fn no_more_requests_than_turns_are_in_flight_and_all_get_one() {
        let turns = Arc::new(RequestTurns::default());
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (release, released) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..REQUESTS_IN_FLIGHT * 3 {
            let (turns, now, most) = (turns.clone(), now.clone(), most.clone());
            let mut released = released.clone();
            tasks.spawn(async move {
                let _turn = turns.take().await;
                let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(in_flight, Ordering::SeqCst);
                // Held until every turn is taken at least once over.
                let _ = released.wait_for(|go| *go).await;
                now.fetch_sub(1, Ordering::SeqCst);
            });
        }
        while now.load(Ordering::SeqCst) < REQUESTS_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
        // Every task has run as far as it can: the others wait for a turn.
        for _ in 0..REQUESTS_IN_FLIGHT * 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(most.load(Ordering::SeqCst), REQUESTS_IN_FLIGHT);
        release.send_replace(true);
        let mut finished = 0;
        while let Some(done) = tasks.join_next().await {
            done.expect("a request task panicked");
            finished += 1;
        }
        assert_eq!(
            finished,
            REQUESTS_IN_FLIGHT * 3,
            "every request had its turn"
        );
        assert_eq!(most.load(Ordering::SeqCst), REQUESTS_IN_FLIGHT);
    }
}

/// The same failure for each of `count` requests sent together: what a
/// batch whose request failed as a whole answers for each of its requests.
pub fn each_failed<T>(count: usize, error: StoreError) -> Vec<Result<T, StoreError>> {
    (0..count).map(|_| Err(error.clone())).collect()
}

/// The member registrations a backend read last, by member id, kept so
/// that a read of the member list after a change reads only the
/// registrations the change made. Every member reads the list at every
/// change in membership: reading every registration each time made a cold
/// start of M members cost M² registration reads and decodes, most of
/// what a single store did for 300 members.
///
/// A backend keeps one beside its session state and takes it out for the
/// length of a read (the member reads its list one read at a time; a read
/// that fails puts nothing back, and the next reads everything). What
/// tells it which registrations changed is the store's: ZooKeeper's child
/// version of the members' node, etcd's revisions.
#[derive(Clone, Debug, Default)]
pub struct Registrations {
    by_id: BTreeMap<String, Entry>,
}

/// One listed registration as it was read.
#[derive(Clone, Debug)]
enum Entry {
    /// A member's record.
    Member(MemberInfo),
    /// A record that does not decode: left out of the members (the others
    /// leave it out too) and reported when it was read.
    Unreadable,
    /// Listed, but gone by the time it was read.
    Gone,
}

impl Registrations {
    /// Whether the registration of `id` was read (or found gone).
    pub fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// How many registrations were read (or found gone).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The ids of the registrations read (or found gone), in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_id.keys().map(String::as_str)
    }

    /// Forgets every registration whose id `keep` refuses.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.by_id.retain(|id, _| keep(id));
    }

    /// Notes that the registration of `id` was listed but gone when read:
    /// no member, and nothing to read again while it stays listed.
    pub fn gone(&mut self, id: String) {
        self.by_id.insert(id, Entry::Gone);
    }

    /// Decodes the registration of `id` read at `path` from `data`. One
    /// that does not decode is left out of the members, but worth an
    /// operator's look: it is reported to the member as a
    /// [`StoreError::Corrupt`] of [`Operation::ReadRegistration`].
    pub fn read<S: StoreSession>(
        &mut self,
        state: &SessionState<S>,
        id: String,
        path: &str,
        data: &[u8],
    ) {
        let entry = match tenure_core::records::decode_registration(&id, data) {
            Ok(info) => Entry::Member(info),
            Err(detail) => {
                tracing::warn!(%path, %detail, "ignoring corrupt member registration");
                state.send(Event::StoreProblem {
                    operation: Operation::ReadRegistration,
                    error: StoreError::Corrupt {
                        path: path.to_owned(),
                        detail,
                    },
                });
                Entry::Unreadable
            }
        };
        self.by_id.insert(id, entry);
    }

    /// The members: every registration read that decoded, by id.
    pub fn members(&self) -> Vec<MemberInfo> {
        self.by_id
            .values()
            .filter_map(|entry| match entry {
                Entry::Member(info) => Some(info.clone()),
                Entry::Unreadable | Entry::Gone => None,
            })
            .collect()
    }
}
