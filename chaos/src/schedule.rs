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
    /// A member of the previous release closed (SIGTERM) and started again
    /// from this one, under its id (`--previous`).
    Upgrade(String),
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
            Fault::Upgrade(m) => write!(f, "upgrade {m} to this release"),
        }
    }
}

/// What a run's schedule is drawn for.
pub struct Plan {
    pub seed: u64,
    pub seconds: u64,
    /// Members at the start: `m1` to `mN`.
    pub members: usize,
    /// The store's nodes: 1 or 3.
    pub nodes: u8,
    pub session_ms: u64,
    /// `--sink postgres`: the faults exactly-once is about come first.
    pub sink: bool,
    /// `--network-partitions`: one partition of each kind comes first.
    pub network_partitions: bool,
    /// `--previous`: the members at the start run the previous release,
    /// and each is upgraded in turn.
    pub upgrade: bool,
    /// `--spare N`: members `m1` to `mN` are never killed, made to leave,
    /// paused or cut off (they live through every store fault): in a soak,
    /// processes that run the whole hour.
    pub spare: usize,
}

/// The faults of a run of `seconds`, drawn from `seed`: one every 4–9 s,
/// each on a member that is live and not already paused or cut off, with
/// at least two live members at all times. Faults of the store (a node
/// restarted, the leader killed, a partition between nodes) never
/// overlap: the next comes a few seconds after the last has healed.
///
/// Some faults are due first, in an order drawn from the seed (one that
/// cannot be made yet, a kill with two live members, waits for the first
/// slot where it can): with `sink`, a kill, two pauses, a cut and a store
/// node restart; with `network_partitions` (a 3-node store), one network
/// partition of each kind; with `upgrade`, a join, the first upgrade, a
/// leave, then the upgrade of each other member of the start, in turn
/// (those members are never killed, made to leave, paused or cut off
/// before their upgrade). The rest are drawn.
pub fn schedule(plan: &Plan) -> Vec<(u64, Fault)> {
    let Plan {
        seed,
        seconds,
        members,
        nodes,
        session_ms,
        sink: required,
        network_partitions,
        upgrade,
        spare,
    } = *plan;
    let spared: Vec<String> = (1..=spare.min(members)).map(|i| format!("m{i}")).collect();
    let mut rng = SplitMix64::new(seed);
    // One of `from`, which the callers make sure is not empty.
    let pick = |rng: &mut SplitMix64, from: &[String]| rng.pick(from).cloned().unwrap_or_default();
    let mut live: Vec<String> = (1..=members).map(|i| format!("m{i}")).collect();
    // Members of the previous release, in the order of their upgrades.
    let mut previous: Vec<String> = if upgrade { live.clone() } else { Vec::new() };
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
    if upgrade {
        // In this order, so that both versions meet a join and a leave:
        // a member of this release joins, the first upgrade, a leave, the
        // other upgrades.
        due.extend([5, 10, 3]);
        due.extend(std::iter::repeat_n(10, members.saturating_sub(1)));
    }
    while at < seconds * 1_000 {
        let idle = |m: &String| busy.get(m).is_none_or(|until| *until <= at);
        // Members a fault may take: idle, and not waiting for their
        // upgrade.
        let free: Vec<String> = live
            .iter()
            .filter(|m| idle(m) && !previous.contains(m) && !spared.contains(m))
            .cloned()
            .collect();
        let next_upgrade = previous.first().filter(|m| idle(m)).cloned();
        let longer = session_ms + 1_000 + rng.below(2_000);
        let store_free = store_free_at <= at;
        let possible = |kind: u64| match kind {
            0 => live.len() > 2 && !free.is_empty(),
            1 | 2 => !free.is_empty(),
            3 => live.len() > 2 && !free.is_empty(),
            4 | 6..=9 => store_free,
            10 => next_upgrade.is_some(),
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
            10 if next_upgrade.is_some() => {
                let m = previous.remove(0);
                // Its close and start hold the schedule up; then a few
                // seconds to settle before the next fault takes it.
                busy.insert(m.clone(), at + 3_000);
                Fault::Upgrade(m)
            }
            _ if live.len() < members + 2 => {
                let m = format!("m{next_id}");
                next_id += 1;
                live.push(m.clone());
                Fault::Join(m)
            }
            _ if !free.is_empty() => {
                let m = pick(&mut rng, &free);
                busy.insert(m.clone(), at + longer);
                Fault::Pause(m, longer)
            }
            // Everyone busy or waiting for an upgrade: nothing this slot.
            _ => {
                at += 4_000 + rng.below(5_000);
                continue;
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

    fn plan(
        seed: u64,
        seconds: u64,
        nodes: u8,
        sink: bool,
        network_partitions: bool,
        upgrade: bool,
    ) -> Plan {
        Plan {
            seed,
            seconds,
            members: 3,
            nodes,
            session_ms: 4_000,
            sink,
            network_partitions,
            upgrade,
            spare: 0,
        }
    }

    #[test]
    fn spared_members_are_never_touched() {
        for seed in 0..200 {
            let faults = schedule(&Plan {
                spare: 1,
                ..plan(seed, 600, 3, false, true, false)
            });
            assert!(
                !faults
                    .iter()
                    .any(|(_, f)| matches!(f, Fault::Kill(m) | Fault::Leave(m)
                    | Fault::Pause(m, _) | Fault::Cut(m, _) if m == "m1")),
                "seed {seed}: {:?}",
                lines(&faults)
            );
            assert!(
                faults.iter().any(|(_, f)| matches!(f, Fault::Kill(_))),
                "seed {seed}"
            );
        }
    }

    /// Every member of the start is upgraded, in order, and none is
    /// killed, made to leave, paused or cut off before.
    #[test]
    fn an_upgrade_run_upgrades_each_member_of_the_start_untouched_before() {
        for seed in 0..200 {
            let faults = schedule(&plan(seed, 40, 1, false, false, true));
            let upgraded: Vec<String> = faults
                .iter()
                .filter_map(|(_, f)| match f {
                    Fault::Upgrade(m) => Some(m.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(
                upgraded,
                ["m1", "m2", "m3"],
                "seed {seed}: {:?}",
                lines(&faults)
            );
            for m in &upgraded {
                let upgrade = faults
                    .iter()
                    .position(|(_, f)| matches!(f, Fault::Upgrade(x) if x == m));
                let touched = faults.iter().position(|(_, f)| {
                    matches!(f, Fault::Kill(x) | Fault::Leave(x) | Fault::Pause(x, _)
                        | Fault::Cut(x, _) if x == m)
                });
                assert!(
                    touched.is_none_or(|t| upgrade.is_some_and(|u| t > u)),
                    "seed {seed}: {m} touched before its upgrade: {:?}",
                    lines(&faults)
                );
            }
            assert!(
                faults.iter().any(|(_, f)| matches!(f, Fault::Leave(_))),
                "seed {seed}"
            );
            let first_join = faults.iter().position(|(_, f)| matches!(f, Fault::Join(_)));
            let last_upgrade = faults
                .iter()
                .rposition(|(_, f)| matches!(f, Fault::Upgrade(_)));
            assert!(
                first_join.is_some_and(|j| last_upgrade.is_some_and(|u| j < u)),
                "seed {seed}: {:?}",
                lines(&faults)
            );
        }
    }

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
                let plan = plan(seed, 120, nodes, required, network_partitions, false);
                let a = schedule(&plan);
                let b = schedule(&plan);
                assert_eq!(lines(&a), lines(&b));
                assert!(!a.is_empty());
            }
        }
        assert_ne!(
            lines(&schedule(&plan(1, 120, 1, false, false, false))),
            lines(&schedule(&plan(2, 120, 1, false, false, false)))
        );
    }

    #[test]
    fn a_long_enough_sink_run_holds_every_required_fault() {
        for seed in 0..200 {
            let faults = schedule(&plan(seed, 120, 1, true, false, false));
            assert!(missing_required(&faults).is_empty(), "seed {seed}");
        }
    }

    /// The short runs of `scripts/test` hold one partition of each kind,
    /// and no store fault starts before the last one healed.
    #[test]
    fn a_partition_run_holds_each_partition_and_store_faults_never_overlap() {
        for seed in 0..200 {
            let faults = schedule(&plan(seed, 60, 3, false, true, false));
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
