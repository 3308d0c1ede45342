//! Granting leases: the backend's settings, and the [`Connector`] that
//! grants a member's first lease (or resumes one a previous process left)
//! with them.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, LeaseTimeToLiveOptions};
use tenure_core::SessionId;
use tenure_tokio::store::{Hooks, OpenError, RequestCounts};
use tenure_tokio::BackendError;

use crate::errors::{answered, bad_endpoint, lease_not_found};
use crate::security::EtcdSecurity;

/// How long [`Backend::start`](tenure_tokio::Backend::start) waits for a
/// server to grant the first lease when no other bound is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "/tenure";

/// HTTP/2 pings on an idle connection: etcd refuses them more often than
/// every 5 s by default (`--grpc-keepalive-min-time`).
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(5);

/// The shortest request timeout derived from the session timeout.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a connection attempt failed.
pub(crate) type ConnectError = OpenError<etcd_client::Error>;

/// What a (re)connection needs.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The endpoints as given (comma-separated), for errors and logs.
    pub(crate) endpoints: String,
    pub(crate) prefix: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// `None`: derived from the session timeout.
    pub(crate) request_timeout: Option<Duration>,
    /// Credentials and TLS, for a secured cluster.
    pub(crate) security: EtcdSecurity,
    pub(crate) hooks: Hooks,
    /// Requests sent to etcd so far, across leases.
    pub(crate) requests: Arc<RequestCounts>,
    /// Static membership: a lease outlives the backend (nothing revokes it
    /// when the backend is dropped), for a restarted process to resume.
    pub(crate) detached: bool,
}

impl Config {
    /// The settings of a backend for `endpoints`, before the member starts
    /// it.
    pub(crate) fn new(endpoints: String) -> Config {
        Config {
            endpoints,
            prefix: DEFAULT_PREFIX.to_owned(),
            // The member's, set when it starts the backend.
            session_timeout: Duration::ZERO,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: None,
            security: EtcdSecurity::new(),
            hooks: Hooks::default(),
            requests: Arc::new(RequestCounts::new()),
            detached: false,
        }
    }

    /// How the store is named in errors and logs.
    pub(crate) fn store(&self) -> String {
        match self.security.user_name() {
            Some(user) => format!("etcd at {} as {user}", self.endpoints),
            None => format!("etcd at {}", self.endpoints),
        }
    }

    /// The lease TTL to ask for: the session timeout in whole seconds,
    /// rounded up, at least 1.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let t = self.session_timeout;
        let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
        i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
    }

    /// How long one request may go unanswered before it fails with
    /// `ConnectionLoss`.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
            .unwrap_or_else(|| (self.session_timeout / 2).max(MIN_REQUEST_TIMEOUT))
    }

    pub(crate) fn endpoint_list(&self) -> Vec<String> {
        self.endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// The live lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    /// The lease id.
    pub(crate) lease: i64,
    /// The lease id as the core's session id.
    pub(crate) session: SessionId,
    /// The TTL the server granted.
    pub(crate) ttl: Duration,
}

impl Current {
    /// The lease `lease`, granted for `granted_secs` seconds.
    pub(crate) fn new(lease: i64, granted_secs: i64) -> Current {
        Current {
            lease,
            session: SessionId(lease as u64),
            ttl: Duration::from_secs(u64::try_from(granted_secs).unwrap_or(0)),
        }
    }
}

/// Builds a client for `endpoints` and grants the first lease, within the
/// connect timeout.
pub(crate) async fn connect(
    config: &Config,
    endpoints: &[String],
    resume: Option<i64>,
) -> Result<(Client, Current, Option<Vec<Vec<u8>>>), BackendError> {
    let request_timeout = config.request_timeout();
    config
        .security
        .check_endpoints(endpoints)
        .map_err(|detail| BackendError::Config(format!("{}: {detail}", config.store())))?;
    let options = config.security.apply(
        ConnectOptions::new()
            .with_connect_timeout(config.connect_timeout)
            // Lets the channel notice a dead connection (and fail the
            // requests on it) rather than wait for TCP to give up.
            .with_keep_alive(HTTP2_PING_INTERVAL, request_timeout)
            // A node cut off from the quorum answers every request at once
            // with "no leader" instead of holding it until it gives up:
            // the member's requests (a join's lease grant among them) go
            // to another node, its keep-alives fail fast, and its watches
            // are registered again elsewhere, as etcd's own sessions do.
            .with_require_leader(true),
    );
    // The client connects lazily; building it only checks the URLs.
    let client = match tokio::time::timeout(
        config.connect_timeout,
        Client::connect(endpoints, Some(options)),
    )
    .await
    {
        Err(_) => {
            return Err(
                ConnectError::Timeout(config.connect_timeout).into_backend_error(config.store())
            )
        }
        Ok(Err(source)) if bad_endpoint(&source) => {
            return Err(ConnectError::BadAddress {
                address: config.endpoints.clone(),
                source,
            }
            .into_backend_error(config.store()))
        }
        Ok(Err(e)) => {
            if let Some(refusal) = config.security.explain(&e) {
                return Err(refusal.into_backend_error(config.store(), e));
            }
            return Err(ConnectError::Client(e).into_backend_error(config.store()));
        }
        Ok(Ok(client)) => client,
    };
    if let Some(lease) = resume {
        if let Some((current, keys)) = resumed(config, &client, lease).await {
            return Ok((client, current, Some(keys)));
        }
    }
    // The client connects lazily: a certificate the CA did not sign, or
    // rights the user lacks, show here, at the first request.
    let current = grant(config, &client).await.map_err(|e| match e {
        ConnectError::Client(error) => match config.security.explain(&error) {
            Some(refusal) => refusal.into_backend_error(config.store(), error),
            None => ConnectError::Client(error).into_backend_error(config.store()),
        },
        e => e.into_backend_error(config.store()),
    })?;
    Ok((client, current, None))
}

/// How long to wait before asking again for a previous process's lease.
const RESUME_RETRY: Duration = Duration::from_millis(100);

/// How many tries the first lease grant gets within the connect timeout,
/// each with an equal share of it. A grant sent to a node that has lost
/// the quorum but not yet noticed waits until that node gives up; a
/// later try may reach another node.
const GRANT_TRIES: u32 = 3;

/// The pause between two tries of a lease grant.
const GRANT_RETRY: Duration = Duration::from_millis(100);

/// The lease `lease` of a previous process and the keys attached to it,
/// if it is still alive with the TTL this member needs (static
/// membership); `None` to grant a new one.
async fn resumed(config: &Config, client: &Client, lease: i64) -> Option<(Current, Vec<Vec<u8>>)> {
    let mut client = client.clone();
    // Asked again until an answer or the connect timeout: a lease given up
    // on a failed request (a busy server, a leader election) while it is
    // alive would keep the previous process's registration and claims for
    // a whole TTL, and this member would rejoin as a new one after it.
    let deadline = tokio::time::Instant::now() + config.connect_timeout;
    let answer = loop {
        let asked =
            client.lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()));
        let error = match tokio::time::timeout_at(deadline, asked).await {
            Ok(Ok(answer)) => break answer,
            // An answer too: the lease is gone.
            Ok(Err(error)) if lease_not_found(&error) => {
                tracing::info!(lease = %format_args!("{lease:x}"), "the previous process's etcd lease is gone; granting a new one");
                return None;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => "no answer".to_owned(),
        };
        if tokio::time::Instant::now() + RESUME_RETRY >= deadline {
            tracing::info!(lease = %format_args!("{lease:x}"), %error, "cannot look up the previous process's etcd lease; granting a new one");
            return None;
        }
        tokio::time::sleep(RESUME_RETRY).await;
    };
    let current = Current::new(lease, answer.granted_ttl());
    // A lease that ran out (TTL -1), or one granted for a shorter session
    // than this member's, is not resumed.
    if answer.ttl() <= 0 || current.ttl < config.session_timeout {
        tracing::info!(lease = %format_args!("{lease:x}"), "the previous process's etcd lease is gone; granting a new one");
        return None;
    }
    Some((current, answer.keys().to_vec()))
}

/// Grants a lease of the configured TTL, within the connect timeout: tried
/// again while the store does not answer ([`GRANT_TRIES`]), never after
/// it refused.
pub(crate) async fn grant(config: &Config, client: &Client) -> Result<Current, ConnectError> {
    let ttl = config.ttl_secs();
    let mut client = client.clone();
    let deadline = tokio::time::Instant::now() + config.connect_timeout;
    let per_try = config.connect_timeout / GRANT_TRIES;
    let granted = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let failure =
            match tokio::time::timeout(per_try.min(left), client.lease_grant(ttl, None)).await {
                Ok(Ok(granted)) => break granted,
                // An answer (a refusal, rights the user lacks) or a
                // refused certificate: asking again changes nothing.
                Ok(Err(e)) if answered(&e) || config.security.explain(&e).is_some() => {
                    return Err(ConnectError::Client(e))
                }
                Ok(Err(e)) => ConnectError::Client(e),
                Err(_) => ConnectError::Timeout(config.connect_timeout),
            };
        // A grant left unanswered may have been granted all the same: that
        // lease has no keys and ends by itself after its TTL.
        if tokio::time::Instant::now() + GRANT_RETRY >= deadline {
            return Err(failure);
        }
        tokio::time::sleep(GRANT_RETRY).await;
    };
    let current = Current::new(granted.id(), granted.ttl());
    if current.ttl < config.session_timeout {
        // The member stops consuming by its own timeout's arithmetic; with a
        // shorter lease the server could hand its partitions to another
        // member first. Revoke what was granted: nobody will keep it alive.
        let _ =
            tokio::time::timeout(config.connect_timeout, client.lease_revoke(current.lease)).await;
        return Err(ConnectError::ShorterSession {
            asked: config.session_timeout,
            granted: current.ttl,
        });
    }
    if granted.ttl() != ttl {
        tracing::warn!(
            asked = ttl,
            granted = granted.ttl(),
            "etcd granted a longer lease TTL (seconds) than the member's session timeout: \
             the member stops consuming earlier than it must, and takeovers of its \
             partitions wait longer"
        );
    }
    Ok(current)
}

/// What is wrong with an endpoint URL, if anything. The client itself would
/// take a port that is not a number for no port at all (and dial port 80).
pub(crate) fn endpoint_problem(endpoint: &str) -> Option<String> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => (host, Some(port.strip_prefix(':').unwrap_or(port))),
            None => return Some(format!("invalid endpoint {endpoint:?}: unclosed '['")),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Some(format!("invalid endpoint {endpoint:?}: no host"));
    }
    match port.map(str::parse::<u16>) {
        Some(Ok(0)) | Some(Err(_)) => Some(format!(
            "invalid endpoint {endpoint:?}: the port is not a number from 1 to 65535"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::endpoint_problem;

    #[test]
    fn endpoints_are_checked() {
        for good in [
            "http://127.0.0.1:2379",
            "https://etcd:2379",
            "etcd:2379",
            "http://[::1]:2379",
            "http://etcd",
        ] {
            assert_eq!(endpoint_problem(good), None, "{good}");
        }
        for bad in [
            "127.0.0.1:notaport",
            "http://etcd:0",
            "http://:2379",
            "http://[::1:2379",
            "http://etcd:99999",
        ] {
            assert!(endpoint_problem(bad).is_some(), "{bad}");
        }
    }
}
