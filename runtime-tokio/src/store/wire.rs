//! The member's line to its store: every request takes a turn on it, is
//! counted, and, when its answer proves the session alive on the store's
//! leader, moves the moment the store last heard from the member.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{RequestCounts, RequestKind};

/// How many of one member's store requests are on the wire at once: the
/// others wait their turn in the member's process.
pub const REQUESTS_IN_FLIGHT: usize = 64;

/// The member's line to its store, shared by every request of every
/// session it opens: cheap to clone.
///
/// A store's operations send each request through it
/// ([`Wire::send`], [`Wire::send_to_leader`]): the request waits for its
/// turn (at most [`REQUESTS_IN_FLIGHT`] on the wire), is counted in the
/// backend's request counter, and, if it went through the store's leader
/// and was answered, tells the wire that the store heard from the session.
/// Each request is counted under the kind of the command the wire was
/// handed out for ([`RequestKind`]).
#[derive(Clone, Debug)]
pub struct Wire {
    line: Arc<Line>,
    kind: RequestKind,
}

#[derive(Debug)]
struct Line {
    turns: RequestTurns,
    /// Renewals the leader counted when it answered ([`Wire::heard`]).
    last_heard: LastHeard,
    /// Requests the leader answered, which it may count later
    /// ([`Wire::send_to_leader`]).
    leader_answered: LastHeard,
    requests: Arc<RequestCounts>,
}

impl Wire {
    /// A line whose requests are counted in `requests`, to a store that
    /// heard from the session at or after `heard` (the moment the attempt
    /// that opened it began).
    pub(crate) fn new(requests: Arc<RequestCounts>, heard: Instant) -> Wire {
        Wire {
            line: Arc::new(Line {
                turns: RequestTurns::default(),
                last_heard: LastHeard::new(heard),
                leader_answered: LastHeard::new(heard),
                requests,
            }),
            kind: RequestKind::Other,
        }
    }

    /// The same line, its requests counted as sent for `kind`.
    pub(crate) fn for_kind(&self, kind: RequestKind) -> Wire {
        Wire {
            line: self.line.clone(),
            kind,
        }
    }

    /// Sends one request once it has its turn, and waits for its answer.
    /// The answer says nothing of the session: a read a follower answers
    /// from what it has, even one cut off from its leader that has not
    /// noticed yet, while the leader, which expires sessions, hears
    /// nothing of it.
    pub async fn send<F: Future>(&self, request: impl FnOnce() -> F) -> F::Output {
        let _turn = self.line.turns.take().await;
        self.count(1);
        request().await
    }

    /// Sends one request that goes through the store's leader (a write, a
    /// sync) once it has its turn, and waits for its answer: one the store
    /// gave (`answered` says which) proves the session alive on the leader
    /// when it was sent, and the leader counts it as activity of the
    /// session within the store's delay
    /// ([`StoreClient::counted_after`](super::StoreClient::counted_after)).
    /// A client sends a request when its future is made, so the time is
    /// taken before `request` is called: it is at or before the moment the
    /// store heard the request.
    pub async fn send_to_leader<F: Future>(
        &self,
        request: impl FnOnce() -> F,
        answered: impl FnOnce(&F::Output) -> bool,
    ) -> F::Output {
        let _turn = self.line.turns.take().await;
        self.count(1);
        let sent = Instant::now();
        let answer = request().await;
        if answered(&answer) {
            self.line.leader_answered.heard(sent);
        }
        answer
    }

    /// Counts `requests` sent without a turn (reads fanned out to a server
    /// that has no multi-read, say).
    pub fn count(&self, requests: u64) {
        self.line.requests.count(self.kind, requests);
    }

    /// The counts every request on this line goes into.
    pub(crate) fn counts(&self) -> &RequestCounts {
        &self.line.requests
    }

    /// Notes that the store's leader renewed the session at or after `at`,
    /// and counted it then (an etcd keep-alive answered, a session opened
    /// or revalidated).
    pub fn heard(&self, at: Instant) {
        self.line.last_heard.heard(at);
    }

    /// A moment at or before the latest moment the store's leader is known
    /// to have heard from the session, counted or not: what
    /// [`tenure_core::Event::SessionSuspended`] reports (the member takes
    /// the earlier of it and what it counted).
    pub fn last_heard(&self) -> Instant {
        self.line
            .last_heard
            .get()
            .max(self.line.leader_answered.get())
    }

    /// The latest renewal the leader counted when it answered, and the
    /// latest request it answered: what the member is told in
    /// [`tenure_core::Event::SessionRenewed`].
    pub(crate) fn renewals(&self) -> Renewals {
        Renewals {
            counted: self.line.last_heard.get(),
            leader_answered: self.line.leader_answered.get(),
        }
    }

    /// What the requests are doing now; `None` when none waits or is
    /// unanswered.
    pub(crate) fn backlog(&self) -> Option<Backlog> {
        self.line.turns.backlog()
    }
}

/// The latest renewals of the member's sessions as the wire saw them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Renewals {
    /// The latest renewal the leader counted as it answered.
    pub(crate) counted: Instant,
    /// When the latest request the leader answered was sent.
    pub(crate) leader_answered: Instant,
}

/// A moment at or before the latest moment the store is known to have heard
/// from a session (renewed it). It only moves forward.
#[derive(Debug)]
struct LastHeard(Mutex<Instant>);

impl LastHeard {
    fn new(at: Instant) -> LastHeard {
        LastHeard(Mutex::new(at))
    }

    fn heard(&self, at: Instant) {
        let mut last = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if at > *last {
            *last = at;
        }
    }

    fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The turns of a member's store requests: at most [`REQUESTS_IN_FLIGHT`]
/// are sent and unanswered at once.
///
/// A cold start or a rebalance asks the store for a few requests per
/// partition at once. Sent all together, thousands of them would queue in
/// the server ahead of the session's keep-alives (ZooKeeper answers a
/// session's requests in order), and those that time out on the wire are
/// cancelled, which an HTTP/2 server counts against the connection (etcd
/// closes it with `ENHANCE_YOUR_CALM` after too many), taking the
/// keep-alives with it. Waiting here instead, the keep-alives, which do not
/// take a turn, stay behind at most this many requests; a request's
/// timeout starts when it is sent.
#[derive(Debug)]
pub(crate) struct RequestTurns {
    slots: tokio::sync::Semaphore,
    /// Every request waiting for its turn or unanswered: when it began
    /// waiting, and when it was sent.
    requests: Mutex<BTreeMap<u64, (Instant, Option<Instant>)>>,
    next: AtomicU64,
}

impl Default for RequestTurns {
    fn default() -> Self {
        RequestTurns {
            slots: tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT),
            requests: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        }
    }
}

/// What a member's requests are doing at one moment
/// ([`RequestTurns::backlog`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backlog {
    /// Requests waiting for their turn or unanswered.
    pub(crate) requests: usize,
    /// Of those, the ones sent.
    pub(crate) sent: usize,
    /// How long the oldest has waited so far.
    pub(crate) oldest: Duration,
    /// How much of that it waited for its turn.
    pub(crate) oldest_waited: Duration,
}

/// A request's turn, from [`RequestTurns::take`]: the request may be sent
/// while it is held, and is forgotten when it is dropped.
#[derive(Debug)]
pub(crate) struct Turn<'a> {
    turns: &'a RequestTurns,
    id: u64,
    _slot: Option<tokio::sync::SemaphorePermit<'a>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.turns.lock().remove(&self.id);
    }
}

impl RequestTurns {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (Instant, Option<Instant>)>> {
        self.requests.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a request's turn, held until the guard is dropped (once
    /// the request is answered or given up).
    pub(crate) async fn take(&self) -> Turn<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // Forgotten if this future is dropped while it waits.
        let mut turn = Turn {
            turns: self,
            id,
            _slot: None,
        };
        self.lock().insert(id, (Instant::now(), None));
        // Never closed: an error would only mean no bound.
        turn._slot = self.slots.acquire().await.ok();
        if let Some(entry) = self.lock().get_mut(&id) {
            entry.1 = Some(Instant::now());
        }
        turn
    }

    /// What the requests are doing now; `None` when none waits or is
    /// unanswered.
    pub(crate) fn backlog(&self) -> Option<Backlog> {
        let requests = self.lock();
        let (&_, &(began, sent)) = requests.iter().next()?;
        let now = Instant::now();
        Some(Backlog {
            requests: requests.len(),
            sent: requests.values().filter(|(_, sent)| sent.is_some()).count(),
            oldest: now.saturating_duration_since(began),
            oldest_waited: sent.unwrap_or(now).saturating_duration_since(began),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use futures_util::FutureExt;

    use super::{RequestTurns, Wire, REQUESTS_IN_FLIGHT};

    #[tokio::test]
    async fn a_backlog_names_the_oldest_request_and_how_long_it_waited_for_its_turn() {
        let turns = RequestTurns::default();
        assert_eq!(turns.backlog(), None);
        let mut held = Vec::new();
        for _ in 0..REQUESTS_IN_FLIGHT {
            held.push(turns.take().await);
        }
        let waiting = turns.take();
        tokio::pin!(waiting);
        // Polled once: it waits for a turn.
        assert!(waiting.as_mut().now_or_never().is_none());
        let backlog = turns.backlog().expect("requests are unanswered");
        assert_eq!(
            (backlog.requests, backlog.sent),
            (REQUESTS_IN_FLIGHT + 1, REQUESTS_IN_FLIGHT)
        );
        drop(held.remove(0));
        let turn = waiting.await;
        let backlog = turns.backlog().expect("requests are unanswered");
        assert_eq!(
            (backlog.requests, backlog.sent),
            (REQUESTS_IN_FLIGHT, REQUESTS_IN_FLIGHT)
        );
        drop(held);
        drop(turn);
        assert_eq!(turns.backlog(), None, "answered requests are forgotten");
    }

    #[tokio::test]
    async fn no_more_requests_than_turns_are_in_flight_and_all_get_one() {
        let turns = Arc::new(RequestTurns::default());
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (release, released) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..REQUESTS_IN_FLIGHT * 3 {
            let (turns, now, most) = (turns.clone(), now.clone(), most.clone());
            let mut released = released.clone();
            tasks.spawn(async move {
                let _turn = turns.take().await;
                let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(in_flight, Ordering::SeqCst);
                // Held until every turn is taken at least once over.
                let _ = released.wait_for(|go| *go).await;
                now.fetch_sub(1, Ordering::SeqCst);
            });
        }
        while now.load(Ordering::SeqCst) < REQUESTS_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
        // Every task has run as far as it can: the others wait for a turn.
        for _ in 0..REQUESTS_IN_FLIGHT * 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(most.load(Ordering::SeqCst), REQUESTS_IN_FLIGHT);
        release.send_replace(true);
        let mut finished = 0;
        while let Some(done) = tasks.join_next().await {
            done.expect("a request task panicked");
            finished += 1;
        }
        assert_eq!(
            finished,
            REQUESTS_IN_FLIGHT * 3,
            "every request had its turn"
        );
        assert_eq!(most.load(Ordering::SeqCst), REQUESTS_IN_FLIGHT);
    }

    #[tokio::test]
    async fn only_answers_through_the_leader_move_last_heard_and_every_request_counts() {
        let counter = Arc::new(super::RequestCounts::new());
        let opened = Instant::now();
        let wire = Wire::new(counter.clone(), opened);
        let read = wire.send(|| async { 7 }).await;
        assert_eq!(read, 7);
        assert_eq!(
            wire.last_heard(),
            opened,
            "a read is no word from the leader"
        );
        let refused: Result<(), ()> = wire
            .send_to_leader(|| async { Err(()) }, Result::is_ok)
            .await;
        assert!(refused.is_err());
        assert_eq!(
            wire.last_heard(),
            opened,
            "an unanswered write is no word either"
        );
        let before = Instant::now();
        let written: Result<(), ()> = wire
            .send_to_leader(|| async { Ok(()) }, Result::is_ok)
            .await;
        assert!(written.is_ok());
        assert!(wire.last_heard() >= before, "an answered write is");
        let renewals = wire.renewals();
        assert_eq!(renewals.counted, opened, "counted only once proven");
        assert!(renewals.leader_answered >= before);
        // Never backwards.
        wire.heard(opened - Duration::from_secs(1));
        assert!(wire.last_heard() >= before);
        wire.count(5);
        assert_eq!(counter.total(), 8);
        wire.for_kind(super::RequestKind::Claim).count(2);
        assert_eq!(counter.total(), 10);
        assert_eq!(counter.requests(super::RequestKind::Claim), 2);
        assert_eq!(counter.requests(super::RequestKind::Other), 8);
    }
}
