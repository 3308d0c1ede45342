//! ZooKeeper backend for tenure: carries the core's store commands to
//! ZooKeeper and brings results, watch notifications and session changes
//! back as core events.
//!
//! The znodes are those of Kafka 0.8's ZooKeeper consumer (and of the Go
//! `consumergroup` package), under `<chroot>/consumers/<group>`:
//! - `ids/<member>`: ephemeral, the member's JSON registration;
//! - `owners/<topic>/<partition>`: ephemeral, the owner's member id;
//! - `offsets/<topic>/<partition>`: persistent, the next offset to consume as
//!   ASCII decimal.
//!
//! Every command is carried out as the simulator's reference adapter
//! (`tenure_core::model::adapter`) carries it out, one ZooKeeper request after
//! another, each command in its own task so that commands pipeline.
//!
//! The fencing token of a claim is the owner node's `czxid`; an offset commit
//! is a multi-op guarded by a version check of the owner node. ZooKeeper 3.5
//! or later is required (the client asks for the created node's stat).
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_zookeeper::ZooKeeperBackend;
//!
//! let backend = ZooKeeperBackend::new("zk1:2181,zk2:2181/kafka")
//!     .session_timeout(Duration::from_secs(10));
//! # drop(backend);
//! ```

#![deny(missing_docs)]

mod admin;
mod ops;
mod session;

pub use admin::ZooKeeperAdmin;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::records::Layout;
use tenure_core::{Command, Event, MemberInfo, SessionId, StoreError};
use tenure_tokio::{Backend, BackendError, EventSender, Joining, LastHeard, PartitionLocks};
use tokio::task::{JoinHandle, JoinSet};
use zookeeper_client as zk;

/// The session timeout asked of the server when none is set (the core's
/// default session timeout).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Backend::start`] waits for a server to answer when no other
/// bound is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Backend::shutdown`] waits for the server to confirm that the
/// session is closed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

// Test hooks are public only with the `testing` feature, which the
// workspace's tests turn on: production builds cannot set them.
#[cfg(feature = "testing")]
pub use hooks::Hooks;
#[cfg(not(feature = "testing"))]
use hooks::Hooks;

mod hooks {
    use std::time::Duration;

    /// Delays injected into command execution, for reproducing races in tests
    /// (feature `testing`).
    ///
    /// Both default to zero (no delay); production code has no reason to set
    /// them, and without the feature it cannot.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Hooks {
        /// Sleep between a claim's create failing with NodeExists and its
        /// follow-up read of the owner node: widens the window in which the
        /// owner can release, so the read fails with NoNode.
        pub delay_owner_read: Duration,
        /// Sleep between a release's read of the owner node and its delete.
        pub delay_release: Duration,
    }
}

/// A [`Backend`] that keeps a group member's records in ZooKeeper.
///
/// Built with [`ZooKeeperBackend::new`] and the builder methods; the session
/// opens in [`Backend::start`]. After a session expires the backend opens a
/// new one by itself (an expired ZooKeeper session cannot be revived).
#[derive(Debug)]
pub struct ZooKeeperBackend {
    config: Config,
    running: Option<Running>,
}

/// What a (re)connection needs.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) hooks: Hooks,
    /// Requests sent to ZooKeeper so far, across sessions.
    pub(crate) requests: Arc<AtomicU64>,
}

impl Config {
    /// How the store is named in errors and logs.
    pub(crate) fn store(&self) -> String {
        format!("ZooKeeper at {}", self.connect_string)
    }
}

#[derive(Debug)]
struct Running {
    shared: Arc<Shared>,
    /// Command tasks (and the watches they leave behind).
    tasks: JoinSet<()>,
    /// The task following the session state.
    follower: JoinHandle<()>,
}

/// The live client and its session.
#[derive(Clone, Debug)]
pub(crate) struct Current {
    pub(crate) client: zk::Client,
    pub(crate) session: SessionId,
}

/// State shared by the backend, its command tasks and the session follower.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) layout: Layout,
    pub(crate) member: MemberInfo,
    pub(crate) events: EventSender,
    /// `None` while a new session is being opened after an expiry, and after
    /// shutdown.
    current: Mutex<Option<Current>>,
    /// A moment at or before the latest moment the server is known to have
    /// heard from this client.
    pub(crate) last_heard: LastHeard,
    /// Set by shutdown: the follower must not reconnect any more.
    pub(crate) closing: AtomicBool,
    /// One lock per partition, held by claims, releases and commits.
    ///
    /// A commit reads the owner node, then writes in a multi guarded by the
    /// node's version. An owner node's version is 0 whoever created it, so
    /// the guard cannot tell our node from one re-created after our own
    /// release (by another member, or by our own next claim). Other
    /// members' deletions need our session to end, which fails the multi;
    /// our own release or claim in between is what this lock excludes.
    pub(crate) partition_locks: PartitionLocks,
}

impl Shared {
    fn lock_current(&self) -> MutexGuard<'_, Option<Current>> {
        // A panic while holding the lock leaves a value that is still
        // consistent (it is only ever replaced whole).
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn current(&self) -> Option<Current> {
        self.lock_current().clone()
    }

    pub(crate) fn set_current(&self, current: Option<Current>) {
        *self.lock_current() = current;
    }

    /// Sends an event to the member; a closed channel means the runtime is
    /// gone and there is no one left to tell.
    pub(crate) fn send(&self, event: Event) {
        if self.events.send(event).is_err() {
            tracing::debug!("event channel closed; event dropped");
        }
    }
}

impl ZooKeeperBackend {
    /// A backend for the ZooKeeper ensemble at `connect_string`:
    /// `host:port[,host:port...][/chroot]`. The chroot, if any, must exist.
    pub fn new(connect_string: impl Into<String>) -> Self {
        ZooKeeperBackend {
            config: Config {
                connect_string: connect_string.into(),
                session_timeout: DEFAULT_SESSION_TIMEOUT,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                hooks: Hooks::default(),
                requests: Arc::new(AtomicU64::new(0)),
            },
            running: None,
        }
    }

    /// The session timeout to ask of the server; use the member's configured
    /// session timeout (default [`DEFAULT_SESSION_TIMEOUT`]). The server
    /// bounds it (to 2–20 ticks by default). A shorter grant is refused with
    /// [`BackendError::Config`]: the server could then expire the session,
    /// and hand its partitions on, before the member stopped consuming. A
    /// longer one is logged as a warning (the member stops earlier than it
    /// must).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.config.session_timeout = timeout;
        self
    }

    /// How long [`Backend::start`] (and each reconnection after a session
    /// expiry) waits for a server to open a session (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Delays for reproducing races in tests; see [`Hooks`] (feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.config.hooks = hooks;
        self
    }

    /// A counter of the requests this backend sends to ZooKeeper (for
    /// benchmarks and metrics); it keeps counting after the backend moves
    /// into a runtime.
    pub fn request_counter(&self) -> Arc<AtomicU64> {
        self.config.requests.clone()
    }
}

#[async_trait]
impl Backend for ZooKeeperBackend {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        let (group, member, events) = (joining.group, joining.member, joining.events);
        let (group, member) = (group.as_str(), &member);
        if self.running.is_some() {
            return Err(BackendError::Config(
                "the backend has been started already".to_owned(),
            ));
        }
        if self.config.session_timeout.is_zero() {
            return Err(BackendError::Config(
                "session timeout must be greater than zero".to_owned(),
            ));
        }
        let before = Instant::now();
        let client = session::connect(&self.config).await?;
        let current = Current {
            session: session_id(&client),
            client,
        };
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            // The client applies the chroot of the connect string.
            layout: Layout::new("", group),
            member: member.clone(),
            events,
            current: Mutex::new(Some(current.clone())),
            last_heard: LastHeard::new(before),
            closing: AtomicBool::new(false),
            partition_locks: PartitionLocks::default(),
        });
        let watcher = current.client.state_watcher();
        tracing::info!(
            store = %self.config.store(),
            session = %current.client.session_id(),
            "ZooKeeper session established"
        );
        shared.send(Event::SessionEstablished {
            session: current.session,
        });
        drop(current);
        let follower = tokio::spawn(session::follow(shared.clone(), watcher));
        self.running = Some(Running {
            shared,
            tasks: JoinSet::new(),
            follower,
        });
        Ok(())
    }

    fn submit(&mut self, command: Command) {
        let (_, issued) = command.request();
        let Some(running) = self.running.as_mut() else {
            // No session yet (or any more): nothing can run under `issued`.
            let event = command.failed(StoreError::SessionExpired);
            tracing::warn!(?event, "command submitted to a backend that is not running");
            return;
        };
        // Forget finished tasks so the set does not grow.
        while running.tasks.try_join_next().is_some() {}
        let shared = running.shared.clone();
        match shared.current() {
            Some(current) if current.session == issued => {
                running.tasks.spawn(ops::execute(
                    shared,
                    current.client,
                    current.session,
                    command,
                ));
            }
            // Issued under a session that ended: it must not act under the
            // next one (a claim would leave a record no member tracks).
            _ => shared.send(command.failed(StoreError::SessionExpired)),
        }
    }

    async fn shutdown(&mut self) {
        let Some(mut running) = self.running.take() else {
            return;
        };
        running.shared.closing.store(true, Ordering::SeqCst);
        running.follower.abort();
        let _ = (&mut running.follower).await;
        // The session closes when the last clone of its client is dropped:
        // stop every task that holds one, then drop ours.
        running.tasks.abort_all();
        while running.tasks.join_next().await.is_some() {}
        let Some(current) = running.shared.lock_current().take() else {
            return;
        };
        let mut watcher = current.client.state_watcher();
        let session = current.client.session_id();
        drop(current);
        let closed = tokio::time::timeout(CLOSE_TIMEOUT, async {
            loop {
                if watcher.peek_state().is_terminated() {
                    return;
                }
                watcher.changed().await;
            }
        })
        .await;
        match closed {
            Ok(()) => tracing::info!(%session, "ZooKeeper session closed"),
            Err(_) => tracing::warn!(
                %session,
                "ZooKeeper did not confirm the session's close within {CLOSE_TIMEOUT:?}; \
                 its ephemeral nodes vanish when it expires"
            ),
        }
    }
}

impl Drop for ZooKeeperBackend {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.shared.closing.store(true, Ordering::SeqCst);
            running.follower.abort();
            // Dropping the set aborts the command tasks; with the last
            // client clone gone the session closes in the background.
            running.shared.set_current(None);
        }
    }
}

/// The tenure session id of a client's session.
pub(crate) fn session_id(client: &zk::Client) -> SessionId {
    SessionId(client.session_id().0 as u64)
}
