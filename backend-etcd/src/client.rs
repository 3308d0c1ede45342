//! The etcd client of a joined member as the runtime's session loop uses
//! it: the [`Connector`] that grants its first lease, and the
//! [`StoreClient`] that grants the next, keeps each alive, revokes it or
//! leaves it to a restarted process.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::SessionId;
use tenure_tokio::store::{Connected, Connector, RequestCounts, StoreClient, Wire};
use tenure_tokio::{BackendError, Joining, SessionTicket};

use crate::group::GroupClient;
use crate::keeper::Keeper;
use crate::keys::Keys;
use crate::ops::Ctx;
use crate::session::{connect, endpoint_problem, grant, Config, ConnectError, Current};
use crate::watches;

/// How long a close waits for the server to revoke the lease.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

#[async_trait]
impl Connector for Config {
    type Client = GroupClient;

    fn request_counts(&self) -> Arc<RequestCounts> {
        self.requests.clone()
    }

    async fn connect(&mut self, joining: &Joining) -> Result<Connected<GroupClient>, BackendError> {
        self.session_timeout = joining.session_timeout;
        let endpoints = self.endpoint_list();
        if endpoints.is_empty() {
            return Err(BackendError::Config(format!(
                "{}: no endpoint given",
                self.store()
            )));
        }
        if let Some(problem) = endpoints.iter().find_map(|e| endpoint_problem(e)) {
            return Err(BackendError::Config(format!("{}: {problem}", self.store())));
        }
        self.detached = joining.static_membership;
        let keys = Keys::new(&self.prefix, &joining.group);
        let before = Instant::now();
        let resume = joining.resume.as_ref().map(|ticket| ticket.id);
        let (client, current, held) = connect(self, &endpoints, resume).await?;
        let (watches, watching) = watches::Watches::new(watches::Link {
            client: client.clone(),
            request_timeout: self.request_timeout(),
            requests: self.requests.clone(),
        });
        // It ends by itself once the backend and every watch are gone.
        tokio::spawn(watching);
        tracing::info!(
            store = %self.store(),
            lease = %format_args!("{:x}", current.lease),
            ttl = ?current.ttl,
            "etcd lease granted"
        );
        let claims_held = held.map(|held| keys.owned_partitions(&held));
        let group = GroupClient::new(self.clone(), keys, joining.member.clone(), client, watches);
        let connected = Connected::new(group, current, before);
        Ok(match claims_held {
            // The claims the previous process left under the lease.
            Some(claims) => connected.resumed(claims),
            None => connected,
        })
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
            return Err(ConnectError::Timeout(request_timeout).into_backend_error(self.store()));
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
