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
    /// When the latest renewal answered promptly was sent: it proves the
    /// renewals sent long enough before it.
    latest_prompt: Option<Instant>,
    /// When the latest late answer came: a cut may have healed just
    /// before it.
    late_answer: Option<Instant>,
    /// Renewals the leader may not have counted yet, each with the delay
    /// after which a later renewal proves it counted; in sending order.
    pending: Vec<(Instant, Duration)>,
}

impl Renewals {
    /// The leader answered, by `now`, a request sent at `sent`, and counts
    /// it at the latest by the time it answers one sent `counted_after`
    /// later, promptly.
    pub(crate) fn renewed(&mut self, now: Instant, sent: Instant, counted_after: Duration) {
        // `None` orders before any moment: `max` keeps the later one.
        self.latest = self.latest.max(Some(sent));
        if counted_after.is_zero() {
            // Counted as the leader answered: nothing to prove, early or
            // late.
            self.count(sent);
            return;
        }
        let prompt = now.saturating_duration_since(sent) <= counted_after / 2;
        if !prompt {
            self.late_answer = self.late_answer.max(Some(now));
        }
        let proves = prompt
            && self
                .late_answer
                .is_none_or(|late| late + counted_after <= sent);
        if proves {
            // Earlier renewals this one proves counted.
            let mut proven = None;
            self.pending.retain(|&(at, delay)| {
                let counted = at + delay <= sent;
                if counted {
                    proven = proven.max(Some(at));
                }
                !counted
            });
            if let Some(at) = proven {
                self.count(at);
            }
            self.latest_prompt = self.latest_prompt.max(Some(sent));
        }
        let proven_by_later = self
            .latest_prompt
            .is_some_and(|latest| sent + counted_after <= latest);
        if proven_by_later {
            self.count(sent);
        } else if self.pending.len() < PENDING_AT_MOST {
            let index = self.pending.partition_point(|&(at, _)| at <= sent);
            self.pending.insert(index, (sent, counted_after));
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
    /// of a run).
    #[cfg(feature = "sim")]
    pub(crate) fn moments(&self) -> impl Iterator<Item = Option<Instant>> + '_ {
        [
            self.counted,
            self.latest,
            self.latest_prompt,
            self.late_answer,
        ]
        .into_iter()
        .chain(self.pending.iter().map(|&(at, _)| Some(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn a_renewal_the_leader_counts_when_it_answers_counts_at_once() {
        let start = Instant::now();
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 100), at(start, 100), Duration::ZERO);
        assert_eq!(renewals.counted(), Some(at(start, 100)));
        assert_eq!(renewals.latest(), Some(at(start, 100)));
    }

    #[test]
    fn a_reported_renewal_counts_once_a_renewal_sent_late_enough_is_answered() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 0), at(start, 0), Duration::ZERO);
        renewals.renewed(at(start, 3000), at(start, 3000), lag);
        // The leader may not have heard of 3000 yet: the lease leans on 0.
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        assert_eq!(renewals.latest(), Some(at(start, 3000)));
        // Too soon after 3000 to prove it.
        renewals.renewed(at(start, 3500), at(start, 3500), lag);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // Sent a whole delay after 3000: 3000 is counted, 3500 not yet.
        renewals.renewed(at(start, 4000), at(start, 4000), lag);
        assert_eq!(renewals.counted(), Some(at(start, 3000)));
        renewals.renewed(at(start, 4600), at(start, 4600), lag);
        assert_eq!(renewals.counted(), Some(at(start, 3500)));
    }

    #[test]
    fn an_answer_that_comes_after_a_later_one_is_proven_by_it() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 5000), at(start, 5000), lag);
        renewals.renewed(at(start, 2000), at(start, 2000), lag);
        assert_eq!(renewals.counted(), Some(at(start, 2000)));
        assert_eq!(renewals.latest(), Some(at(start, 5000)));
    }

    #[test]
    fn a_late_answer_proves_nothing_before_it() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 0), at(start, 0), Duration::ZERO);
        renewals.renewed(at(start, 1000), at(start, 1000), lag);
        // Sent a whole delay later but answered 600 ms after: it may have
        // waited at a cut-off follower, ahead of the report it owed.
        renewals.renewed(at(start, 2600), at(start, 2000), lag);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // Nor does a prompt one sent too soon after the late answer: the
        // leader's pings may not have resumed.
        renewals.renewed(at(start, 3500), at(start, 3450), lag);
        assert_eq!(renewals.counted(), Some(at(start, 0)));
        // A prompt one a whole delay after proves all before it.
        renewals.renewed(at(start, 3650), at(start, 3600), lag);
        assert_eq!(renewals.counted(), Some(at(start, 2000)));
    }

    #[test]
    fn a_suspension_drops_what_waits_for_proof_and_never_moves_forward() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        renewals.renewed(at(start, 1000), at(start, 1000), Duration::ZERO);
        renewals.renewed(at(start, 3000), at(start, 3000), lag);
        renewals.suspended(at(start, 5000));
        assert_eq!(renewals.counted(), Some(at(start, 1000)));
        // The backend vouches for less than the member counted.
        renewals.suspended(at(start, 500));
        assert_eq!(renewals.counted(), Some(at(start, 500)));
        // 3000 waits no more: a later renewal does not prove it.
        renewals.renewed(at(start, 9000), at(start, 9000), lag);
        assert_eq!(renewals.counted(), Some(at(start, 500)));
    }

    #[test]
    fn pending_renewals_are_bounded_and_the_newest_give_way() {
        let start = Instant::now();
        let lag = Duration::from_millis(1000);
        let mut renewals = Renewals::default();
        for i in 0..100 {
            renewals.renewed(at(start, i), at(start, i), lag);
        }
        assert_eq!(renewals.pending.len(), PENDING_AT_MOST);
        renewals.renewed(at(start, 1050), at(start, 1050), lag);
        // Proves the 16 kept (0..=15), not the dropped ones after them.
        assert_eq!(renewals.counted(), Some(at(start, 15)));
    }
}
