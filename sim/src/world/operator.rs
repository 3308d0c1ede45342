//! The operator's tooling on a replicated ZooKeeper: a client of its own
//! on a follower, which now and then reads the group's offsets (as
//! `describe`, `serve` and `reset-offsets` do), and must see every commit
//! the leader applied before it asked.
//!
//! A follower answers reads from what it has applied: behind the leader
//! by up to a delivery, and, cut off from its leader, from what it had at
//! the cut until it drops its clients (`syncLimit` ticks). The tooling
//! syncs before it reads: the sync goes through the leader, so the reads
//! after it see every commit applied before; at a cut-off follower the
//! sync waits for the heal, or for another server once the follower drops
//! its clients, and during an election for the new leader.
//!
//! The operator only reads, so its looks are judged at the end of the run
//! from when each commit was applied, and its faults and moments come from
//! a generator of their own: the members' runs on a seed are the same
//! with or without it.

use std::time::{Duration, Instant};

use tenure_core::rng::SplitMix64;
use tenure_core::types::{Offset, TopicPartition};

use super::SimConfig;

/// Mixed into the seed for the operator's own generator.
const OPERATOR_SEED: u64 = 0x6f70_6572_6174_6f72;

/// The operator's tooling and its follower, on an ensemble.
#[derive(Default)]
pub(super) struct Operator {
    /// When the operator asked for the group's offsets, and how far its
    /// follower lagged behind the leader then.
    looks: Vec<(Instant, Duration)>,
    /// The follower's cuts from its leader: since, until.
    cuts: Vec<(Instant, Instant)>,
    /// The elections: the leader lost, another elected.
    pub(super) elections: Vec<(Instant, Instant)>,
    /// Every commit the leader applied, when, per partition.
    commits: std::collections::BTreeMap<TopicPartition, Vec<(Instant, Offset)>>,
}

impl Operator {
    /// On an ensemble: the moments the operator looks, for the whole run
    /// (from `start` to `end_at`), and the cuts of its follower, during the
    /// chaos phase (until `quiet_at`).
    pub(super) fn schedule(
        &mut self,
        config: &SimConfig,
        start: Instant,
        quiet_at: Instant,
        end_at: Instant,
    ) {
        if config.ensemble.is_none() {
            return;
        }
        let mut rng = SplitMix64::new(config.seed ^ OPERATOR_SEED);
        let session = config.session_timeout.as_millis() as u64;
        let delivery = config.max_delay.as_micros() as u64;
        let mut t = start;
        while t < end_at {
            t += Duration::from_millis(200 + rng.below(1000));
            let lag = Duration::from_micros(rng.below(delivery.max(1)));
            self.looks.push((t, lag));
        }
        let mut t = start;
        while config.faults && t < quiet_at {
            t += Duration::from_millis(500 + rng.below(4000));
            let length = Duration::from_millis(rng.below(session * 4));
            let until = (t + length).min(quiet_at);
            self.cuts.push((t, until));
            t = until;
        }
    }

    /// The operator asked at each of its moments and was shown the group's
    /// offsets: with a sync, as the leader had them when the sync went
    /// through; without one, as its follower had applied them. Each look
    /// must show every commit the leader applied before it asked: the
    /// first that did not is described, with its moment counted from
    /// `start`.
    pub(super) fn judge(&self, config: &SimConfig, start: Instant) -> Option<String> {
        let ensemble = config.ensemble.as_ref()?;
        let patience = ensemble.tick * ensemble.sync_limit;
        for &(asked, lag) in &self.looks {
            let cut = self
                .cuts
                .iter()
                .find(|(since, until)| *since <= asked && asked < *until);
            let applied = if ensemble.tools_sync {
                // The sync waits at a cut-off follower until the heal, or
                // until it drops its clients and another server takes the
                // sync (at once, if it dropped them before the look); and
                // for a leader.
                let synced = cut.map_or(asked, |(since, until)| {
                    (*until).min(*since + patience).max(asked)
                });
                self.elections
                    .iter()
                    .find(|(lost, elected)| *lost <= synced && synced < *elected)
                    .map_or(synced, |(_, elected)| *elected)
            } else {
                match cut {
                    Some((since, _)) if asked < *since + patience => *since,
                    _ => asked - lag,
                }
            };
            let missed = self.commits.iter().find_map(|(partition, history)| {
                let before = as_of(history, asked)?;
                let shown = as_of(history, applied);
                (shown < Some(before)).then_some((partition, before, shown))
            });
            if let Some((partition, committed, shown)) = missed {
                return Some(format!(
                    "the operator, asking at {:?}, was shown {partition} at {shown:?}, behind the commit of {committed} the leader applied before",
                    asked - start
                ));
            }
        }
        None
    }

    /// On an ensemble: the leader applied a commit of `offset` on
    /// `partition` at `now`.
    pub(super) fn applied_commit(
        &mut self,
        config: &SimConfig,
        now: Instant,
        partition: &TopicPartition,
        offset: Offset,
    ) {
        if config.ensemble.is_some() {
            let history = self.commits.entry(partition.clone()).or_default();
            history.push((now, offset));
        }
    }
}

/// The offset `history` had at `moment`, if any.
fn as_of(history: &[(Instant, Offset)], moment: Instant) -> Option<Offset> {
    history
        .iter()
        .rev()
        .find(|(at, _)| *at <= moment)
        .map(|(_, offset)| *offset)
}
