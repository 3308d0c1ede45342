//! The seam between the runtime and a coordination store.

use std::time::Duration;

use async_trait::async_trait;
use tenure_core::{ClientError, Event, MemberInfo, StoreRequest};
use tokio::sync::mpsc;

/// Where a backend sends everything the store tells a member: session
/// changes, request results and watch notifications, in the order it
/// learned them.
pub type EventSender = mpsc::UnboundedSender<Event>;

/// The registration record a backend writes for `member` of this process:
/// Kafka 0.8's JSON with the member's strategy, this host's name and the
/// current time, so that tools can say who registered where and when.
pub fn registration_record(member: &MemberInfo) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    tenure_core::records::encode_registration(member, now, hostname().as_deref())
}

/// The name of this host, for member registrations: what `hostname` says,
/// or `None` where it cannot be read. Read once per process.
pub fn hostname() -> Option<String> {
    static HOSTNAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    HOSTNAME
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok())
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .clone()
}

/// What a backend needs to open a member's first session
/// ([`Backend::start`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct Joining {
    /// The group the member joins.
    pub group: String,
    /// The member, as it registers.
    pub member: MemberInfo,
    /// The session timeout to ask of the store: the member's
    /// ([`tenure_core::Config::session_timeout`]), the one setting for it.
    /// A store that grants less fails the start with
    /// [`BackendError::SessionTimeout`].
    pub session_timeout: Duration,
    /// Where every event goes from then on.
    pub events: EventSender,
    /// Static membership: the session outlives the process (a backend
    /// keeps it alive until [`Backend::shutdown`] ends it, and
    /// [`Backend::detach`] leaves it to run out), and may be resumed.
    pub static_membership: bool,
    /// A session of this member's a previous process left alive, to resume
    /// rather than open a new one (static membership). A backend that
    /// finds it gone opens a new session.
    pub resume: Option<SessionTicket>,
}

impl Joining {
    /// Member `member` of `group`, with sessions of `session_timeout`, its
    /// events going to `events`.
    pub fn new(
        group: impl Into<String>,
        member: MemberInfo,
        session_timeout: Duration,
        events: EventSender,
    ) -> Joining {
        Joining {
            group: group.into(),
            member,
            session_timeout,
            events,
            static_membership: false,
            resume: None,
        }
    }

    /// With static membership, resuming `resume` if it is still alive.
    pub fn static_membership(mut self, resume: Option<SessionTicket>) -> Joining {
        self.static_membership = true;
        self.resume = resume;
        self
    }
}

/// Checks what every backend checks before it opens its first session:
/// that it was not started before, and a session timeout the store can
/// keep.
pub(crate) fn check_start(started: bool, session_timeout: Duration) -> Result<(), BackendError> {
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

/// A store session as another process needs it to resume it (static
/// membership): its id and what proves the right to it. Its `Debug` shows
/// no secret.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionTicket {
    /// The store's id of the session (ZooKeeper session id, etcd lease id).
    pub id: i64,
    /// ZooKeeper: the session's password; etcd: empty (a lease is kept
    /// alive by id).
    pub secret: Vec<u8>,
}

impl BackendError {
    /// `what` is wrong with a setting, because of `source`.
    pub fn invalid_setting(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> BackendError {
        BackendError::InvalidSetting {
            what: what.into(),
            source: ClientError::new(source),
        }
    }

    /// Whether starting again cannot help: the configuration must change
    /// (a setting, the session timeout) before a session can open.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            BackendError::Config(_)
                | BackendError::InvalidSetting { .. }
                | BackendError::SessionTimeout { .. }
        )
    }
}

impl std::fmt::Debug for SessionTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTicket")
            .field("id", &format_args!("{:#x}", self.id))
            .field("secret", &format_args!("<{} bytes>", self.secret.len()))
            .finish()
    }
}

/// Why a backend could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The store could not be reached or refused the session.
    #[error("cannot connect to {store}: {source}")]
    Connect {
        /// Which store ("ZooKeeper at 127.0.0.1:2181", ...).
        store: String,
        /// What went wrong: no answer in time, or the client's own error
        /// (reached by `source()` and downcast through
        /// [`ClientError::get_ref`]).
        #[source]
        source: ClientError,
    },
    /// The backend's own configuration is unusable (a missing chroot, no
    /// endpoint...).
    #[error("invalid backend configuration: {0}")]
    Config(String),
    /// A setting that names something the backend cannot use: a file that
    /// cannot be read, a certificate that does not parse, an address the
    /// client refuses. The cause is the error's source.
    #[error("invalid backend configuration: {what}: {source}")]
    InvalidSetting {
        /// The setting, and what is wrong with it.
        what: String,
        /// Why: the reader's, parser's or client's own error.
        #[source]
        source: ClientError,
    },
    /// The store granted a shorter session than the member's session
    /// timeout. The member would go on consuming after the store had
    /// expired its session and handed its partitions on, so it does not
    /// start: lower the member's session timeout, or raise the store's
    /// bound (ZooKeeper: `maxSessionTimeout`).
    #[error(
        "{store} granted a session timeout of {granted:?}, shorter than the member's \
         {asked:?}; lower the member's session timeout or raise the server's bound \
         (ZooKeeper: maxSessionTimeout)"
    )]
    SessionTimeout {
        /// Which store.
        store: String,
        /// The member's session timeout.
        asked: Duration,
        /// What the store granted.
        granted: Duration,
    },
    /// The store refused the group's records to this member's credentials
    /// (or to no credentials): they were made by another identity.
    #[error("{store} refused access: {detail}")]
    Denied {
        /// Which store.
        store: String,
        /// What was refused, and what to check.
        detail: String,
        /// The client's own error, where the refusal came as one.
        #[source]
        source: Option<ClientError>,
    },
}

/// A coordination store seen from one member: it carries the core's store
/// commands out and brings results, watch notifications and session changes
/// back as events. The runtime does not know which store it talks to.
///
/// Contract:
/// - after [`Backend::start`] returns, the backend has sent
///   [`Event::SessionEstablished`] for its first session;
/// - a command whose `session` is not the backend's current session fails
///   with `StoreError::SessionExpired` (it was issued under a session that
///   ended);
/// - a request in flight when the connection drops fails with
///   `StoreError::ConnectionLoss` (unknown outcome);
/// - after a session expires the backend sends [`Event::SessionExpired`],
///   opens a new session and sends [`Event::SessionEstablished`] again.
#[async_trait]
pub trait Backend: Send + 'static {
    /// Opens the first session of the member `joining` names. From then on
    /// every event goes to its event sender.
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError>;

    /// Starts carrying out a store command; its result arrives on the event
    /// channel. Must not block.
    fn submit(&mut self, command: StoreRequest);

    /// Ends the session at once: its ephemeral records disappear now rather
    /// than after the session timeout.
    async fn shutdown(&mut self);

    /// The current session, for a later process of this member to resume
    /// (static membership); `None` if there is none, or the store's
    /// sessions cannot be resumed from another process.
    fn ticket(&self) -> Option<SessionTicket> {
        None
    }

    /// Stops using the session without ending it: its records stay until
    /// it times out, for a restarted process to resume (static membership).
    /// A backend whose sessions cannot be resumed ends it, as
    /// [`Backend::shutdown`] does.
    async fn detach(&mut self) {
        self.shutdown().await
    }
}

#[async_trait]
impl Backend for Box<dyn Backend> {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        (**self).start(joining).await
    }

    fn submit(&mut self, command: StoreRequest) {
        (**self).submit(command)
    }

    async fn shutdown(&mut self) {
        (**self).shutdown().await
    }

    fn ticket(&self) -> Option<SessionTicket> {
        (**self).ticket()
    }

    async fn detach(&mut self) {
        (**self).detach().await
    }
}
