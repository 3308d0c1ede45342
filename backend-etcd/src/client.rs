//! The etcd client of a joined member: its leases as the runtime's session
//! loop follows them (a [`StoreClient`]), kept alive about every TTL/3 by
//! a [`Keeper`], and revoked, left to a restarted process, or dropped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tenure_core::{MemberInfo, SessionId};
use tenure_tokio::store::{
    OpenError, Registrations, SessionChange, SessionKeeper, StoreClient, Wire,
};
use tenure_tokio::{BackendError, SessionTicket};

use crate::ops::{lease_not_found, Ctx};
use crate::session::{grant, Config};
use crate::{watches, Keys};

/// How long a close waits for the server to revoke the lease.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause between two attempts to reach the server while suspended.
const RETRY_WHILE_SUSPENDED: Duration = Duration::from_millis(500);

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

/// What a joined member's requests share: the settings, the group's keys,
/// the member, the client, the watch stream, and the member list as last
/// read.
///
/// Claims, releases and commits of a partition hold its lock (the session
/// loop takes it). Each of those is a single transaction, so no
/// interleaving can break one; the lock keeps them in submission order (a
/// commit submitted before a release reaches the server before it), as on
/// ZooKeeper. The lease's last renewal is what the member's
/// [`Wire::last_heard`] follows here: a lease lives TTL after its last
/// renewal, and other requests do not renew it.
pub(crate) struct GroupClient {
    pub(crate) config: Config,
    pub(crate) keys: Keys,
    pub(crate) member: MemberInfo,
    /// The client; it reconnects by itself and outlives leases.
    pub(crate) client: Client,
    /// The one watch stream that carries every watch, across leases.
    pub(crate) watches: watches::Watches,
    /// The registrations as last read and the revision they were read at,
    /// for the next read to read only those changed since.
    pub(crate) registrations: Mutex<Option<(i64, Registrations)>>,
}

impl std::fmt::Debug for GroupClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupClient")
            .field("config", &self.config)
            .field("keys", &self.keys)
            .field("member", &self.member.id)
            .finish_non_exhaustive()
    }
}

impl GroupClient {
    /// The client of `member` of the group whose keys are `keys`.
    pub(crate) fn new(
        config: Config,
        keys: Keys,
        member: MemberInfo,
        client: Client,
        watches: watches::Watches,
    ) -> GroupClient {
        GroupClient {
            config,
            keys,
            member,
            client,
            watches,
            registrations: Mutex::new(None),
        }
    }

    /// Revokes `lease` within `timeout`: whether it is gone (revoked now,
    /// or already).
    async fn revoke(&self, lease: i64, timeout: Duration) -> Result<(), String> {
        let mut client = self.client.clone();
        match tokio::time::timeout(timeout, client.lease_revoke(lease)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if lease_not_found(&e) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }
}

#[async_trait]
impl StoreClient for GroupClient {
    type Session = Current;
    type Keeper = Keeper;
    type Ops = Ctx;

    fn store(&self) -> String {
        self.config.store()
    }

    fn session_id(session: &Current) -> SessionId {
        session.session
    }

    fn keeper(&self, session: &Current) -> Keeper {
        Keeper::new(self.client.clone(), *session)
    }

    fn ops(self: &Arc<Self>, session: &Current, wire: &Wire) -> Ctx {
        Ctx {
            group: self.clone(),
            current: *session,
            wire: wire.clone(),
        }
    }

    /// The expiry may have been concluded here, from silence, while the
    /// server still counts down: the old lease is revoked first, so that
    /// its keys go now, and no new lease is granted before they have.
    async fn reopen(&self, expired: &Current) -> Result<Current, BackendError> {
        let request_timeout = self.config.request_timeout();
        if self.revoke(expired.lease, request_timeout).await.is_err() {
            return Err(OpenError::<etcd_client::Error>::Timeout(request_timeout)
                .into_backend_error(self.store()));
        }
        let current = grant(&self.config, &self.client)
            .await
            .map_err(|e| e.into_backend_error(self.store()))?;
        tracing::info!(
            lease = %format_args!("{:x}", current.lease),
            "new etcd lease granted"
        );
        Ok(current)
    }

    fn ticket(&self, session: &Current) -> Option<SessionTicket> {
        Some(SessionTicket {
            id: session.lease,
            secret: Vec::new(),
        })
    }

    /// Revoking the lease deletes its keys now, not a TTL from now.
    async fn close(&self, current: Current) {
        match self.revoke(current.lease, CLOSE_TIMEOUT).await {
            Ok(()) => {
                tracing::info!(lease = %format_args!("{:x}", current.lease), "etcd lease revoked")
            }
            Err(error) => tracing::warn!(
                %error,
                "etcd did not revoke the lease; its keys vanish when it expires"
            ),
        }
    }

    /// Nothing keeps the lease alive any more: it runs out, unless a
    /// restarted process resumes it first.
    async fn detach(&self, current: Current) {
        if !self.config.detached {
            return self.close(current).await;
        }
        tracing::info!(
            lease = %format_args!("{:x}", current.lease),
            "etcd lease left to run out, for a restarted process to resume"
        );
    }

    fn abandon(&self, current: Current) {
        if self.config.detached {
            // A static member dropped without a close is a crash: its lease
            // is left for a restarted process to resume.
            return;
        }
        // Without shutdown, revoke in the background if a runtime is still
        // there; otherwise the lease simply expires.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let mut client = self.client.clone();
            handle.spawn(async move {
                let _ =
                    tokio::time::timeout(CLOSE_TIMEOUT, client.lease_revoke(current.lease)).await;
            });
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

/// Keeps one lease alive, every TTL/3, and says when that changes
/// anything: suspended when a keep-alive goes unanswered, alive again when
/// one is answered, expired when the server says the lease is gone (or it
/// must be by now).
pub(crate) struct Keeper {
    client: Client,
    current: Current,
    stream: Option<Stream>,
    suspended: bool,
    /// When the next keep-alive is due; `None`: now.
    next: Option<Instant>,
}

impl Keeper {
    fn new(client: Client, current: Current) -> Keeper {
        Keeper {
            client,
            current,
            stream: None,
            suspended: false,
            next: None,
        }
    }

    /// Waits until `next`, watching the stream meanwhile: a break shows
    /// at once. Whether the server said the lease is gone.
    async fn wait(&mut self, next: Instant) -> bool {
        let deadline = tokio::time::Instant::from_std(next);
        match self.stream.as_mut() {
            None => tokio::time::sleep_until(deadline).await,
            Some(open) => match tokio::time::timeout_at(deadline, open.answers.message()).await {
                Err(_) => {}
                // A stray answer (of a keep-alive that timed out before).
                Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
                Ok(Ok(Some(_))) => return true,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    self.stream = None;
                    tokio::time::sleep_until(deadline).await;
                }
            },
        }
        false
    }
}

#[async_trait]
impl SessionKeeper for Keeper {
    async fn next_change(&mut self, wire: &Wire) -> SessionChange {
        let interval = (self.current.ttl / 3).max(Duration::from_millis(100));
        // Keep-alives are answered by the leader at once (no consensus
        // round): half the interval unanswered is a connection in trouble.
        let patience = interval / 2;
        loop {
            if let Some(next) = self.next.take() {
                if self.wait(next).await {
                    return SessionChange::Expired;
                }
            }
            // Unheard of for a whole TTL: the server has dropped the
            // lease, or is about to (a new lease revokes it first to make
            // sure).
            if self.suspended && wire.last_heard() + self.current.ttl <= Instant::now() {
                return SessionChange::Expired;
            }
            let sent = Instant::now();
            let renewal = tokio::time::timeout(
                patience,
                renew(&self.client, self.current.lease, &mut self.stream),
            )
            .await
            .unwrap_or_else(|_| Renewal::Unanswered(format!("no answer within {patience:?}")));
            match renewal {
                Renewal::Alive => {
                    // The server renewed the lease after we sent the
                    // keep-alive.
                    self.suspended = false;
                    self.next = Some(sent + interval);
                    return SessionChange::Alive { heard: sent };
                }
                Renewal::Gone => return SessionChange::Expired,
                Renewal::Unanswered(why) => {
                    self.stream = None;
                    self.next = Some((sent + RETRY_WHILE_SUSPENDED).max(Instant::now()));
                    if !self.suspended {
                        self.suspended = true;
                        return SessionChange::Suspended {
                            why: format!("etcd lease keep-alive unanswered: {why}"),
                        };
                    }
                }
            }
        }
    }
}
