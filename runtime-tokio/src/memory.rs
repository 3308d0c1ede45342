//! The embedded default: an in-memory store shared by every member of the
//! process, with ZooKeeper's semantics (the same model the simulator checks),
//! so tenure runs with no server at all.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::model::adapter::{self, Execution};
use tenure_core::model::store::{Store, WatchEvent};
use tenure_core::records::Layout;
use tenure_core::{Event, MemberInfo, SessionId, StoreError, StoreRequest};
use tokio::task::JoinHandle;

use crate::backend::{check_start, Backend, BackendError, EventSender, Joining};

/// An in-memory coordination store. Clone it to share it between the
/// members of one process; each member gets its own [`MemoryBackend`].
#[derive(Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Default)]
struct Shared {
    store: Store,
    /// Where each live session's events go, and in which group's layout.
    sinks: BTreeMap<SessionId, (EventSender, Layout)>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A backend for one member; its sessions last the member's session
    /// timeout.
    pub fn backend(&self) -> MemoryBackend {
        MemoryBackend {
            store: self.clone(),
            session_timeout: Duration::ZERO,
            session: Arc::new(AtomicU64::new(0)),
            member: None,
            layout: None,
            events: None,
            keepalive: None,
        }
    }

    /// The member id the store records as owner of `partition` in `group`,
    /// if any (for tests and tools).
    pub fn owner(&self, group: &str, partition: &tenure_core::TopicPartition) -> Option<String> {
        let shared = self.lock();
        let path = Layout::new("", group).owner(partition);
        let (data, _) = shared.store.get(&path).ok()?;
        String::from_utf8(data).ok()
    }

    /// The committed offset of `partition` in `group`, if any.
    pub fn committed(&self, group: &str, partition: &tenure_core::TopicPartition) -> Option<i64> {
        let shared = self.lock();
        let path = Layout::new("", group).offset(partition);
        let (data, _) = shared.store.get(&path).ok()?;
        tenure_core::records::parse_offset(&path, &data).ok()
    }

    /// The record at `path` as the store holds it: its data, the session
    /// it belongs to (ephemeral records) and the transaction that created
    /// it (a claim's fencing token); `None` if there is none. For tests
    /// only (`path` is a full path such as
    /// `/consumers/<group>/owners/<topic>/<p>`). Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn record_for_test(&self, path: &str) -> Option<(Vec<u8>, Option<SessionId>, u64)> {
        let shared = self.lock();
        let (data, stat) = shared.store.get(path).ok()?;
        Some((data, stat.ephemeral_owner, stat.czxid))
    }

    /// Writes `data` at `path` as a persistent record, creating its parents
    /// and replacing any data already there, and fires the watches that
    /// writing it triggers. For tests only: it bypasses every check the
    /// members rely on, so that a test can put data tenure cannot read
    /// (`path` is a full path such as `/consumers/<group>/offsets/<topic>/<p>`).
    /// Feature `testing`.
    #[cfg(feature = "testing")]
    pub fn put_raw_for_test(&self, path: &str, data: &[u8]) {
        let mut shared = self.lock();
        // Stores write only on behalf of a session: a short-lived one,
        // closed at once (persistent records outlive it).
        let session = shared.store.open_session(now(), Duration::from_secs(10));
        let mut fired = shared
            .store
            .create_parents(session, path)
            .expect("valid path for put_raw_for_test");
        let written = match shared.store.exists(path) {
            Some(_) => shared.store.set_data(session, path, data.to_vec(), None),
            None => shared.store.create(
                session,
                path,
                data.to_vec(),
                tenure_core::model::store::CreateMode::Persistent,
            ),
        };
        fired.extend(written.expect("write for put_raw_for_test").1);
        fired.extend(shared.store.close_session(session));
        shared.route(fired);
    }

    /// Opens a session whose events go to `events`.
    fn open(&self, timeout: Duration, events: &EventSender, layout: &Layout) -> SessionId {
        let mut shared = self.lock();
        let session = shared.store.open_session(now(), timeout);
        shared
            .sinks
            .insert(session, (events.clone(), layout.clone()));
        session
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves the store as consistent as
        // any single operation left it: keep serving rather than poison
        // every member.
        match self.shared.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Shared {
    fn route(&self, fired: Vec<WatchEvent>) {
        for watch in fired {
            if let Some((events, layout)) = self.sinks.get(&watch.session) {
                if let Some(event) = adapter::watch_event(layout, &watch) {
                    let _ = events.send(event);
                }
            }
        }
    }

    /// Expires the sessions whose members stopped keeping them alive.
    fn reap(&mut self) {
        let fired = self.store.expire_due(now());
        let live: Vec<SessionId> = self.store.sessions();
        self.sinks.retain(|session, _| live.contains(session));
        self.route(fired);
    }
}

/// The session renewed at `at`: the embedded store counts what it hears
/// at once.
fn renewed_at(at: std::time::Instant) -> Event {
    Event::SessionRenewed {
        sent: at,
        counted_after: Duration::ZERO,
    }
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// One member's connection to a [`MemoryStore`]. Its session lives while
/// the backend does: dropping it without [`Backend::shutdown`] (a crashed
/// member) lets the session expire after its timeout, like a real store.
pub struct MemoryBackend {
    store: MemoryStore,
    /// The member's, set when it starts the backend.
    session_timeout: Duration,
    /// The current session (0: none): the keep-alive task replaces it
    /// after an expiry.
    session: Arc<AtomicU64>,
    member: Option<MemberInfo>,
    layout: Option<Layout>,
    events: Option<EventSender>,
    keepalive: Option<JoinHandle<()>>,
}

impl Drop for MemoryBackend {
    fn drop(&mut self) {
        if let Some(task) = self.keepalive.take() {
            task.abort();
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        check_start(self.member.is_some(), joining.session_timeout)?;
        self.session_timeout = joining.session_timeout;
        let (group, member, events) = (joining.group, joining.member, joining.events);
        let (group, member) = (group.as_str(), &member);
        tenure_core::types::validate_path_element("group", group)
            .map_err(|e| BackendError::Config(e.to_string()))?;
        let layout = Layout::new("", group);
        let opened = now();
        let session = self.store.open(self.session_timeout, &events, &layout);
        self.session.store(session.0, Ordering::SeqCst);
        self.member = Some(member.clone());
        self.layout = Some(layout.clone());
        self.events = Some(events.clone());
        let _ = events.send(Event::SessionEstablished { session });
        let _ = events.send(renewed_at(opened));
        // The client side of a session: ping well within the timeout, reap
        // sessions of members that are gone, and after an expiry open a new
        // session, as a ZooKeeper or etcd client would.
        let store = self.store.clone();
        let current = self.session.clone();
        let timeout = self.session_timeout;
        let every = (timeout / 3).max(Duration::from_millis(10));
        self.keepalive = Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let session = SessionId(current.load(Ordering::SeqCst));
                let touched = now();
                let alive = {
                    let mut shared = store.lock();
                    let alive = shared.store.touch(session, touched).is_ok();
                    shared.reap();
                    alive
                };
                if alive {
                    if events.send(renewed_at(touched)).is_err() {
                        return;
                    }
                } else {
                    if events.send(Event::SessionExpired).is_err() {
                        return;
                    }
                    let opened = now();
                    let renewed = store.open(timeout, &events, &layout);
                    current.store(renewed.0, Ordering::SeqCst);
                    let _ = events.send(Event::SessionEstablished { session: renewed });
                    let _ = events.send(renewed_at(opened));
                }
            }
        }));
        Ok(())
    }

    fn submit(&mut self, command: StoreRequest) {
        let session = SessionId(self.session.load(Ordering::SeqCst));
        let (Some(member), Some(layout), Some(events)) = (
            self.member.as_ref(),
            self.layout.as_ref(),
            self.events.as_ref(),
        ) else {
            tracing::warn!(?command, "command before the backend started");
            return;
        };
        let issued = command.session;
        let mut shared = self.store.lock();
        // A command of a session that ended (replaced, or reaped and not
        // replaced yet) must not act under another.
        if issued != session || !shared.sinks.contains_key(&session) {
            let _ = events.send(command.failed(StoreError::SessionExpired));
            return;
        }
        let touched = now();
        let _ = shared.store.touch(session, touched);
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut fired = Vec::new();
        let execution = adapter::execute(
            &mut shared.store,
            layout,
            session,
            member,
            command,
            timestamp,
            &mut fired,
        );
        let reply = match execution {
            Execution::Done(event) => Some(event),
            Execution::ReadOwner { id, partition } => Some(adapter::claim_read_owner(
                &shared.store,
                layout,
                id,
                &partition,
            )),
        };
        // The reply goes out before the watch notifications its own write
        // fired, as ZooKeeper orders them.
        if let Some(reply) = reply {
            // The store is its own leader: what it answers, it counted.
            if let Some(renewal) = adapter::renewal(touched, &reply) {
                let _ = events.send(renewal);
            }
            let _ = events.send(reply);
        }
        shared.route(fired);
    }

    async fn shutdown(&mut self) {
        if let Some(task) = self.keepalive.take() {
            task.abort();
        }
        let session = SessionId(self.session.swap(0, Ordering::SeqCst));
        if session.0 != 0 {
            let mut shared = self.store.lock();
            shared.sinks.remove(&session);
            let fired = shared.store.close_session(session);
            shared.route(fired);
        }
    }
}
