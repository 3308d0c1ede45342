//! [`StoreBackend`]: the [`Backend`] every store's client runs in.

use std::sync::Arc;

use async_trait::async_trait;
use tenure_core::{Event, StoreError, StoreRequest};
use tokio::task::{JoinHandle, JoinSet};

use super::execute::execute;
use super::follow::follow;
use super::gather::Gathered;
use super::shared::Shared;
use super::{Connected, Connector, StoreClient, Wire};
use crate::backend::{check_start, Backend, BackendError, Joining, SessionTicket};

/// The [`Backend`] of a store whose crate implements a [`Connector`]: the
/// session loop, once for every store (see the [module](super)).
///
/// A store's crate wraps one in its own backend type, whose builder
/// methods set the connector's settings
/// ([`StoreBackend::connector_mut`]).
pub struct StoreBackend<C: Connector> {
    connector: C,
    running: Option<Running<C::Client>>,
}

/// A started backend: what it shares, and its tasks — one per command in
/// flight (and the watch it leaves behind), and the one that follows the
/// session.
struct Running<C: StoreClient> {
    shared: Arc<Shared<C>>,
    commands: JoinSet<()>,
    follower: JoinHandle<()>,
    /// Claims, offset reads, commits and releases submitted and not taken
    /// yet by the task that sends them as batches.
    gathered: Gathered,
}

impl<C: StoreClient> Running<C> {
    /// Stops the follower and every command task, waits until they have
    /// ended (and dropped what they held of the session), and takes the
    /// session held, if any, for the client to close.
    async fn stop(mut self) -> (Arc<Shared<C>>, Option<C::Session>) {
        self.shared.close();
        self.follower.abort();
        let _ = (&mut self.follower).await;
        self.commands.abort_all();
        while self.commands.join_next().await.is_some() {}
        let session = self.shared.take_current();
        (self.shared, session)
    }

    /// Stops the follower and every command task without waiting (for
    /// `Drop`), and takes the session held, if any.
    fn abort(mut self) -> (Arc<Shared<C>>, Option<C::Session>) {
        self.shared.close();
        self.follower.abort();
        self.commands.abort_all();
        let session = self.shared.take_current();
        (self.shared, session)
    }
}

impl<C: Connector + std::fmt::Debug> std::fmt::Debug for StoreBackend<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreBackend")
            .field("connector", &self.connector)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl<C: Connector> StoreBackend<C> {
    /// A backend that opens its sessions with `connector`.
    pub fn new(connector: C) -> StoreBackend<C> {
        StoreBackend {
            connector,
            running: None,
        }
    }

    /// The connector, for its settings.
    pub fn connector(&self) -> &C {
        &self.connector
    }

    /// The connector, to change its settings before the member starts.
    pub fn connector_mut(&mut self) -> &mut C {
        &mut self.connector
    }
}

#[async_trait]
impl<C: Connector> Backend for StoreBackend<C> {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        check_start(self.running.is_some(), joining.session_timeout)?;
        let Connected {
            client,
            session,
            heard,
            claims_held,
        } = self.connector.connect(&joining).await?;
        let id = C::Client::session_id(&session);
        let wire = Wire::new(self.connector.request_counts(), heard);
        let shared = Arc::new(Shared::new(client, session, joining.events, wire));
        tracing::info!(store = %shared.client.store(), session = %format_args!("{:#x}", id.0), "session established");
        shared.opened(id, heard);
        if let Some(partitions) = claims_held {
            // The claims the previous process left under the session: the
            // member keeps those it is assigned and releases the others.
            tracing::info!(
                store = %shared.client.store(),
                session = %format_args!("{:#x}", id.0),
                claims = partitions.len(),
                "session resumed from a previous process"
            );
            shared.send(Event::ClaimsHeld { partitions });
        }
        let follower = tokio::spawn(follow(shared.clone()));
        self.running = Some(Running {
            shared,
            commands: JoinSet::new(),
            follower,
            gathered: Gathered::default(),
        });
        Ok(())
    }

    /// Carries out `command` in a task of its own, if it was issued under
    /// the session held now. Claims, offset reads, commits and releases
    /// are gathered instead: the first one submitted after the last batch
    /// left starts a task that, once the submitting task yields (the
    /// member's step is over: every request the step decided is
    /// submitted), takes all that was gathered and sends it in batches.
    ///
    /// A command issued under a session that ended fails with
    /// [`StoreError::SessionExpired`]: it must not act under the next one
    /// (a claim would leave a record no member tracks). A backend that is
    /// not running (not started, or shut down) has no one to answer: the
    /// command is logged and dropped.
    fn submit(&mut self, command: StoreRequest) {
        let Some(running) = self.running.as_mut() else {
            let event = command.failed(StoreError::SessionExpired);
            tracing::warn!(?event, "command submitted to a backend that is not running");
            return;
        };
        // Forget finished tasks so the set does not grow.
        while running.commands.try_join_next().is_some() {}
        let shared = &running.shared;
        let current = shared.current();
        match current {
            Some(current) if C::Client::session_id(&current) == command.session => {
                if command.op.batch_kind().is_some() {
                    if running.gathered.add(command) {
                        running
                            .commands
                            .spawn(running.gathered.send(shared.clone()));
                    }
                    return;
                }
                running
                    .commands
                    .spawn(execute(shared.clone(), current, command));
            }
            _ => shared.send(command.failed(StoreError::SessionExpired)),
        }
    }

    async fn shutdown(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let (shared, session) = running.stop().await;
        if let Some(session) = session {
            shared.client.close(session).await;
        }
    }

    fn ticket(&self) -> Option<SessionTicket> {
        let shared = &self.running.as_ref()?.shared;
        shared.client.ticket(&shared.current()?)
    }

    async fn detach(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let (shared, session) = running.stop().await;
        if let Some(session) = session {
            shared.client.detach(session).await;
        }
    }
}

impl<C: Connector> Drop for StoreBackend<C> {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            let (shared, session) = running.abort();
            if let Some(session) = session {
                shared.client.abandon(session);
            }
        }
    }
}
