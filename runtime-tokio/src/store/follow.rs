//! Following the member's sessions: suspensions and resumptions as the
//! store's client sees them, and after each expiry a new session, tried
//! until one opens or the member closes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::{ClientError, Event, Operation, StoreError};

use super::shared::Shared;
use super::{SessionChange, SessionKeeper, StoreClient};

/// Follows the current session, and every session opened after it, until
/// the member closes.
pub(crate) async fn follow<C: StoreClient>(shared: Arc<Shared<C>>) {
    let Some(first) = shared.current() else {
        return;
    };
    let mut keeper = shared.client.keeper(&first);
    drop(first);
    let mut suspended = false;
    loop {
        let change = keeper.next_change(&shared.wire).await;
        if shared.is_closing() {
            return;
        }
        match change {
            SessionChange::Alive { heard } => {
                shared.wire.heard(heard);
                if suspended {
                    suspended = false;
                    tracing::info!(store = %shared.client.store(), "session resumed");
                    shared.send(Event::SessionResumed);
                }
                // After the resumption: a suspended member counts none.
                shared.report_renewals();
            }
            SessionChange::Suspended { why } => {
                if !suspended {
                    suspended = true;
                    tracing::warn!(store = %shared.client.store(), %why, "session suspended");
                    shared.send(Event::SessionSuspended {
                        last_heard: shared.wire.last_heard(),
                    });
                }
            }
            SessionChange::Expired => {
                suspended = false;
                tracing::warn!(store = %shared.client.store(), "session ended; opening a new one");
                let Some(expired) = shared.current() else {
                    return;
                };
                shared.expired();
                let Some(next) = reopen(&shared, &expired).await else {
                    return;
                };
                drop(expired);
                keeper = shared.client.keeper(&next);
            }
            SessionChange::Closed => return,
        }
    }
}

/// Opens a new session after `expired`, trying again after a growing
/// pause until it works or the member closes (`None`); holds it and tells
/// the member.
///
/// An error retrying cannot mend (a configuration or session timeout the
/// store refuses) is sent to the member once, as a store problem: the
/// application must hear of it, not only the log.
async fn reopen<C: StoreClient>(shared: &Shared<C>, expired: &C::Session) -> Option<C::Session> {
    let mut backoff = ReconnectBackoff::new();
    let mut reported = false;
    loop {
        if shared.is_closing() {
            return None;
        }
        let before = Instant::now();
        match shared.client.reopen(expired).await {
            Ok(session) if shared.is_closing() => {
                shared.client.close(session).await;
                return None;
            }
            Ok(session) => {
                tracing::info!(store = %shared.client.store(), "new session established");
                shared.established(session.clone(), before);
                return Some(session);
            }
            Err(error) => {
                tracing::warn!(
                    %error,
                    store = %shared.client.store(),
                    "cannot open a new session; retrying in {:?}",
                    backoff.next()
                );
                if error.is_permanent() && !reported {
                    reported = true;
                    shared.send(Event::StoreProblem {
                        operation: Operation::OpenSession,
                        error: StoreError::Other(ClientError::new(error)),
                    });
                }
                backoff.wait().await;
            }
        }
    }
}

/// The growing pause between attempts to open a new session after an
/// expiry: from half a second, doubling, up to five.
#[derive(Debug)]
struct ReconnectBackoff(Duration);

impl ReconnectBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(5);

    /// The first pause.
    fn new() -> ReconnectBackoff {
        ReconnectBackoff(Self::FIRST)
    }

    /// The next pause.
    fn next(&self) -> Duration {
        self.0
    }

    /// Waits the next pause, and makes the one after it longer.
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(Self::MAX);
    }
}
