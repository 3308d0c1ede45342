//! What the store's leader is sure to have counted of a session's
//! activity: the ground of the member's lease.
//!
//! A store expires a session (a ZooKeeper session, an etcd lease) on its
//! leader, from the activity the leader has counted. A backend says when
//! the leader answered a request of the session, or renewed it
//! ([`Event::SessionRenewed`](super::Event::SessionRenewed)), and how long
//! the leader may take to count it: nothing where the leader renews the
//! session when it answers (etcd's keep-alives, a new ZooKeeper session),
//! up to half a tick on a ZooKeeper ensemble, whose followers report their
//! sessions' activity to the leader with the answer to its next ping.
//!
//! Such a renewal counts in two steps, each shown by an answer the leader
//! gives, and by nothing the member has to assume about how long a
//! message takes between the follower and its leader:
//!
//! - **Reported.** A later request, sent at least that delay after the
//!   renewal was answered, is answered: the leader pings its follower
//!   every half tick and sends the pings and its answers in order on one
//!   connection, so a ping sent after the follower counted the renewal
//!   reached the follower before that answer did, and the follower sent
//!   its report, which names the session, as it read the ping: before it
//!   passed the answer on. Whether the request waited at a follower cut
//!   off from its leader does not matter.
//! - **Counted.** A request sent after that answer is answered as well:
//!   the follower forwards it behind its report, on the same connection,
//!   so the leader read the report first; and a leader answers nothing
//!   for a session it has ended, so the session lived when the report
//!   arrived, and the leader counted it from then on, which is no earlier
//!   than the renewal was sent.
//!
//! A cut between the follower and its leader, however long and however
//! often, only delays these answers; it never makes one prove more. Until
//! a renewal is counted the member leans on an older one, so that its
//! lease never runs longer than the leader's. Heartbeats on such a store
//! come a third of its delay after the latest answer, so that each one
//! confirms what the one before it proved reported, and the lease leans
//! on a renewal about four heartbeats back.

use std::time::{Duration, Instant};

/// Renewals waiting for a step of their proof, kept at most per step:
/// beyond that the two oldest merge into one that waits as long as the
/// later of them and counts from the later moment, which only makes the
/// count more careful.
const WAITING_AT_MOST: usize = 16;

/// Heartbeats within a delay of the leader's (where renewals come with
/// one): each proves reported the renewals answered three heartbeats
/// before it, and confirms what the heartbeat before it proved, so the
/// lease leans on a renewal four heartbeats and a round trip old.
const HEARTBEATS_PER_DELAY: u32 = 3;

/// The renewals of one session.
#[derive(Clone, Debug, Default)]
pub(crate) struct Renewals {
    /// The latest moment the leader is sure to have counted.
    counted: Option<Instant>,
    /// When the latest renewal, counted or not, was sent.
    latest: Option<Instant>,
    /// When the next heartbeat is due, where the session's renewals come
    /// with a delay: timed from the latest answer, not its sending.
    paced: Option<Instant>,
    /// The delay the latest delayed renewal came with: a renewal the
    /// leader counted at once (a reconnection) keeps the pace it sets.
    delay: Duration,
    /// Renewals not yet known reported, each with the moment after which
    /// a request the leader answers shows it reported; in that order.
    unreported: Vec<(Instant, Instant)>,
    /// Renewals known reported, not yet known counted, each with the
    /// moment after which a request the leader answers shows it counted;
    /// in that order.
    reported: Vec<(Instant, Instant)>,
}

impl Renewals {
    /// The leader answered, by `now`, a request sent at `sent`, and counts
    /// it at the latest by the time its follower read a ping sent
    /// `counted_after` later.
    pub(crate) fn renewed(&mut self, now: Instant, sent: Instant, counted_after: Duration) {
        // `None` orders before any moment: `max` keeps the later one.
        self.latest = self.latest.max(Some(sent));
        // The leader answered a request sent at `sent`: the session lived
        // then, and so when the reports that came before it arrived.
        if let Some(at) = take_latest(&mut self.reported, |after| after <= sent) {
            self.count(at);
        }
        if counted_after.is_zero() {
            // Counted as the leader answered: nothing to prove.
            self.count(sent);
        } else {
            self.delay = counted_after;
            // Its answer came after the follower reported what it had
            // counted a delay before this request was sent; a request sent
            // from now on shows that report reached a leader that still
            // kept the session.
            if let Some(at) = take_latest(&mut self.unreported, |after| after <= sent) {
                keep_waiting(&mut self.reported, at, now);
            }
            keep_waiting(&mut self.unreported, sent, now + counted_after);
        }
        self.paced = (!self.delay.is_zero()).then(|| now + self.delay / HEARTBEATS_PER_DELAY);
    }

    fn count(&mut self, at: Instant) {
        self.counted = self.counted.max(Some(at));
    }

    /// The connection to the store is lost; the backend vouches for no
    /// renewal after `last_heard`. Renewals still waiting for proof are
    /// dropped: the follower that answered them may never report them, and
    /// a new connection is revalidated with the leader anyway.
    pub(crate) fn suspended(&mut self, last_heard: Instant) {
        if let Some(counted) = self.counted {
            self.counted = Some(counted.min(last_heard));
        }
        self.unreported.clear();
        self.reported.clear();
    }

    /// The latest moment the leader is sure to have counted.
    pub(crate) fn counted(&self) -> Option<Instant> {
        self.counted
    }

    /// When the latest renewal was sent, counted or not.
    pub(crate) fn latest(&self) -> Option<Instant> {
        self.latest
    }

    /// When the session should next be renewed: `interval` after the
    /// latest renewal was sent, or sooner where renewals wait for proof
    /// (see [`HEARTBEATS_PER_DELAY`]). `None` before any renewal.
    pub(crate) fn next_due(&self, interval: Duration) -> Option<Instant> {
        self.paced.or(self.latest.map(|sent| sent + interval))
    }

    /// Every moment held, for the explorer's fingerprint of a member (the
    /// delays come from the backend and are the same for every renewal
    /// of a run). The count of moments varies with the lists' lengths, and
    /// the fingerprint takes the count first.
    #[cfg(feature = "sim")]
    pub(crate) fn moments(&self) -> impl Iterator<Item = Option<Instant>> + '_ {
        [self.counted, self.latest, self.paced].into_iter().chain(
            self.unreported
                .iter()
                .chain(&self.reported)
                .flat_map(|&(at, after)| [Some(at), Some(after)]),
        )
    }
}

/// Removes the renewals of `waiting` that a request sent at a moment
/// after their own proves, and gives the latest of them.
fn take_latest(
    waiting: &mut Vec<(Instant, Instant)>,
    proven: impl Fn(Instant) -> bool,
) -> Option<Instant> {
    let mut latest = None;
    waiting.retain(|&(at, after)| {
        let taken = proven(after);
        if taken {
            latest = latest.max(Some(at));
        }
        !taken
    });
    latest
}

/// Adds the renewal sent `at` to `waiting`, to be proven by a request sent
/// after `after`. Full, the list merges its two oldest first.
fn keep_waiting(waiting: &mut Vec<(Instant, Instant)>, at: Instant, after: Instant) {
    if waiting.len() >= WAITING_AT_MOST {
        let (first, _) = waiting.remove(0);
        if let Some(second) = waiting.first_mut() {
            second.0 = second.0.max(first);
        }
    }
    let index = waiting.partition_point(|&(_, other)| other <= after);
    waiting.insert(index, (at, after));
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(10);
    const DELAY: Duration = Duration::from_millis(1000);

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    /// A session opened at `start`, counted at once.
    fn opened(start: Instant) -> Renewals {
        let mut renewals = Renewals::default();
        renewals.renewed(start, start, Duration::ZERO);
        renewals
    }

    #[test]
    fn a_renewal_the_leader_counts_when_it_answers_counts_at_once() {
        let start = Instant::now();
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 100), at(start, 100), Duration::ZERO);
        assert_eq!(renewals.counted(), Some(at(start, 100)));
        assert_eq!(renewals.latest(), Some(at(start, 100)));
        let due = at(start, 100) + SESSION / 3;
        assert_eq!(renewals.next_due(SESSION / 3), Some(due));
    }

    #[test]
    fn a_delayed_renewal_counts_once_reported_and_then_confirmed() {
        let start = Instant::now();
        let mut renewals = opened(start);
        renewals.renewed(at(start, 1010), at(start, 1000), DELAY);
        // The leader may not have heard of 1000 yet: the lease leans on 0.
        assert_eq!(renewals.counted(), Some(start));
        assert_eq!(renewals.latest(), Some(at(start, 1000)));
        // Sent less than a delay after 1000's answer: proves nothing.
        renewals.renewed(at(start, 2005), at(start, 2000), DELAY);
        assert_eq!(renewals.counted(), Some(start));
        // Sent a delay after it: the follower reported 1000 before this
        // answer, but the report may still be on its way to the leader.
        renewals.renewed(at(start, 2020), at(start, 2010), DELAY);
        assert_eq!(renewals.counted(), Some(start));
        // Sent before that answer came: it may have reached the leader
        // ahead of the report.
        renewals.renewed(at(start, 2030), at(start, 2015), DELAY);
        assert_eq!(renewals.counted(), Some(start));
        // Sent after it: the leader read the report first.
        renewals.renewed(at(start, 2030), at(start, 2020), DELAY);
        assert_eq!(renewals.counted(), Some(at(start, 1000)));
    }

    #[test]
    fn a_report_held_by_a_second_cut_is_counted_only_once_a_later_answer_shows_it_arrived() {
        let start = Instant::now();
        let mut renewals = opened(start);
        renewals.renewed(at(start, 3350), at(start, 3340), SESSION / 3);
        // A later heartbeat, answered at once: the follower has sent its
        // report of 3340. A cut of the follower may hold that report past
        // the leader's deadline (10 000) for as long as the follower keeps
        // its clients, and nothing the member sees tells of it.
        renewals.renewed(at(start, 6700), at(start, 6690), SESSION / 3);
        assert_eq!(renewals.counted(), Some(start));
        // Only an answer to a request sent after 6700 shows the report
        // reached a leader that still kept the session.
        renewals.renewed(at(start, 9000), at(start, 6700), SESSION / 3);
        assert_eq!(renewals.counted(), Some(at(start, 3340)));
    }

    #[test]
    fn a_late_answer_still_proves_and_an_early_send_still_does_not() {
        let start = Instant::now();
        let mut renewals = opened(start);
        renewals.renewed(at(start, 1000), at(start, 990), DELAY);
        // Held at a cut-off follower for 3 s: the pings the leader sent
        // meanwhile reached the follower ahead of its answer, so the
        // report of 990 went first all the same.
        renewals.renewed(at(start, 5100), at(start, 2000), DELAY);
        assert_eq!(renewals.counted(), Some(start));
        // Answered out of order, sent before 5100: it proves nothing.
        renewals.renewed(at(start, 5200), at(start, 5000), DELAY);
        assert_eq!(renewals.counted(), Some(start));
        renewals.renewed(at(start, 5300), at(start, 5150), DELAY);
        assert_eq!(renewals.counted(), Some(at(start, 990)));
    }

    #[test]
    fn paced_heartbeats_keep_the_lease_ahead_of_the_clock() {
        let start = Instant::now();
        let lag = SESSION / 3;
        let margin = SESSION / 5;
        // Each heartbeat is sent when due and answered `round_trip` later;
        // give the least the lease had in hand at an answer.
        let least_in_hand = |round_trip: Duration| {
            let mut renewals = opened(start);
            // The registration, a write, just after the session opened.
            renewals.renewed(start + round_trip, start, lag);
            let mut least = SESSION;
            for _ in 0..40 {
                let sent = renewals.next_due(SESSION / 3).unwrap_or(start);
                let answered = sent + round_trip;
                let end = renewals.counted().unwrap_or(start) + SESSION - margin;
                least = least.min(end.saturating_duration_since(answered));
                renewals.renewed(answered, sent, lag);
            }
            least.as_millis()
        };
        // A ninth of the session apart, the lease leans on the heartbeat
        // four back: two ninths of the session in hand, less six round
        // trips.
        assert_eq!(least_in_hand(Duration::ZERO), 2444);
        assert_eq!(least_in_hand(ms(50)), 2144);
        // Slow answers eat into it, never past the lease's end unnoticed.
        assert_eq!(least_in_hand(ms(400)), 44);
        assert_eq!(least_in_hand(ms(500)), 0);
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_suspension_drops_what_waits_for_proof_and_never_moves_forward() {
        let start = Instant::now();
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 1000), at(start, 1000), Duration::ZERO);
        renewals.renewed(at(start, 3000), at(start, 3000), DELAY);
        renewals.renewed(at(start, 4100), at(start, 4000), DELAY);
        renewals.suspended(at(start, 5000));
        assert_eq!(renewals.counted(), Some(at(start, 1000)));
        // The backend vouches for less than the member counted.
        renewals.suspended(at(start, 500));
        assert_eq!(renewals.counted(), Some(at(start, 500)));
        // 3000 waits no more: later renewals do not prove it.
        renewals.renewed(at(start, 9000), at(start, 9000), DELAY);
        renewals.renewed(at(start, 9100), at(start, 9100), DELAY);
        assert_eq!(renewals.counted(), Some(at(start, 500)));
    }

    #[test]
    fn waiting_renewals_are_bounded_and_merge_on_the_careful_side() {
        let start = Instant::now();
        let mut renewals = opened(start);
        for i in 1..100 {
            renewals.renewed(at(start, i), at(start, i), DELAY);
        }
        assert_eq!(renewals.unreported.len(), WAITING_AT_MOST);
        // The oldest 84 went into one, sent as late as the latest of them
        // and proven reported no sooner than it.
        assert_eq!(renewals.unreported[0], (at(start, 84), at(start, 1084)));
        renewals.renewed(at(start, 1084), at(start, 1084), DELAY);
        assert_eq!(renewals.reported, vec![(at(start, 84), at(start, 1084))]);
        renewals.renewed(at(start, 1090), at(start, 1084), DELAY);
        assert_eq!(renewals.counted(), Some(at(start, 84)));
    }
}
