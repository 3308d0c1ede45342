//! What the session loop shares with the tasks that carry out requests:
//! the session held, the member's event channel, the wire, the partition
//! locks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tenure_core::{ClientError, Event, Operation, SessionId, StoreError};
use tokio::sync::watch;

use super::locks::PartitionLocks;
use super::wire::Renewals;
use super::{StoreClient, Wire};
use crate::backend::EventSender;

/// What the session loop shares with the tasks that carry out requests
/// and the task that follows the session.
pub(crate) struct Shared<C: StoreClient> {
    pub(crate) client: Arc<C>,
    events: EventSender,
    /// `None` while a new session is being opened after an expiry, and after
    /// shutdown. A watch channel, so that a task can wait for its session to
    /// end.
    current: watch::Sender<Option<C::Session>>,
    pub(crate) wire: Wire,
    /// The renewals the member was told of last.
    reported: Mutex<Renewals>,
    closing: AtomicBool,
    pub(crate) locks: PartitionLocks,
}

impl<C: StoreClient> Shared<C> {
    /// The state of a member whose first session is `first` of `client`,
    /// whose events go to `events`.
    pub(crate) fn new(client: C, first: C::Session, events: EventSender, wire: Wire) -> Shared<C> {
        Shared {
            client: Arc::new(client),
            events,
            current: watch::Sender::new(Some(first)),
            reported: Mutex::new(wire.renewals()),
            wire,
            closing: AtomicBool::new(false),
            locks: PartitionLocks::default(),
        }
    }

    /// The session held now, if any.
    pub(crate) fn current(&self) -> Option<C::Session> {
        self.current.borrow().clone()
    }

    /// Takes the session held, if any, leaving none.
    pub(crate) fn take_current(&self) -> Option<C::Session> {
        self.current.send_replace(None)
    }

    /// A new session is open (after an expiry), at or after `opened`:
    /// holds it and tells the member.
    pub(crate) fn established(&self, session: C::Session, opened: Instant) {
        let id = C::session_id(&session);
        self.current.send_replace(Some(session));
        self.opened(id, opened);
    }

    /// Tells the member that session `id` is open, and that the store
    /// counted it from `opened` (the leader creates a session, or
    /// revalidates a resumed one, itself).
    pub(crate) fn opened(&self, id: SessionId, opened: Instant) {
        self.wire.heard(opened);
        self.send(Event::SessionEstablished { session: id });
        // Told whatever was told before: a new session starts with nothing
        // counted in the member.
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        reported.counted = reported.counted.max(opened);
        self.send(Event::SessionRenewed {
            sent: opened,
            counted_after: Duration::ZERO,
        });
    }

    /// Sends a request's result to the member, after the renewals the
    /// store's answers brought since the last report.
    pub(crate) fn answer(&self, result: Event) {
        self.report_renewals();
        self.send(result);
    }

    /// Tells the member of the renewals the wire saw since the last
    /// report ([`Event::SessionRenewed`]): the latest one counted at once,
    /// and the latest request the leader answered, with the store's delay
    /// in counting it.
    pub(crate) fn report_renewals(&self) {
        let now = self.wire.renewals();
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        if now.counted > reported.counted {
            reported.counted = now.counted;
            self.send(Event::SessionRenewed {
                sent: now.counted,
                counted_after: Duration::ZERO,
            });
        }
        if now.leader_answered > reported.leader_answered {
            let Some(session) = self.current() else {
                return;
            };
            reported.leader_answered = now.leader_answered;
            self.send(Event::SessionRenewed {
                sent: now.leader_answered,
                counted_after: self.client.counted_after(&session),
            });
        }
    }

    /// The session held is gone: holds none and tells the member. When
    /// requests were unanswered, the member is first told (a problem of
    /// [`Operation::KeepSession`]) what they were doing, so that an expiry
    /// under load says what waited and for how long.
    pub(crate) fn expired(&self) {
        let heard_ago = self.wire.last_heard().elapsed();
        match self.wire.backlog() {
            Some(backlog) => {
                let why = format!(
                    "the session expired with {} requests unanswered ({} sent, the others \
                     waiting for their turn); the oldest had waited {:?}, {:?} of it for its \
                     turn; the store was last heard {heard_ago:?} ago",
                    backlog.requests, backlog.sent, backlog.oldest, backlog.oldest_waited,
                );
                tracing::warn!(%why, "store session expired with requests unanswered");
                self.send(Event::StoreProblem {
                    operation: Operation::KeepSession,
                    error: StoreError::Other(ClientError::message(why)),
                });
            }
            None => tracing::warn!(
                ?heard_ago,
                "store session expired with no request unanswered"
            ),
        }
        self.current.send_replace(None);
        self.send(Event::SessionExpired);
    }

    /// Resolves once `session` is no longer the session held.
    pub(crate) async fn session_ended(&self, session: SessionId) {
        let mut changes = self.current.subscribe();
        // The sender lives as long as `self`: it cannot close while we
        // borrow it.
        let _ = changes
            .wait_for(|s| s.as_ref().map(C::session_id) != Some(session))
            .await;
    }

    /// Sends an event to the member; a closed channel means the runtime is
    /// gone and there is no one left to tell.
    pub(crate) fn send(&self, event: Event) {
        if self.events.send(event).is_err() {
            tracing::debug!("event channel closed; event dropped");
        }
    }

    /// Marks the session loop as closing: its follower must not open a new
    /// session any more.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether [`Shared::close`] was called.
    pub(crate) fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}
