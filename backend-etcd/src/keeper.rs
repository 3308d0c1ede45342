//! Keeping one lease alive, about every TTL/3, and saying when that
//! changes anything.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tenure_tokio::store::{SessionChange, SessionKeeper, Wire};

use crate::errors::lease_not_found;
use crate::session::Current;

/// The pause between two attempts to reach the server while suspended.
const RETRY_WHILE_SUSPENDED: Duration = Duration::from_millis(500);

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
    pub(crate) fn new(client: Client, current: Current) -> Keeper {
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
