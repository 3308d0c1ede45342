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
//!     .connect_timeout(Duration::from_secs(10));
//! # drop(backend);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod admin;
mod ops;
mod security;
mod session;

pub use admin::ZooKeeperAdmin;
pub use security::{Digest, ZooKeeperSecurity};

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::records::Layout;
use tenure_core::{Event, MemberInfo, SessionId, StoreRequest};
use tenure_tokio::session::{
    check_start, submit, Running, SessionState, SharedState, StoreSession,
};
use tenure_tokio::{Backend, BackendError, Joining, SessionTicket};
use zookeeper_client as zk;

/// How long [`Backend::start`] waits for a server to answer when no other
/// bound is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long [`Backend::shutdown`] waits for the server to confirm that the
/// session is closed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

// Test hooks are public only with the `testing` feature, which the
// workspace's tests turn on: production builds cannot set them.
#[cfg(feature = "testing")]
pub use tenure_tokio::session::Hooks;
#[cfg(not(feature = "testing"))]
use tenure_tokio::session::Hooks;

/// A [`Backend`] that keeps a group member's records in ZooKeeper.
///
/// Built with [`ZooKeeperBackend::new`] and the builder methods; the session
/// opens in [`Backend::start`]. After a session expires the backend opens a
/// new one by itself (an expired ZooKeeper session cannot be revived).
#[derive(Debug)]
pub struct ZooKeeperBackend {
    config: Config,
    running: Option<Running<Shared>>,
}

/// What a (re)connection needs.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Who every session authenticates as, and TLS.
    pub(crate) security: ZooKeeperSecurity,
    /// Static membership: sessions are detached (a dropped client leaves
    /// its session to run out rather than close it), for a restarted
    /// process to resume.
    pub(crate) detached: bool,
    pub(crate) hooks: Hooks,
    /// Requests sent to ZooKeeper so far, across sessions.
    pub(crate) requests: Arc<AtomicU64>,
}

impl Config {
    /// How the store is named in errors and logs.
    pub(crate) fn store(&self) -> String {
        self.security.store(&self.connect_string)
    }

    /// This configuration with sessions that close with their client.
    fn attached(&self) -> Config {
        Config {
            detached: false,
            ..self.clone()
        }
    }
}

/// The live client and its session.
#[derive(Clone, Debug)]
pub(crate) struct Current {
    pub(crate) client: zk::Client,
    pub(crate) session: SessionId,
}

impl StoreSession for Current {
    fn id(&self) -> SessionId {
        self.session
    }
}

/// State shared by the backend, its command tasks and the session follower.
///
/// Claims, releases and commits of a partition hold its lock (see
/// [`tenure_tokio::session::execute`]). A commit reads the owner node, then
/// writes in a multi guarded by the node's version. An owner node's version
/// is 0 whoever created it, so the guard cannot tell our node from one
/// re-created after our own release (by another member, or by our own next
/// claim). Other members' deletions need our session to end, which fails the
/// multi; our own release or claim in between is what the lock excludes.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) layout: Layout,
    pub(crate) member: MemberInfo,
    pub(crate) state: SessionState<Current>,
    /// The member list as last read, for the next read to read only the
    /// registrations made since.
    pub(crate) listed: std::sync::Mutex<Option<ops::Listed>>,
}

impl SharedState for Shared {
    type Session = Current;

    fn state(&self) -> &SessionState<Current> {
        &self.state
    }
}

impl ZooKeeperBackend {
    /// A backend for the ZooKeeper ensemble at `connect_string`:
    /// `host:port[,host:port...][/chroot]`. The chroot, if any, must exist.
    pub fn new(connect_string: impl Into<String>) -> Self {
        ZooKeeperBackend {
            config: Config {
                connect_string: connect_string.into(),
                // The member's, set when it starts the backend.
                session_timeout: Duration::ZERO,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                security: ZooKeeperSecurity::new(),
                detached: false,
                hooks: Hooks::default(),
                requests: Arc::new(AtomicU64::new(0)),
            },
            running: None,
        }
    }

    /// How long [`Backend::start`] (and each reconnection after a session
    /// expiry) waits for a server to open a session (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Credentials and TLS for a secured ensemble (see
    /// [`ZooKeeperSecurity`] for the ACLs a digest brings).
    pub fn security(mut self, security: ZooKeeperSecurity) -> Self {
        self.config.security = security;
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
        check_start(self.running.is_some(), joining.session_timeout)?;
        self.config.session_timeout = joining.session_timeout;
        self.config.security.check()?;
        self.config.detached = joining.static_membership;
        let before = Instant::now();
        let (client, resumed) = match &joining.resume {
            Some(ticket) => match session::resume(&self.config, ticket).await {
                Some(client) => (client, true),
                None => (session::connect(&self.config).await?, false),
            },
            None => (session::connect(&self.config).await?, false),
        };
        // Credentials that do not match the group's ACL would fail every
        // request, each reported on its own: say it once, before joining.
        let layout = Layout::new("", &joining.group);
        if let Err(zk::Error::NoAuth) = client.list_children(&layout.ids()).await {
            return Err(BackendError::Denied {
                store: self.config.store(),
                detail: format!(
                    "the znodes of group {:?} were created under an ACL these credentials do \
                     not satisfy; use the digest credentials the group's members use \
                     (ZooKeeperSecurity::digest)",
                    joining.group
                ),
            });
        }
        let current = Current {
            session: session_id(&client),
            client,
        };
        let watcher = current.client.state_watcher();
        tracing::info!(
            store = %self.config.store(),
            session = %current.client.session_id(),
            "ZooKeeper session established"
        );
        let session = current.session;
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            // The client applies the chroot of the connect string.
            layout: Layout::new("", &joining.group),
            member: joining.member,
            state: SessionState::new(joining.events, current, before),
            listed: std::sync::Mutex::new(None),
        });
        shared.state.send(Event::SessionEstablished { session });
        if resumed {
            // The claims the previous process left under the session: the
            // member keeps those it is assigned and releases the others.
            if let Some(current) = shared.state.current() {
                let partitions = session::claims_held(&current.client, &shared.layout).await;
                tracing::info!(
                    session = %current.client.session_id(),
                    claims = partitions.len(),
                    "ZooKeeper session resumed from a previous process"
                );
                shared.state.send(Event::ClaimsHeld { partitions });
            }
        }
        let follower = tokio::spawn(session::follow(shared.clone(), watcher));
        self.running = Some(Running::new(shared, follower));
        Ok(())
    }

    fn submit(&mut self, command: StoreRequest) {
        submit(
            self.running.as_mut(),
            command,
            ops::execute,
            ops::execute_batch,
        );
    }

    fn ticket(&self) -> Option<SessionTicket> {
        let current = self.running.as_ref()?.shared().state.current()?;
        let session = current.client.session();
        Some(SessionTicket {
            id: session.id().0,
            secret: session.password().to_vec(),
        })
    }

    async fn detach(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        if !self.config.detached {
            // A session that is not detached closes with its client.
            self.running = Some(running);
            return self.shutdown().await;
        }
        if let Some(current) = running.stop().await {
            let session = current.client.session_id();
            // The next process resumes the session as soon as this returns
            // (the state file is let go then): see `let_go`.
            if let_go(current.client).await {
                tracing::info!(
                    %session,
                    "ZooKeeper session left to run out, for a restarted process to resume"
                );
            }
        }
    }

    async fn shutdown(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        // The session closes when the last clone of its client is dropped:
        // stop every task that holds one, then drop ours.
        let Some(mut current) = running.stop().await else {
            return;
        };
        if self.config.detached {
            // A detached client leaves its session behind when dropped: a
            // client that resumes it, not detached, closes it on its way out.
            // The detached one must be gone first, or the two take the
            // session from each other (see `let_go`).
            let ticket = ticket_of(&current.client);
            let_go(current.client).await;
            match session::resume(&self.config.attached(), &ticket).await {
                Some(client) => current.client = client,
                None => return,
            }
        }
        let session = current.client.session_id();
        if stopped(current.client, CLOSE_TIMEOUT).await {
            tracing::info!(%session, "ZooKeeper session closed");
        } else {
            tracing::warn!(
                %session,
                "ZooKeeper did not confirm the session's close within {CLOSE_TIMEOUT:?}; \
                 its ephemeral nodes vanish when it expires"
            );
        }
    }
}

impl Drop for ZooKeeperBackend {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            // With the last client clone gone the session closes in the
            // background.
            drop(running.abort());
        }
    }
}

/// Drops `client`, the last clone of it, and waits up to `timeout` for its
/// session task to end (after closing the session, unless detached):
/// whether it did.
async fn stopped(client: zk::Client, timeout: Duration) -> bool {
    let mut watcher = client.state_watcher();
    drop(client);
    let ended = tokio::time::timeout(timeout, async {
        loop {
            if watcher.peek_state().is_terminated() {
                return;
            }
            watcher.changed().await;
        }
    });
    ended.await.is_ok()
}

/// Lets go of a detached client before another client resumes its session:
/// drops it and waits until it has stopped. Until then it is connected, or
/// reconnecting, under the session: the server closes the older connection
/// of a session when a newer one opens, and a client whose connection
/// closes reconnects, closing the other's. The client that resumes would
/// then fail with a lost connection and open a new session, leaving this
/// one, with every record of the member, to run out: its partitions would
/// move after all. Whether it stopped within `CLOSE_TIMEOUT`.
async fn let_go(client: zk::Client) -> bool {
    let session = client.session_id();
    let gone = stopped(client, CLOSE_TIMEOUT).await;
    if !gone {
        tracing::warn!(
            %session,
            "the ZooKeeper client of the session did not stop within {CLOSE_TIMEOUT:?}; \
             a client resuming the session may lose it to this one"
        );
    }
    gone
}

/// The ticket of a client's session.
fn ticket_of(client: &zk::Client) -> SessionTicket {
    let session = client.session();
    SessionTicket {
        id: session.id().0,
        secret: session.password().to_vec(),
    }
}

/// The tenure session id of a client's session.
pub(crate) fn session_id(client: &zk::Client) -> SessionId {
    SessionId(client.session_id().0 as u64)
}
