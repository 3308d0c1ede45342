//! Opening sessions: the backend's settings, and the [`Connector`] that
//! opens a member's first session (or resumes one a previous process left)
//! with them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::records::{Layout, Watched};
use tenure_core::{SessionId, TopicPartition};
use tenure_tokio::store::{Hooks, OpenError, RequestCounts};
use tenure_tokio::{BackendError, SessionTicket};
use zookeeper_client as zk;

/// How long [`Backend::start`](tenure_tokio::Backend::start) waits for a
/// server to answer when no other bound is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a (re)connection needs: the backend's settings.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// Who every session authenticates as, and TLS.
    pub(crate) security: crate::ZooKeeperSecurity,
    /// Static membership: sessions are detached (a dropped client leaves
    /// its session to run out rather than close it), for a restarted
    /// process to resume.
    pub(crate) detached: bool,
    pub(crate) hooks: Hooks,
    /// Requests sent to ZooKeeper so far, across sessions.
    pub(crate) requests: Arc<RequestCounts>,
}

impl Config {
    /// The settings of a backend for `connect_string`, before the member
    /// starts it.
    pub(crate) fn new(connect_string: String) -> Config {
        Config {
            connect_string,
            // The member's, set when it starts the backend.
            session_timeout: Duration::ZERO,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            security: crate::ZooKeeperSecurity::new(),
            detached: false,
            hooks: Hooks::default(),
            requests: Arc::new(RequestCounts::new()),
        }
    }

    /// How the store is named in errors and logs.
    pub(crate) fn store(&self) -> String {
        self.security.store(&self.connect_string)
    }

    /// This configuration with sessions that close with their client.
    pub(crate) fn attached(&self) -> Config {
        Config {
            detached: false,
            ..self.clone()
        }
    }
}

/// A live client and its session.
#[derive(Clone, Debug)]
pub(crate) struct Current {
    pub(crate) client: zk::Client,
    pub(crate) session: SessionId,
}

impl Current {
    /// The session `client` holds.
    pub(crate) fn new(client: zk::Client) -> Current {
        let session = SessionId(client.session_id().0 as u64);
        Current { client, session }
    }
}

/// Why a connection attempt failed.
type ConnectError = OpenError<zk::Error>;

/// Opens a session with the configured timeout, within the connect timeout.
pub(crate) async fn connect(config: &Config) -> Result<zk::Client, BackendError> {
    try_connect(config)
        .await
        .map_err(|e| e.into_backend_error(config.store()))
}

/// Resumes the session of `ticket` (static membership), within the
/// connect timeout; `None` if it is gone (expired, or the server does not
/// know it), so that the caller opens a new one.
pub(crate) async fn resume(config: &Config, ticket: &SessionTicket) -> Option<zk::Client> {
    let deadline = Instant::now() + config.connect_timeout;
    let mut attempt = config.clone();
    loop {
        let session = zk::SessionInfo::resume(zk::SessionId(ticket.id), ticket.secret.clone());
        let error = match try_connect_with(&attempt, Some(session)).await {
            Ok(client) if client.session_id().0 == ticket.id => return Some(client),
            Ok(_) => return None,
            Err(error) => error,
        };
        // A lost connection says nothing of the session, which may well be
        // alive: given up, it would run out with the member's registration
        // and claims, and its partitions move. One way to lose it: a client
        // of the previous process, still connected under the session,
        // reconnects when the server closes its connection for ours, and
        // closes ours in turn; it stops once it finds itself dropped.
        let left = deadline.saturating_duration_since(Instant::now());
        let lost = matches!(error, ConnectError::Client(zk::Error::ConnectionLoss));
        if !lost || left <= RESUME_PAUSE {
            tracing::info!(
                session = %zk::SessionId(ticket.id),
                %error,
                "the ZooKeeper session of the previous process cannot be resumed; opening a new one"
            );
            return None;
        }
        tracing::debug!(
            session = %zk::SessionId(ticket.id),
            %error,
            "resuming the ZooKeeper session again"
        );
        tokio::time::sleep(RESUME_PAUSE).await;
        attempt.connect_timeout = left.saturating_sub(RESUME_PAUSE);
    }
}

/// How long a resume that lost its connection waits before trying again.
const RESUME_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

/// The partitions whose owner records the client's session holds.
pub(crate) async fn claims_held(client: &zk::Client, layout: &Layout) -> Vec<TopicPartition> {
    let owners = layout.owners();
    match client.list_ephemerals(&owners).await {
        Ok(paths) => paths
            .iter()
            .filter_map(|path| match layout.classify(path) {
                Some(Watched::Owner(partition)) => Some(partition),
                _ => None,
            })
            .collect(),
        Err(error) => {
            // Without the list the member claims what it is assigned (its
            // own records, found as such); claims it is not assigned stay
            // until the session ends.
            tracing::warn!(%error, "cannot list the resumed session's claims");
            Vec::new()
        }
    }
}

async fn try_connect(config: &Config) -> Result<zk::Client, ConnectError> {
    try_connect_with(config, None).await
}

async fn try_connect_with(
    config: &Config,
    session: Option<zk::SessionInfo>,
) -> Result<zk::Client, ConnectError> {
    let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
    if config.detached {
        connector = connector.with_detached();
    }
    if let Some(session) = session {
        connector = connector.with_session(session);
    }
    let attempt = config.security.connect(connector, &config.connect_string);
    let failed = match tokio::time::timeout(config.connect_timeout, attempt).await {
        Err(_) => ConnectError::Timeout(config.connect_timeout),
        Ok(Err(source @ zk::Error::BadArguments(_))) => {
            return Err(ConnectError::BadAddress {
                address: config.connect_string.clone(),
                source,
            })
        }
        Ok(Err(e)) => ConnectError::Client(e),
        Ok(Ok(client)) => return check_session(config, client).await,
    };
    // Over TLS the client only times out; a handshake of our own says why.
    let refusal = config
        .security
        .tls_refusal(&config.connect_string, TLS_PROBE_TIMEOUT)
        .await;
    Err(refusal.map_or(failed, ConnectError::Denied))
}

/// How long finding out why a TLS session did not open may take.
pub(crate) const TLS_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Checks a newly opened session: its chroot exists, and the server
/// granted the session timeout asked for.
async fn check_session(config: &Config, client: zk::Client) -> Result<zk::Client, ConnectError> {
    // Every path is under the chroot; a missing chroot would fail every
    // request with NoNode, so say so now.
    let root = tokio::time::timeout(config.connect_timeout, client.check_stat("/")).await;
    match root {
        Err(_) => return Err(ConnectError::Timeout(config.connect_timeout)),
        Ok(Err(e)) => return Err(ConnectError::Client(e)),
        Ok(Ok(None)) => {
            return Err(ConnectError::Unusable(format!(
                "chroot {:?} does not exist; create it first",
                client.path()
            )))
        }
        Ok(Ok(Some(_))) => {}
    }
    let granted = client.session_timeout();
    if granted < config.session_timeout {
        // The member stops consuming by its own timeout's arithmetic; with a
        // shorter one the server could hand its partitions to another member
        // first. Dropping the client closes the session.
        return Err(ConnectError::ShorterSession {
            asked: config.session_timeout,
            granted,
        });
    }
    if granted > config.session_timeout {
        tracing::warn!(
            asked = ?config.session_timeout,
            granted = ?granted,
            "ZooKeeper granted a longer session timeout than the member's: the member stops \
             consuming earlier than it must, takeovers of its partitions wait longer, and its \
             heartbeats, a third of its own timeout apart, come too close together to prove \
             that the leader counted the one before, so it may pause between them; ask for \
             at least the server's minSessionTimeout"
        );
    }
    Ok(client)
}
