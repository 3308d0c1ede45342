//! Keeping one lease alive, about every TTL/3, and saying when that
//! changes anything.

use std::future::Future;
use std::pin::Pin;
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
    /// When the keep-alive not yet answered on it was sent, if one is:
    /// one at a time, so that an answer, however late, is that one's.
    unanswered: Option<Instant>,
}

/// A keep-alive stream being opened (which sends the first keep-alive and
/// waits for its answer), and when it was asked for.
struct Opening {
    sent: Instant,
    open: Pin<Box<dyn Future<Output = Result<Stream, etcd_client::Error>> + Send>>,
}

/// What one keep-alive attempt said.
enum Renewal {
    /// The lease was renewed after the keep-alive sent at this moment.
    Alive(Instant),
    /// The server says the lease does not exist.
    Gone,
    /// No answer yet (the wait ran out, the stream broke, no connection).
    Unanswered(String),
}

/// Keeps one lease alive, every TTL/3, and says when that changes
/// anything: suspended when a keep-alive goes unanswered, alive again when
/// one is answered, expired when the server says the lease is gone (or it
/// must be by now).
///
/// A keep-alive that goes unanswered for a while suspends the session, but
/// its answer is still awaited on the same stream: a loaded server answers
/// late, and a late answer still proves the lease was renewed after the
/// keep-alive was sent. Dropping the stream at the first delay threw those
/// answers away and opened a new stream (itself a request) every few
/// hundred milliseconds, so that 300 members starting together on one
/// server declared their sessions lost although the server kept them.
pub(crate) struct Keeper {
    client: Client,
    current: Current,
    stream: Option<Stream>,
    opening: Option<Opening>,
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
            opening: None,
            suspended: false,
            next: None,
        }
    }

    /// One keep-alive attempt, waiting at most `patience` for an answer:
    /// on the open stream (the answer to the keep-alive outstanding, if
    /// there is one, else to a new one), or on a stream being opened.
    /// `stale`: how long an outstanding keep-alive is awaited before its
    /// stream is given up for a new one.
    async fn renew(&mut self, patience: Duration, stale: Duration) -> Renewal {
        let Some(open) = self.stream.as_mut() else {
            return self.open(patience).await;
        };
        let now = Instant::now();
        let sent = match open.unanswered {
            Some(sent) if now.saturating_duration_since(sent) >= stale => {
                self.stream = None;
                return Renewal::Unanswered(format!(
                    "a keep-alive sent {:?} ago is unanswered",
                    now.saturating_duration_since(sent)
                ));
            }
            Some(sent) => sent,
            None => {
                if let Err(e) = open.keeper.keep_alive().await {
                    self.stream = None;
                    return Renewal::Unanswered(e.to_string());
                }
                open.unanswered = Some(now);
                now
            }
        };
        match tokio::time::timeout(patience, open.answers.message()).await {
            Err(_) => Renewal::Unanswered(format!("no answer within {patience:?}")),
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                open.unanswered = None;
                Renewal::Alive(sent)
            }
            Ok(Ok(Some(_))) => Renewal::Gone,
            Ok(Err(e)) if lease_not_found(&e) => Renewal::Gone,
            Ok(Ok(None)) => {
                self.stream = None;
                Renewal::Unanswered("keep-alive stream closed".to_owned())
            }
            Ok(Err(e)) => {
                self.stream = None;
                Renewal::Unanswered(e.to_string())
            }
        }
    }

    /// Opens a keep-alive stream, or goes on waiting for the one being
    /// opened, at most `patience`.
    async fn open(&mut self, patience: Duration) -> Renewal {
        let lease = self.current.lease;
        let opening = self.opening.get_or_insert_with(|| {
            let mut client = self.client.clone();
            Opening {
                sent: Instant::now(),
                open: Box::pin(async move {
                    let (keeper, answers) = client.lease_keep_alive(lease).await?;
                    Ok(Stream {
                        keeper,
                        answers,
                        unanswered: None,
                    })
                }),
            }
        });
        let sent = opening.sent;
        match tokio::time::timeout(patience, opening.open.as_mut()).await {
            Err(_) => Renewal::Unanswered(format!("no answer within {patience:?}")),
            Ok(result) => {
                self.opening = None;
                match result {
                    // Opening the stream sent a keep-alive and waited for
                    // its answer; a TTL of 0 fails with "lease not found".
                    Ok(stream) => {
                        self.stream = Some(stream);
                        Renewal::Alive(sent)
                    }
                    Err(e) if lease_not_found(&e) => Renewal::Gone,
                    Err(e) => Renewal::Unanswered(e.to_string()),
                }
            }
        }
    }

    /// Waits until `next`, watching the stream meanwhile: a break shows at
    /// once, and so does a late answer to the keep-alive outstanding.
    async fn wait(&mut self, next: Instant) -> Option<Renewal> {
        let deadline = tokio::time::Instant::from_std(next);
        let Some(open) = self.stream.as_mut() else {
            tokio::time::sleep_until(deadline).await;
            return None;
        };
        match tokio::time::timeout_at(deadline, open.answers.message()).await {
            Err(_) => None,
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => open.unanswered.take().map(Renewal::Alive),
            Ok(Ok(Some(_))) => Some(Renewal::Gone),
            Ok(Err(e)) if lease_not_found(&e) => Some(Renewal::Gone),
            Ok(Ok(None)) | Ok(Err(_)) => {
                self.stream = None;
                tokio::time::sleep_until(deadline).await;
                None
            }
        }
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
            let renewal = match self.next.take() {
                Some(next) => self.wait(next).await,
                None => None,
            };
            let renewal = match renewal {
                Some(renewal) => renewal,
                None => {
                    // Unheard of for a whole TTL: the server has dropped
                    // the lease, or is about to (a new lease revokes it
                    // first to make sure).
                    if self.suspended && wire.last_heard() + self.current.ttl <= Instant::now() {
                        return SessionChange::Expired;
                    }
                    self.renew(patience, interval).await
                }
            };
            match renewal {
                Renewal::Alive(sent) => {
                    // The server renewed the lease after we sent the
                    // keep-alive.
                    self.suspended = false;
                    self.next = Some((sent + interval).max(Instant::now()));
                    return SessionChange::Alive { heard: sent };
                }
                Renewal::Gone => return SessionChange::Expired,
                Renewal::Unanswered(why) => {
                    self.next = Some(Instant::now() + RETRY_WHILE_SUSPENDED);
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
