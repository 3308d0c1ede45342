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
//! A renewal with such a delay counts only once a later renewal, sent at
//! least that delay after it, was answered by the leader promptly (within
//! half the delay): the leader's pings reach the follower meanwhile, and
//! the follower sends its report and the later request to the leader in
//! order on one connection, so the leader counted the earlier activity
//! before it answered the later request. A late answer proves nothing: the
//! request may have waited at a follower cut off from its leader, which
//! forwards it when the cut heals, before the report it owes; and for the
//! same delay after it no answer proves anything either, since the
//! leader's pings take that long to resume. Until then the member leans
//! on an older renewal, so that its lease never runs longer than the
//! leader's.
//!
//! A cut the member cannot see — the follower cut off from its leader
//! after one answer and back just before the next request — stops the
//! leader's pings in between: the later request can then reach the leader
//! before the report it proves. The pings the leader sent meanwhile wait
//! in the connection ahead of that request's answer, so the follower
//! reports before it passes the answer on, and the report arrives within
//! about the later request's round trip after its answer. The leader
//! counts it only if the session still lives then, which the renewal
//! counted before vouches for up to a session after it. So a proof counts
//! at once only if its answer, plus its round trip, comes within a
//! session of what was counted before (a store that answers within a
//! twelfth of the session keeps up with the heartbeats); otherwise it
//! counts once any later request, sent after that, was answered by the
//! leader, which the leader would not do for a session it had ended.

use std::time::{Duration, Instant};

/// Renewals not yet known counted, kept at most: beyond that the newest is
/// dropped, which only leans the lease on an older renewal.
const PENDING_AT_MOST: usize = 16;

/// The renewals of one session.
#[derive(Clone, Debug, Default)]
pub(crate) struct Renewals {
    /// The latest moment the leader is sure to have counted.
    counted: Option<Instant>,
    /// When the latest renewal, counted or not, was sent.
    latest: Option<Instant>,
    /// When the latest renewal answered promptly was sent, and by when the
    /// leader has the report it proves: it proves the renewals sent long
    /// enough before it.
    latest_prompt: Option<(Instant, Instant)>,
    /// When the latest late answer came: a cut may have healed just
    /// before it.
    late_answer: Option<Instant>,
    /// Renewals the leader may not have counted yet, each with the delay
    /// after which a later renewal proves it counted; in sending order.
    pending: Vec<(Instant, Duration)>,
    /// Renewals proven reported whose report may have reached the leader
    /// after the session's deadline there, each with the moment after
    /// which a request the leader answers shows the session outlived it.
    unconfirmed: Vec<(Instant, Instant)>,
}

impl Renewals {
    /// The leader answered, by `now`, a request sent at `sent`, and counts
    /// it at the latest by the time it answers one sent `counted_after`
    /// later, promptly. The leader ends a session `session` after the
    /// latest activity it counted.
    pub(crate) fn renewed(
        &mut self,
        now: Instant,
        sent: Instant,
        counted_after: Duration,
        session: Duration,
    ) {
        // `None` orders before any moment: `max` keeps the later one.
        self.latest = self.latest.max(Some(sent));
        // The leader answered a request sent at `sent`: the session lived
        // then, and so when the reports that came before arrived.
        if let Some(at) = take_latest(&mut self.unconfirmed, |_, after| after <= sent) {
            self.count(at);
        }
        if counted_after.is_zero() {
            // Counted as the leader answered: nothing to prove, early or
            // late.
            self.count(sent);
            return;
        }
        let round_trip = now.saturating_duration_since(sent);
        let prompt = round_trip <= counted_after / 2;
        if !prompt {
            self.late_answer = self.late_answer.max(Some(now));
        }
        let proves = prompt
            && self
                .late_answer
                .is_none_or(|late| late + counted_after <= sent);
        if proves {
            // Earlier renewals this one proves reported, by `report_by`.
            let report_by = now + round_trip;
            let proven = take_latest(&mut self.pending, |at, delay| at + delay <= sent);
            if let Some(at) = proven {
                self.reported(at, report_by, session);
            }
            self.latest_prompt = self.latest_prompt.max(Some((sent, report_by)));
        }
        let proven_by_later = self
            .latest_prompt
            .filter(|&(latest, _)| sent + counted_after <= latest);
        if let Some((_, report_by)) = proven_by_later {
            self.reported(sent, report_by, session);
        } else if self.pending.len() < PENDING_AT_MOST {
            let index = self.pending.partition_point(|&(at, _)| at <= sent);
            self.pending.insert(index, (sent, counted_after));
        }
    }

    /// The report of the activity at `at` reaches the leader by
    /// `report_by`: counted now if the session is sure to live that long
    /// there, else once the leader answers a request sent after it.
    fn reported(&mut self, at: Instant, report_by: Instant, session: Duration) {
        if self
            .counted
            .is_some_and(|counted| report_by <= counted + session)
        {
            self.count(at);
        } else if self.unconfirmed.len() < PENDING_AT_MOST {
            self.unconfirmed.push((at, report_by));
        }
    }

    fn count(&mut self, at: Instant) {
        self.counted = self.counted.max(Some(at));
    }

    /// The connection to the store is lost; the backend vouches for no
    /// renewal after `last_heard`. Renewals still waiting for proof are
    /// dropped: no request sent before the loss proves them any more than
    /// it already did.
    pub(crate) fn suspended(&mut self, last_heard: Instant) {
        if let Some(counted) = self.counted {
            self.counted = Some(counted.min(last_heard));
        }
        self.pending.clear();
        self.unconfirmed.clear();
    }

    /// The latest moment the leader is sure to have counted.
    pub(crate) fn counted(&self) -> Option<Instant> {
        self.counted
    }

    /// When the latest renewal was sent, counted or not: the session needs
    /// no confirming for a while after it.
    pub(crate) fn latest(&self) -> Option<Instant> {
        self.latest
    }

    /// Every moment held, for the explorer's fingerprint of a member (the
    /// delays come from the backend and are the same for every renewal
    /// of a run). The count of moments varies with the lists' lengths, and
    /// the fingerprint takes the count first.
    #[cfg(feature = "sim")]
    pub(crate) fn moments(&self) -> impl Iterator<Item = Option<Instant>> + '_ {
        [
            self.counted,
            self.latest,
            self.latest_prompt.map(|(sent, _)| sent),
            self.latest_prompt.map(|(_, report_by)| report_by),
            self.late_answer,
        ]
        .into_iter()
        .chain(self.pending.iter().map(|&(at, _)| Some(at)))
        .chain(
            self.unconfirmed
                .iter()
                .flat_map(|&(at, after)| [Some(at), Some(after)]),
        )
    }
}

/// Removes the entries of `list` that `done` picks, and gives the latest
/// of their moments.
fn take_latest<T: Copy>(
    list: &mut Vec<(Instant, T)>,
    done: impl Fn(Instant, T) -> bool,
) -> Option<Instant> {
    let mut latest = None;
    list.retain(|&(at, with)| {
        let taken = done(at, with);
        if taken {
            latest = latest.max(Some(at));
        }
        !taken
    });
    latest
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(10);

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_renewal_the_leader_counts_when_it_answers_counts_at_once() {
        let start = Instant::now();
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 100), at(start, 100), Duration::ZERO, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 100)));
        assert_eq!(renewals.latest(), Some(at(start, 100)));
    }

    #[test]
    fn a_reported_renewal_counts_once_a_renewal_sent_late_enough_is_answered() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 0), at(start, 0), Duration::ZERO, SESSION);
        renewals.renewed(at(start, 3000), at(start, 3000), lag, SESSION);
        // The leader may not have heard of 3000 yet: the lease leans on 0.
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        assert_eq!(renewals.latest(), Some(at(start, 3000)));
        // Too soon after 3000 to prove it.
        renewals.renewed(at(start, 3500), at(start, 3500), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // Sent a whole delay after 3000: 3000 is counted, 3500 not yet.
        renewals.renewed(at(start, 4000), at(start, 4000), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 3000)));
        renewals.renewed(at(start, 4600), at(start, 4600), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 3500)));
    }

    #[test]
    fn an_answer_that_comes_after_a_later_one_is_proven_by_it() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(start, start, Duration::ZERO, SESSION);
        renewals.renewed(at(start, 5000), at(start, 5000), lag, SESSION);
        renewals.renewed(at(start, 2000), at(start, 2000), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 2000)));
        assert_eq!(renewals.latest(), Some(at(start, 5000)));
    }

    #[test]
    fn a_late_answer_proves_nothing_before_it() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 0), at(start, 0), Duration::ZERO, SESSION);
        renewals.renewed(at(start, 1000), at(start, 1000), lag, SESSION);
        // Sent a whole delay later but answered 600 ms after: it may have
        // waited at a cut-off follower, ahead of the report it owed.
        renewals.renewed(at(start, 2600), at(start, 2000), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // Nor does a prompt one sent too soon after the late answer: the
        // leader's pings may not have resumed.
        renewals.renewed(at(start, 3500), at(start, 3450), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // A prompt one a whole delay after proves all before it.
        renewals.renewed(at(start, 3650), at(start, 3600), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 2000)));
    }

    #[test]
    fn after_a_pause_a_proof_waits_until_the_leader_shows_the_session_outlived_its_report() {
        let start = Instant::now();
        let lag = SESSION / 3;
        let mut renewals = Renewals::default();
        renewals.renewed(start, start, Duration::ZERO, SESSION);
        renewals.renewed(at(start, 3450), at(start, 3400), lag, SESSION);
        // The process sleeps 7 s and renews on waking. Its answer proves
        // 3400 reported, but a cut the member cannot see, healed just
        // before this request, may bring the report only after it, by
        // 10 600: past what 0 vouches for (the leader's deadline, 10 000).
        renewals.renewed(at(start, 10_550), at(start, 10_500), lag, SESSION);
        assert_eq!(renewals.counted(), Some(start));
        // A request sent after 10 600 and answered: the leader had not
        // ended the session, so the report found it alive. Its answer
        // proves 10 500 reported by 14 000, past 3400's deadline (13 400).
        renewals.renewed(at(start, 13_950), at(start, 13_900), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 3400)));
        // The next heartbeat shows the session outlived that report too,
        // and proves 13 900 at once: its report comes by 17 400, well
        // within a session of 10 500.
        renewals.renewed(at(start, 17_350), at(start, 17_300), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 13_900)));
    }

    #[test]
    fn a_slow_store_s_proofs_count_a_round_later_and_a_fast_one_s_at_once() {
        let start = Instant::now();
        let lag = SESSION / 3;
        // Heartbeats a third of the session after each answer.
        let paced = |round_trip: u64| {
            let mut renewals = Renewals::default();
            renewals.renewed(start, start, Duration::ZERO, SESSION);
            let mut counted = Vec::new();
            let mut sent = 0;
            for _ in 0..4 {
                let answered = sent + round_trip;
                renewals.renewed(at(start, answered), at(start, sent), lag, SESSION);
                counted.push(renewals.counted());
                sent = answered + 3334;
            }
            counted
        };
        // Answers within a twelfth of the session: each heartbeat proves
        // the one before it at once.
        assert_eq!(
            paced(50),
            vec![
                Some(start),
                Some(start),
                Some(at(start, 3384)),
                Some(at(start, 6768)),
            ]
        );
        // Slower: the proof of a heartbeat counts only when the next one
        // is answered.
        assert_eq!(
            paced(1000),
            vec![Some(start), Some(start), Some(start), Some(at(start, 4334))]
        );
    }

    #[test]
    fn a_suspension_drops_what_waits_for_proof_and_never_moves_forward() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 1000), at(start, 1000), Duration::ZERO, SESSION);
        renewals.renewed(at(start, 3000), at(start, 3000), lag, SESSION);
        renewals.suspended(at(start, 5000));
        assert_eq!(renewals.counted(), Some(at(start, 1000)));
        // The backend vouches for less than the member counted.
        renewals.suspended(at(start, 500));
        assert_eq!(renewals.counted(), Some(at(start, 500)));
        // 3000 waits no more: a later renewal does not prove it.
        renewals.renewed(at(start, 9000), at(start, 9000), lag, SESSION);
        assert_eq!(renewals.counted(), Some(at(start, 500)));
    }

    #[test]
    fn pending_renewals_are_bounded_and_the_newest_give_way() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(start, start, Duration::ZERO, SESSION);
        for i in 1..100 {
            renewals.renewed(at(start, i), at(start, i), lag, SESSION);
        }
        assert_eq!(renewals.pending.len(), PENDING_AT_MOST);
        renewals.renewed(at(start, 1050), at(start, 1050), lag, SESSION);
        // Proves the 16 kept (1..=16), not the dropped ones after them.
        assert_eq!(renewals.counted(), Some(at(start, 16)));
    }
}
