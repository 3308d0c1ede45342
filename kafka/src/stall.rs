//! An application that stopped taking or acknowledging messages: a claim
//! whose messages wait and whose application has not moved for the
//! processing-stall bound (Kafka's `max.poll.interval.ms`). Read from the
//! ledgers at intervals, never on the hot path: taking and acknowledging a
//! message read no clock for it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use tenure_core::{FencingToken, TopicPartition};

use crate::ledger::Activity;

/// The claims seen waiting, since when, and which were reported stalled.
#[derive(Debug)]
pub(crate) struct StallWatch {
    limit: Duration,
    /// Each claim's progress when last read, and since when it has waited
    /// with that progress (`None`: nothing waits).
    seen: BTreeMap<TopicPartition, (FencingToken, Activity, Option<Instant>)>,
    /// Claims reported once: a stall is told once per claim.
    reported: BTreeSet<(TopicPartition, FencingToken)>,
}

impl StallWatch {
    /// A watch that calls a claim stalled after `limit` without progress
    /// while messages wait.
    pub(crate) fn new(limit: Duration) -> StallWatch {
        StallWatch {
            limit,
            seen: BTreeMap::new(),
            reported: BTreeSet::new(),
        }
    }

    /// How often the ledgers are read: a stall is seen at most this long
    /// after its bound.
    pub(crate) fn interval(&self) -> Duration {
        (self.limit / 10).clamp(Duration::from_millis(100), Duration::from_secs(10))
    }

    /// The claims' activities read at `now`: the claims newly stalled, each
    /// with how long it has waited without progress.
    pub(crate) fn check(
        &mut self,
        now: Instant,
        activities: Vec<(TopicPartition, FencingToken, Activity)>,
    ) -> Vec<(TopicPartition, FencingToken, Duration)> {
        let mut seen = BTreeMap::new();
        let mut stalled = Vec::new();
        for (partition, token, activity) in activities {
            let since = match self.seen.get(&partition) {
                Some((was_token, was, since))
                    if *was_token == token && was.progress == activity.progress =>
                {
                    *since
                }
                _ => None,
            };
            let since = activity.waiting.then(|| since.unwrap_or(now));
            if let Some(since) = since {
                let waited = now.saturating_duration_since(since);
                if waited >= self.limit && self.reported.insert((partition.clone(), token)) {
                    stalled.push((partition.clone(), token, waited));
                }
            }
            seen.insert(partition, (token, activity, since));
        }
        // Claims that ended are forgotten, and so are their reports.
        self.reported
            .retain(|(p, t)| seen.get(p).is_some_and(|(token, _, _)| token == t));
        self.seen = seen;
        stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity(taken: Option<i64>, waiting: bool) -> Activity {
        Activity {
            progress: (0, taken, usize::from(waiting), None),
            waiting,
        }
    }

    #[test]
    fn a_claim_is_stalled_once_its_messages_waited_the_limit_without_progress() {
        let mut watch = StallWatch::new(Duration::from_secs(10));
        let p = TopicPartition::new("t", 0);
        let token = FencingToken(1);
        let at = |s: u64| Instant::now() + Duration::from_secs(s);
        let start = at(0);
        let one = |a| vec![(p.clone(), token, a)];
        assert!(watch.check(start, one(activity(Some(1), true))).is_empty());
        // Progress starts the count again.
        assert!(watch
            .check(start + Duration::from_secs(9), one(activity(Some(2), true)))
            .is_empty());
        assert!(watch
            .check(
                start + Duration::from_secs(18),
                one(activity(Some(2), true))
            )
            .is_empty());
        let stalled = watch.check(
            start + Duration::from_secs(19),
            one(activity(Some(2), true)),
        );
        assert_eq!(stalled, [(p.clone(), token, Duration::from_secs(10))]);
        // Told once.
        assert!(watch
            .check(
                start + Duration::from_secs(30),
                one(activity(Some(2), true))
            )
            .is_empty());
    }

    #[test]
    fn nothing_waiting_is_no_stall_and_a_new_claim_starts_afresh() {
        let mut watch = StallWatch::new(Duration::from_secs(10));
        let p = TopicPartition::new("t", 0);
        let start = Instant::now();
        let later = |s: u64| start + Duration::from_secs(s);
        // An idle application with nothing to take is not stalled.
        for s in [0, 20, 40] {
            assert!(watch
                .check(
                    later(s),
                    vec![(p.clone(), FencingToken(1), activity(Some(5), false))]
                )
                .is_empty());
        }
        // Messages come: the count starts when they do.
        assert!(watch
            .check(
                later(41),
                vec![(p.clone(), FencingToken(1), activity(Some(5), true))]
            )
            .is_empty());
        assert_eq!(
            watch
                .check(
                    later(51),
                    vec![(p.clone(), FencingToken(1), activity(Some(5), true))]
                )
                .len(),
            1
        );
        // Another claim of the partition is a new count, and a new report.
        assert!(watch
            .check(
                later(52),
                vec![(p.clone(), FencingToken(2), activity(Some(5), true))]
            )
            .is_empty());
        assert_eq!(
            watch
                .check(
                    later(62),
                    vec![(p.clone(), FencingToken(2), activity(Some(5), true))]
                )
                .len(),
            1
        );
    }
}
