//! The faults of a run, and their schedule drawn from the seed.

use std::collections::BTreeMap;

use tenure::core::rng::SplitMix64;

use crate::partition::PartitionKind;

/// One fault, `at_ms` after the group settled.
#[derive(Clone, Debug)]
pub enum Fault {
    Kill(String),
    Pause(String, u64),
    Cut(String, u64),
    Join(String),
    Leave(String),
    RestartNode(u8),
    KillLeader(u64),
    /// A partition between the store's nodes for that long; the `u8`
    /// picks the follower it is about (see [`PartitionKind::plan`]).
    Partition(PartitionKind, u8, u64),
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Kill(m) => write!(f, "kill {m}"),
            Fault::Pause(m, ms) => write!(f, "pause {m} {ms}ms"),
            Fault::Cut(m, ms) => write!(f, "cut {m} off the store {ms}ms"),
            Fault::Join(m) => write!(f, "join {m}"),
            Fault::Leave(m) => write!(f, "leave {m}"),
            Fault::RestartNode(n) => write!(f, "restart store node {n}"),
            Fault::KillLeader(ms) => write!(f, "kill the store's leader for {ms}ms"),
            Fault::Partition(kind, _, ms) => write!(f, "{kind} for {ms}ms"),
        }
    }
}

/// The faults of a run of `seconds`, drawn from `seed`: one every 4–9 s,
/// each on a member that is live and not already paused or cut off, with
/// at least two live members at all times. Faults of the store (a node
/// restarted, the leader killed, a partition between nodes) never
/// overlap: the next comes a few seconds after the last has healed.
///
/// With `required` (`--sink postgres`), the first faults are a kill, two
/// pauses, a cut and a store node restart, in an order drawn from the seed
/// (one that cannot be made yet, a kill with two live members, waits for
/// the first slot where it can); with `network_partitions` (a 3-node store), they
/// are one network partition of each kind; the rest are drawn as without.
pub fn schedule(
    seed: u64,
    seconds: u64,
    members: usize,
    nodes: u8,
    session_ms: u64,
    required: bool,
    network_partitions: bool,
) -> Vec<(u64, Fault)> {
    let mut rng = SplitMix64::new(seed);
    // One of `from`, which the callers make sure is not empty.
    let pick = |rng: &mut SplitMix64, from: &[String]| rng.pick(from).cloned().unwrap_or_default();
    let mut live: Vec<String> = (1..=members).map(|i| format!("m{i}")).collect();
    let mut next_id = members + 1;
    // Members busy with a pause or cut until then.
    let mut busy: BTreeMap<String, u64> = BTreeMap::new();
    let mut faults = Vec::new();
    let mut at = 3_000 + rng.below(3_000);
    // When the store is back to normal after its last fault.
    let mut store_free_at = 0;
    // The kinds still due, as the draw below numbers them: kill, pause
    // twice, cut, restart; the partitions (7–9); shuffled (Fisher–Yates).
    let mut due: Vec<u64> = Vec::new();
    if required {
        due.extend([0, 1, 1, 2, 4]);
    }
    if network_partitions && nodes == 3 {
        due.extend([7, 8, 9]);
    }
    if !due.is_empty() {
        for i in (1..due.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            due.swap(i, j);
        }
    }
    while at < seconds * 1_000 {
        let free: Vec<String> = live
            .iter()
            .filter(|m| busy.get(*m).is_none_or(|until| *until <= at))
            .cloned()
            .collect();
        let longer = session_ms + 1_000 + rng.below(2_000);
        let store_free = store_free_at <= at;
        let possible = |kind: u64| match kind {
            0 => live.len() > 2 && !free.is_empty(),
            1 | 2 => !free.is_empty(),
            4 | 6..=9 => store_free,
            _ => true,
        };
        let kind = match due.iter().position(|kind| possible(*kind)) {
            Some(i) => due.remove(i),
            None => rng.below(if nodes == 3 { 10 } else { 6 }),
        };
        let fault = match kind {
            0 if live.len() > 2 && !free.is_empty() => {
                let m = pick(&mut rng, &free);
                live.retain(|x| *x != m);
                Fault::Kill(m)
            }
            1 if !free.is_empty() => {
                let m = pick(&mut rng, &free);
                busy.insert(m.clone(), at + longer);
                Fault::Pause(m, longer)
            }
            2 if !free.is_empty() => {
                let m = pick(&mut rng, &free);
                busy.insert(m.clone(), at + longer);
                Fault::Cut(m, longer)
            }
            3 if live.len() > 2 && !free.is_empty() => {
                let m = pick(&mut rng, &free);
                live.retain(|x| *x != m);
                Fault::Leave(m)
            }
            4 if store_free => {
                // The restart itself holds the schedule up until the node
                // answers; then it catches up.
                store_free_at = at + 3_000;
                Fault::RestartNode(1 + rng.below(u64::from(nodes)) as u8)
            }
            6 if store_free => {
                let ms = 2_000 + rng.below(3_000);
                store_free_at = at + ms + 5_000;
                Fault::KillLeader(ms)
            }
            7..=9 if store_free => {
                let kind = PartitionKind::ALL[(kind - 7) as usize];
                // Past the session, so that the minority's members lose
                // theirs; then time for the cut-off node to rejoin.
                store_free_at = at + longer + 6_000;
                Fault::Partition(kind, rng.below(2) as u8, longer)
            }
            _ if live.len() < members + 2 => {
                let m = format!("m{next_id}");
                next_id += 1;
                live.push(m.clone());
                Fault::Join(m)
            }
            _ => {
                let m = pick(&mut rng, &live);
                busy.insert(m.clone(), at + longer);
                Fault::Pause(m, longer)
            }
        };
        faults.push((at, fault));
        at += 4_000 + rng.below(5_000);
    }
    faults
}

/// The faults `--sink postgres` must hold that `faults` lacks, by name.
pub fn missing_required(faults: &[(u64, Fault)]) -> Vec<&'static str> {
    let has = |f: fn(&Fault) -> bool| faults.iter().any(|(_, fault)| f(fault));
    [
        ("pause", has(|f| matches!(f, Fault::Pause(..)))),
        ("cut", has(|f| matches!(f, Fault::Cut(..)))),
        ("kill", has(|f| matches!(f, Fault::Kill(..)))),
        (
            "store node restart",
            has(|f| matches!(f, Fault::RestartNode(..))),
        ),
    ]
    .into_iter()
    .filter(|(_, there)| !there)
    .map(|(name, _)| name)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(faults: &[(u64, Fault)]) -> Vec<String> {
        faults.iter().map(|(at, f)| format!("{at} {f}")).collect()
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        for seed in [0, 1, 42, 1_796_178_449_515] {
            for (nodes, required, network_partitions) in [
                (1, false, false),
                (3, false, false),
                (1, true, false),
                (3, false, true),
            ] {
                let a = schedule(seed, 120, 3, nodes, 4_000, required, network_partitions);
                let b = schedule(seed, 120, 3, nodes, 4_000, required, network_partitions);
                assert_eq!(lines(&a), lines(&b));
                assert!(!a.is_empty());
            }
        }
        assert_ne!(
            lines(&schedule(1, 120, 3, 1, 4_000, false, false)),
            lines(&schedule(2, 120, 3, 1, 4_000, false, false))
        );
    }

    #[test]
    fn a_long_enough_sink_run_holds_every_required_fault() {
        for seed in 0..200 {
            let faults = schedule(seed, 120, 3, 1, 4_000, true, false);
            assert!(missing_required(&faults).is_empty(), "seed {seed}");
        }
    }

    /// The short runs of `scripts/test` hold one partition of each kind,
    /// and no store fault starts before the last one healed.
    #[test]
    fn a_partition_run_holds_each_partition_and_store_faults_never_overlap() {
        for seed in 0..200 {
            let faults = schedule(seed, 60, 3, 3, 4_000, false, true);
            for name in ["isolate", "split", "cut a follower"] {
                assert!(
                    lines(&faults).iter().any(|l| l.contains(name)),
                    "seed {seed}: no {name} in {:?}",
                    lines(&faults)
                );
            }
            let mut busy_until = 0;
            for (at, fault) in &faults {
                let lasts = match fault {
                    Fault::Partition(_, _, ms) | Fault::KillLeader(ms) => *ms,
                    Fault::RestartNode(_) => 0,
                    _ => continue,
                };
                assert!(*at >= busy_until, "seed {seed}: {fault} at {at} overlaps");
                busy_until = at + lasts;
            }
        }
    }
}
