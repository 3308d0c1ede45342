//! Opening sessions and following their state: suspension, resumption,
//! expiry (after which a new client is built: an expired ZooKeeper session is
//! terminal for its client).

use std::sync::Arc;
use std::time::Instant;

use tenure_core::records::{Layout, Watched};
use tenure_core::Event;
use tenure_core::TopicPartition;
use tenure_tokio::session::OpenError;
use tenure_tokio::{BackendError, SessionTicket};
use zookeeper_client as zk;

use crate::{session_id, Config, Current, Shared};

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
             consuming earlier than it must, and takeovers of its partitions wait longer"
        );
    }
    Ok(client)
}

/// Follows the state of the current session and of every session opened
/// after it, until shutdown.
pub(crate) async fn follow(shared: Arc<Shared>, mut watcher: zk::StateWatcher) {
    let mut suspended = false;
    loop {
        // Anything that reconnects after this moment was heard by the
        // server after it.
        let waiting_since = Instant::now();
        let state = watcher.changed().await;
        if shared.state.is_closing() {
            return;
        }
        match state {
            zk::SessionState::Disconnected => {
                if !suspended {
                    suspended = true;
                    let last_heard = shared.state.last_heard().get();
                    tracing::warn!("connection to ZooKeeper lost; session suspended");
                    shared.state.send(Event::SessionSuspended { last_heard });
                }
            }
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                shared.state.last_heard().heard(waiting_since);
                if suspended {
                    suspended = false;
                    tracing::info!("connection to ZooKeeper back; session resumed");
                    shared.state.send(Event::SessionResumed);
                }
            }
            zk::SessionState::Expired | zk::SessionState::AuthFailed => {
                suspended = false;
                tracing::warn!(%state, "ZooKeeper session ended; opening a new one");
                shared.state.expired();
                let Some(next) = reopen(&shared).await else {
                    return;
                };
                watcher = next;
            }
            zk::SessionState::Closed => return,
        }
    }
}

/// Opens a new session after an expiry, retrying until it works or the
/// backend shuts down; sends `SessionEstablished`.
async fn reopen(shared: &Shared) -> Option<zk::StateWatcher> {
    let (client, before) = shared
        .state
        .reopen("ZooKeeper", || connect(&shared.config))
        .await?;
    if shared.state.is_closing() {
        return None;
    }
    let session = session_id(&client);
    let watcher = client.state_watcher();
    tracing::info!(session = %client.session_id(), "new ZooKeeper session established");
    shared
        .state
        .established(Current { client, session }, before);
    Some(watcher)
}
