//! Keeping one lease alive, about every TTL/3, and saying when that
//! changes anything.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tenure_tokio::store::{SessionChange, SessionKeeper, Wire};

use crate::errors::{answered, lease_not_found};
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
    /// No answer (timeout, broken stream, no connection, or a node without
    /// a leader): the lease may well live on.
    Unanswered(String),
    /// A server refused the keep-alive for another reason than a missing
    /// lease (a permission, a bad request): keeping on asking mends nothing.
    Refused(String),
}

/// What a failed keep-alive says, from its error. Only a status the
/// server sent is a refusal; the client's own errors about the stream (a
/// closed channel, a stream that ended before its first answer) are a
/// connection's trouble.
fn failed(error: etcd_client::Error) -> Renewal {
    if lease_not_found(&error) {
        Renewal::Gone
    } else if matches!(error, etcd_client::Error::GRpcStatus(_)) && answered(&error) {
        Renewal::Refused(error.to_string())
    } else {
        Renewal::Unanswered(error.to_string())
    }
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
                Err(e) => failed(e),
            }
        }
        Some(open) => {
            if let Err(e) = open.keeper.keep_alive().await {
                return failed(e);
            }
            match open.answers.message().await {
                Ok(Some(answer)) if answer.ttl() > 0 => Renewal::Alive,
                Ok(Some(_)) => Renewal::Gone,
                Ok(None) => Renewal::Unanswered("keep-alive stream closed".to_owned()),
                Err(e) => failed(e),
            }
        }
    }
}

/// Keeps one lease alive, every TTL/3, and says when that changes
/// anything: suspended when a keep-alive goes unanswered, alive again when
/// one is answered, expired when the server says the lease is gone.
///
/// Unanswered for a whole TTL, the lease is not taken for gone: only the
/// cluster's leader ends a lease, and a new leader extends every lease it
/// takes over, so a member that waited out an election (or any outage the
/// leases outlived) resumes with its session and its partitions, where
/// giving up by its own clock would have revoked a live lease and moved
/// every partition it held. The member stops handing out by its own count
/// of the lease all the same. Only a server's refusal other than "no
/// leader" (a permission, say) ends the session after a TTL unheard, so
/// that a new one is asked for and the refusal reaches the member.
pub(crate) struct Keeper {
    client: Client,
    current: Current,
    stream: Option<Stream>,
    suspended: bool,
    /// Whether the last keep-alive was refused by a server (rather than
    /// unanswered).
    refused: bool,
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
            refused: false,
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
        loop {
            // Keep-alives are answered by the leader at once (no consensus
            // round): half the interval unanswered is a connection in
            // trouble. Once suspended, a keep-alive waits the whole
            // interval: a late answer still proves the lease was renewed
            // after it was sent, and a loaded server that answers every
            // keep-alive late must not keep the member suspended for good.
            let patience = if self.suspended {
                interval
            } else {
                interval / 2
            };
            if let Some(next) = self.next.take() {
                if self.wait(next).await {
                    return SessionChange::Expired;
                }
            }
            // Refused for a whole TTL: no keep-alive got through, and asking
            // again will not change that; a new lease (which revokes this
            // one first) will say why to the member.
            if self.refused && wire.last_heard() + self.current.ttl <= Instant::now() {
                return SessionChange::Expired;
            }
            let sent = Instant::now();
            let renewal = tokio::time::timeout(
                patience,
                renew(&self.client, self.current.lease, &mut self.stream),
            )
            .await
            .unwrap_or_else(|_| Renewal::Unanswered(format!("no answer within {patience:?}")));
            let refused = matches!(renewal, Renewal::Refused(_));
            match renewal {
                Renewal::Alive => {
                    // The server renewed the lease after we sent the
                    // keep-alive.
                    self.suspended = false;
                    self.refused = false;
                    self.next = Some(sent + interval);
                    return SessionChange::Alive { heard: sent };
                }
                Renewal::Gone => return SessionChange::Expired,
                Renewal::Unanswered(why) | Renewal::Refused(why) => {
                    self.refused = refused;
                    self.stream = None;
                    self.next = Some((sent + RETRY_WHILE_SUSPENDED).max(Instant::now()));
                    if !self.suspended {
                        self.suspended = true;
                        return SessionChange::Suspended {
                            why: format!(
                                "etcd lease keep-alive {}: {why}",
                                if refused { "refused" } else { "unanswered" }
                            ),
                        };
                    }
                }
            }
        }
    }
}
