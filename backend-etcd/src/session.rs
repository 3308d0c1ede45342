//! Granting leases and keeping them alive: suspension when keep-alives go
//! unanswered, resumption when they are answered again, expiry when the
//! server says the lease is gone (or it must be by now), after which a new
//! lease is granted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, LeaseTimeToLiveOptions,
};
use tenure_core::Event;
use tenure_tokio::session::OpenError;
use tenure_tokio::BackendError;

use crate::ops::{answered, bad_endpoint, lease_not_found};
use crate::{Config, Current, Shared};

/// The pause between two attempts to reach the server while suspended.
const RETRY_WHILE_SUSPENDED: Duration = Duration::from_millis(500);
/// HTTP/2 pings on an idle connection: etcd refuses them more often than
/// every 5 s by default (`--grpc-keepalive-min-time`).
const HTTP2_PING_INTERVAL: Duration = Duration::from_secs(5);

/// Why a connection attempt failed.
type ConnectError = OpenError<etcd_client::Error>;

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
                return Err(refusal.into_backend_error(config.store()));
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
    let current = grant(config, &client).await.map_err(|e| match &e {
        ConnectError::Client(error) => match config.security.explain(error) {
            Some(refusal) => refusal.into_backend_error(config.store()),
            None => e.into_backend_error(config.store()),
        },
        _ => e.into_backend_error(config.store()),
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
async fn grant(config: &Config, client: &Client) -> Result<Current, ConnectError> {
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

/// How keeping one lease alive ended.
enum Ended {
    /// The lease is gone (the server said so, or it must be by now).
    Expired,
    /// The backend shuts down.
    Closing,
}

/// Keeps the current lease, and every lease granted after it, alive until
/// shutdown.
pub(crate) async fn follow(shared: Arc<Shared>) {
    loop {
        let Some(current) = shared.state.current() else {
            return;
        };
        match keep_alive(&shared, current).await {
            Ended::Closing => return,
            Ended::Expired => {
                tracing::warn!(
                    lease = %format_args!("{:x}", current.lease),
                    "etcd lease expired; granting a new one"
                );
                shared.state.expired();
                if !reopen(&shared, current).await {
                    return;
                }
            }
        }
    }
}

/// An open keep-alive stream of one lease.
struct Stream {
    keeper: LeaseKeeper,
    answers: LeaseKeepAliveStream,
}

/// What one keep-alive round trip said.
enum Renewal {
    /// The lease lives on.
    Alive,
    /// The server says the lease does not exist.
    Gone,
    /// No answer (timeout, broken stream, no connection).
    Unanswered(String),
}

/// One keep-alive: on the open stream, or on a new one.
async fn renew(client: &Client, lease: i64, stream: &mut Option<Stream>) -> Renewal {
    match stream {
        None => {
            let mut client = client.clone();
            match client.lease_keep_alive(lease).await {
                // Opening the stream sends a keep-alive and waits for its
                // answer; a TTL of 0 fails with "lease not found".
                Ok((keeper, answers)) => {
                    *stream = Some(Stream { keeper, answers });
                    Renewal::Alive
                }
                Err(e) if lease_not_found(&e) => Renewal::Gone,
                Err(e) => Renewal::Unanswered(e.to_string()),
            }
        }
        Some(open) => {
            if let Err(e) = open.keeper.keep_alive().await {
                return Renewal::Unanswered(e.to_string());
            }
            match open.answers.message().await {
                Ok(Some(answer)) if answer.ttl() > 0 => Renewal::Alive,
                Ok(Some(_)) => Renewal::Gone,
                Ok(None) => Renewal::Unanswered("keep-alive stream closed".to_owned()),
                Err(e) if lease_not_found(&e) => Renewal::Gone,
                Err(e) => Renewal::Unanswered(e.to_string()),
            }
        }
    }
}

/// Renews `current` every TTL/3 until it expires or the backend shuts down;
/// reports suspension and resumption on the way.
async fn keep_alive(shared: &Shared, current: Current) -> Ended {
    let interval = (current.ttl / 3).max(Duration::from_millis(100));
    // Keep-alives are answered by the leader at once (no consensus round):
    // half the interval unanswered is a connection in trouble.
    let patience = interval / 2;
    let mut stream: Option<Stream> = None;
    let mut suspended = false;
    loop {
        if shared.state.is_closing() {
            return Ended::Closing;
        }
        // Unheard of for a whole TTL: the server has dropped the lease, or
        // is about to (a new lease revokes it first to make sure).
        if suspended && shared.state.last_heard().get() + current.ttl <= Instant::now() {
            return Ended::Expired;
        }
        let sent = Instant::now();
        let renewal =
            tokio::time::timeout(patience, renew(&shared.client, current.lease, &mut stream))
                .await
                .unwrap_or_else(|_| Renewal::Unanswered(format!("no answer within {patience:?}")));
        let next = match renewal {
            Renewal::Alive => {
                // The server renewed the lease after we sent the keep-alive.
                shared.state.last_heard().heard(sent);
                if suspended {
                    suspended = false;
                    tracing::info!("etcd answers keep-alives again; session resumed");
                    shared.state.send(Event::SessionResumed);
                }
                sent + interval
            }
            Renewal::Gone => return Ended::Expired,
            Renewal::Unanswered(why) => {
                stream = None;
                if !suspended {
                    suspended = true;
                    tracing::warn!(%why, "etcd lease keep-alive unanswered; session suspended");
                    shared.state.send(Event::SessionSuspended {
                        last_heard: shared.state.last_heard().get(),
                    });
                }
                (sent + RETRY_WHILE_SUSPENDED).max(Instant::now())
            }
        };
        // Until the next keep-alive, watch the stream: a break shows at once.
        let deadline = tokio::time::Instant::from_std(next);
        match stream.as_mut() {
            None => tokio::time::sleep_until(deadline).await,
            Some(open) => match tokio::time::timeout_at(deadline, open.answers.message()).await {
                Err(_) => {}
                // A stray answer (of a keep-alive that timed out before).
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
                Ok(Ok(Some(_))) => return Ended::Expired,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    stream = None;
                    tokio::time::sleep_until(deadline).await;
                }
            },
        }
    }
}

/// Grants a new lease after `old` expired, retrying until it works or the
/// backend shuts down; sends `SessionEstablished`. Returns whether it did.
async fn reopen(shared: &Shared, old: Current) -> bool {
    let request_timeout = shared.config.request_timeout();
    let revoked = &AtomicBool::new(false);
    let granted = shared.state.reopen("etcd", || async move {
        // The expiry may have been concluded here, from silence, while the
        // server still counts down: revoke so that the old keys go now, and
        // grant no new lease before they have.
        if !revoked.load(Ordering::SeqCst) {
            let mut client = shared.client.clone();
            let revoke =
                tokio::time::timeout(request_timeout, client.lease_revoke(old.lease)).await;
            let gone = match revoke {
                Ok(Ok(_)) => true,
                Ok(Err(e)) => lease_not_found(&e),
                Err(_) => false,
            };
            if !gone {
                return Err(ConnectError::Timeout(request_timeout)
                    .into_backend_error(shared.config.store()));
            }
            revoked.store(true, Ordering::SeqCst);
        }
        grant(&shared.config, &shared.client)
            .await
            .map_err(|e| e.into_backend_error(shared.config.store()))
    });
    let Some((current, before)) = granted.await else {
        return false;
    };
    if shared.state.is_closing() {
        let mut client = shared.client.clone();
        let _ = tokio::time::timeout(request_timeout, client.lease_revoke(current.lease)).await;
        return false;
    }
    tracing::info!(
        lease = %format_args!("{:x}", current.lease),
        "new etcd lease granted"
    );
    shared.state.established(current, before);
    true
}
