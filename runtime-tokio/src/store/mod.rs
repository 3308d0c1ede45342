//! The store leg of a member: one session loop for every coordination
//! store, and the small traits a store's client implements for it.
//!
//! A store's crate implements three things:
//! - a [`Connector`]: its configuration, which opens a member's first
//!   session (or resumes one a previous process left);
//! - a [`StoreClient`]: what the member uses once it joined — a new
//!   session after an expiry, a [`SessionKeeper`] that follows one
//!   session, the [`StoreOps`] under one session, and closing or leaving
//!   a session;
//! - the [`StoreOps`]: the core's store commands as the store's own
//!   requests, with their errors in the core's terms.
//!
//! [`StoreBackend`] is the rest, once for every store: it is the
//! [`Backend`](crate::Backend) the member drives. It holds the current
//! session, gathers the requests a step of the member decided into
//! batches, takes each partition's lock, hands each request or batch to
//! the store's operations once and sends the member one event per answer,
//! follows the session (suspensions, resumptions, expiries, a new session
//! after each expiry), and keeps the member's [`Wire`]: the turns that
//! bound the requests on the wire, the request count, and the moment the
//! store last heard from the session.
//!
//! One commit's way: the member's step decides it → [`StoreBackend`]
//! gathers it with the step's other commits → locks their partitions →
//! [`StoreOps::commit_many`] (the store's crate: one request, its turn
//! taken on the [`Wire`]) → the answers → one
//! [`Event::CommitResult`](tenure_core::Event::CommitResult) each.

mod backend;
mod counts;
mod execute;
mod follow;
mod gather;
mod hooks;
mod locks;
mod open;
mod ops;
mod registrations;
mod shared;
#[cfg(test)]
mod tests;
mod wire;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::{SessionId, TopicPartition};

use crate::backend::{BackendError, Joining, SessionTicket};

pub use backend::StoreBackend;
pub use counts::{RequestCounts, RequestKind, RequestTally};
pub use hooks::Hooks;
pub use open::OpenError;
pub use ops::{each_failed, MemberList, StoreOps, Watch};
pub use registrations::Registrations;
pub use tenure_core::records::OPS_PER_BATCH;
pub use wire::{Wire, REQUESTS_IN_FLIGHT};

/// A coordination store as a member starts with it: its configuration,
/// which opens the member's first session.
#[async_trait]
pub trait Connector: Send + 'static {
    /// The store's client once the member joined.
    type Client: StoreClient;

    /// The counts of the requests sent to the store, across sessions: the
    /// [`Wire`] counts every request in them, under the kind of the command
    /// it carries out.
    fn request_counts(&self) -> Arc<RequestCounts>;

    /// Opens the first session of the member `joining` names — or resumes
    /// the session `joining.resume` names, if it is still alive — within
    /// the store's connect timeout. `joining.session_timeout` is greater
    /// than zero.
    async fn connect(&mut self, joining: &Joining)
        -> Result<Connected<Self::Client>, BackendError>;
}

/// What [`Connector::connect`] opened.
#[derive(Debug)]
#[non_exhaustive]
pub struct Connected<C: StoreClient> {
    /// The client, for the member's whole life.
    pub client: C,
    /// The first session.
    pub session: C::Session,
    /// A moment at or before the store heard from the session last: the
    /// moment the attempt that opened it began.
    pub heard: Instant,
    /// The session was resumed from a previous process (static
    /// membership): the partitions whose claims it holds. `None` for a new
    /// session.
    pub claims_held: Option<Vec<TopicPartition>>,
}

impl<C: StoreClient> Connected<C> {
    /// `session` of `client`, new, opened by an attempt that began at
    /// `heard`.
    pub fn new(client: C, session: C::Session, heard: Instant) -> Connected<C> {
        Connected {
            client,
            session,
            heard,
            claims_held: None,
        }
    }

    /// Resumed from a previous process, with the claims it holds.
    pub fn resumed(mut self, claims_held: Vec<TopicPartition>) -> Connected<C> {
        self.claims_held = Some(claims_held);
        self
    }
}

/// A coordination store as a joined member uses it: shared by the session
/// loop and every request's task.
#[async_trait]
pub trait StoreClient: Send + Sync + Sized + 'static {
    /// One session as the client holds it (a client and its session id, a
    /// lease): cheap to clone.
    type Session: Clone + Send + Sync + 'static;
    /// Follows one session.
    type Keeper: SessionKeeper;
    /// The store commands under one session.
    type Ops: StoreOps;

    /// How the store is named in errors and logs.
    fn store(&self) -> String;

    /// The core's id of `session`.
    fn session_id(session: &Self::Session) -> SessionId;

    /// How long after the leader answered a request of `session` sent
    /// through [`Wire::send_to_leader`] it may take to count it as the
    /// session's activity: zero (the default) where the leader counts what
    /// it answers. A ZooKeeper follower reports its sessions' activity to
    /// the leader only with its answer to the leader's next ping.
    fn counted_after(&self, session: &Self::Session) -> Duration {
        let _ = session;
        Duration::ZERO
    }

    /// What follows `session` until it ends.
    fn keeper(&self, session: &Self::Session) -> Self::Keeper;

    /// The store commands under `session`, their requests sent on `wire`.
    fn ops(self: &Arc<Self>, session: &Self::Session, wire: &Wire) -> Self::Ops;

    /// Opens a new session after `expired` ended: one attempt, within the
    /// connect timeout (the session loop tries again after a pause).
    async fn reopen(&self, expired: &Self::Session) -> Result<Self::Session, BackendError>;

    /// `session` as another process needs it to resume it (static
    /// membership); `None` where the store's sessions cannot be resumed.
    fn ticket(&self, session: &Self::Session) -> Option<SessionTicket>;

    /// Ends `session` at once: its ephemeral records disappear now rather
    /// than after the session timeout. Waits, within a bound, for the store
    /// to confirm.
    async fn close(&self, session: Self::Session);

    /// Stops using `session` without ending it, for a restarted process to
    /// resume (static membership); a client whose sessions are not kept
    /// for that closes it.
    async fn detach(&self, session: Self::Session);

    /// `session` is dropped without a close (the backend was dropped): ends
    /// it in the background if the store needs telling, or leaves it for a
    /// restarted process (static membership). Must not block.
    fn abandon(&self, session: Self::Session);
}

/// What happened to a session, as its [`SessionKeeper`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionChange {
    /// The store heard from the session at or after `heard` (a keep-alive
    /// answered, a connection made again).
    Alive {
        /// A moment at or before the store heard from it.
        heard: Instant,
    },
    /// The connection is in trouble: the session may be expiring on the
    /// store.
    Suspended {
        /// Why, for the log.
        why: String,
    },
    /// The session is gone (the store said so, or it must be by now).
    Expired,
    /// The client was closed: nothing more will happen.
    Closed,
}

/// Follows one session: keeps it alive where the store needs the client to
/// (an etcd lease), and says when its state changes.
#[async_trait]
pub trait SessionKeeper: Send + 'static {
    /// Waits for the next change of the session's state. `wire` says when
    /// the store last heard from the session, from every request answered
    /// through its leader too.
    async fn next_change(&mut self, wire: &Wire) -> SessionChange;
}
