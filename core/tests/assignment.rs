//! The assignment strategies against hand-computed cases and properties
//! every member of a group relies on: each partition assigned once, only to
//! a subscriber, the same result whatever order the snapshot lists members
//! in, and for `sticky` balance and few moves on a join or leave.

use std::collections::BTreeMap;
use std::time::Instant;

use proptest::prelude::*;
use tenure_core::assignment::{
    by_name, Assignment, AssignmentStrategy, PartitionCounts, Range, RoundRobin, Sticky,
};
use tenure_core::{MemberId, MemberInfo, TopicPartition};

fn member(id: &str, topics: &[&str]) -> MemberInfo {
    MemberInfo {
        id: MemberId::new(id).expect("valid member id"),
        subscription: tenure_core::Subscription::Topics(
            topics.iter().map(|t| t.to_string()).collect(),
        ),
        strategy: String::new(),
    }
}

fn counts(topics: &[(&str, u32)]) -> PartitionCounts {
    topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

/// The assignment as `member -> ["topic/partition", ...]`, easy to compare
/// with a hand-written expectation.
fn by_member(a: &Assignment) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (tp, owner) in a.iter() {
        out.entry(owner.to_string())
            .or_default()
            .push(tp.to_string());
    }
    out
}

fn expect(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
    pairs
        .iter()
        .map(|(m, tps)| (m.to_string(), tps.iter().map(|s| s.to_string()).collect()))
        .collect()
}

fn strategies() -> [&'static dyn AssignmentStrategy; 3] {
    [&Range, &RoundRobin, &Sticky]
}

/// Every partition of a topic someone subscribes to is assigned exactly once
/// (the map makes "at most once" structural), only to a subscriber, and
/// nothing else is assigned.
fn check_valid(members: &[MemberInfo], partitions: &PartitionCounts, a: &Assignment) {
    let mut expected = 0;
    for (topic, &n) in partitions {
        let subscribed = members.iter().any(|m| m.subscribes_to(topic));
        for p in 0..n {
            let owner = a.owner(&TopicPartition::new(topic, p));
            if subscribed {
                expected += 1;
                let owner = owner.unwrap_or_else(|| panic!("{topic}/{p} unassigned"));
                let info = members
                    .iter()
                    .find(|m| &m.id == owner)
                    .unwrap_or_else(|| panic!("{topic}/{p} given to a non-member {owner}"));
                assert!(
                    info.subscribes_to(topic),
                    "{topic}/{p} given to non-subscriber {owner}"
                );
            } else {
                assert_eq!(owner, None, "{topic}/{p} assigned though nobody subscribes");
            }
        }
    }
    assert_eq!(
        a.len(),
        expected,
        "partitions of unknown topics were assigned"
    );
}

/// Max minus min partitions per member, counting members with none.
fn spread(members: &[MemberInfo], a: &Assignment) -> usize {
    let c = a.counts();
    let loads: Vec<usize> = members
        .iter()
        .map(|m| c.get(&m.id).copied().unwrap_or(0))
        .collect();
    loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0)
}

#[test]
fn by_name_finds_the_built_in_strategies() {
    for name in ["sticky", "range", "round-robin"] {
        let s = by_name(name).expect("built-in strategy");
        assert_eq!(s.name(), name);
    }
    assert!(by_name("roundrobin").is_none());
}

#[test]
fn range_splits_each_topic_into_contiguous_ranges() {
    let members = [
        member("c", &["t"]),
        member("a", &["t"]),
        member("b", &["t"]),
    ];
    let a = Range.assign(&members, &counts(&[("t", 10)]));
    assert_eq!(
        by_member(&a),
        expect(&[
            ("a", &["t/0", "t/1", "t/2", "t/3"]),
            ("b", &["t/4", "t/5", "t/6"]),
            ("c", &["t/7", "t/8", "t/9"]),
        ])
    );
}

#[test]
fn range_splits_topics_independently_among_their_subscribers() {
    // Legacy behaviour: the first member by id gets the extra partition of
    // every topic, so the load is lopsided across topics.
    let members = [
        member("a", &["t1", "t2"]),
        member("b", &["t1", "t2"]),
        member("c", &["t2"]),
    ];
    let a = Range.assign(&members, &counts(&[("t1", 3), ("t2", 4), ("t3", 5)]));
    assert_eq!(
        by_member(&a),
        expect(&[
            ("a", &["t1/0", "t1/1", "t2/0", "t2/1"]),
            ("b", &["t1/2", "t2/2"]),
            ("c", &["t2/3"]),
        ])
    );
}

#[test]
fn range_leaves_members_without_partitions_when_there_are_too_few() {
    let members = [
        member("a", &["t"]),
        member("b", &["t"]),
        member("c", &["t"]),
    ];
    let a = Range.assign(&members, &counts(&[("t", 2)]));
    assert_eq!(by_member(&a), expect(&[("a", &["t/0"]), ("b", &["t/1"])]));
}

#[test]
fn round_robin_deals_partitions_across_topics() {
    let members = [
        member("b", &["t1", "t2"]),
        member("a", &["t1", "t2"]),
        member("c", &["t1", "t2"]),
    ];
    let a = RoundRobin.assign(&members, &counts(&[("t1", 3), ("t2", 2)]));
    assert_eq!(
        by_member(&a),
        expect(&[
            ("a", &["t1/0", "t2/0"]),
            ("b", &["t1/1", "t2/1"]),
            ("c", &["t1/2"]),
        ])
    );
}

#[test]
fn round_robin_skips_members_not_subscribed() {
    // The example of Kafka's RoundRobinAssignor documentation.
    let members = [
        member("C0", &["t0"]),
        member("C1", &["t0", "t1"]),
        member("C2", &["t0", "t1", "t2"]),
    ];
    let a = RoundRobin.assign(&members, &counts(&[("t0", 1), ("t1", 2), ("t2", 3)]));
    assert_eq!(
        by_member(&a),
        expect(&[
            ("C0", &["t0/0"]),
            ("C1", &["t1/0"]),
            ("C2", &["t1/1", "t2/0", "t2/1", "t2/2"]),
        ])
    );
}

#[test]
fn nothing_to_assign_gives_an_empty_assignment() {
    let some = [member("a", &["t"]), member("b", &["u"])];
    for s in strategies() {
        let name = s.name();
        assert!(s.assign(&[], &counts(&[("t", 4)])).is_empty(), "{name}");
        assert!(
            s.assign(&some, &PartitionCounts::new()).is_empty(),
            "{name}"
        );
        assert!(
            s.assign(&some, &counts(&[("t", 0), ("u", 0)])).is_empty(),
            "{name}"
        );
        assert!(s.assign(&some, &counts(&[("v", 7)])).is_empty(), "{name}");
        assert!(
            s.assign(&[member("x", &[])], &counts(&[("t", 3)]))
                .is_empty(),
            "{name}"
        );
    }
}

#[test]
fn only_subscribers_get_partitions() {
    let members = [
        member("a", &["t"]),
        member("b", &["t", "u"]),
        member("c", &["u"]),
        member("d", &["w"]),
    ];
    let partitions = counts(&[("t", 7), ("u", 5), ("v", 3), ("w", 0)]);
    for s in strategies() {
        check_valid(&members, &partitions, &s.assign(&members, &partitions));
    }
}

#[test]
fn member_order_does_not_matter() {
    let mut members: Vec<MemberInfo> = (0..9)
        .map(|i| {
            let topics: &[&str] = if i % 3 == 0 { &["t", "u"] } else { &["t"] };
            member(&format!("m{i}"), topics)
        })
        .collect();
    let partitions = counts(&[("t", 40), ("u", 13)]);
    for s in strategies() {
        let first = s.assign(&members, &partitions);
        members.reverse();
        assert_eq!(first, s.assign(&members, &partitions), "{}", s.name());
        members.rotate_left(4);
        assert_eq!(first, s.assign(&members, &partitions), "{}", s.name());
        // A member listed twice counts once.
        let mut doubled = members.clone();
        doubled.push(members[2].clone());
        assert_eq!(first, s.assign(&doubled, &partitions), "{}", s.name());
    }
}

fn group(ids: impl IntoIterator<Item = String>, topics: &[&str]) -> Vec<MemberInfo> {
    ids.into_iter().map(|i| member(&i, topics)).collect()
}

#[test]
fn sticky_is_balanced_with_the_same_subscriptions() {
    for (m, n) in [
        (1usize, 5u32),
        (3, 10),
        (7, 100),
        (10, 1000),
        (13, 12),
        (40, 1000),
    ] {
        let members = group((0..m).map(|i| format!("member-{i}")), &["t"]);
        let partitions = counts(&[("t", n)]);
        let a = Sticky.assign(&members, &partitions);
        check_valid(&members, &partitions, &a);
        assert!(spread(&members, &a) <= 1, "{m} members, {n} partitions");
    }
    // Balance is over all topics together, not per topic.
    let members = group((0..10).map(|i| format!("member-{i}")), &["a", "b", "c"]);
    let partitions = counts(&[("a", 7), ("b", 3), ("c", 5)]);
    let a = Sticky.assign(&members, &partitions);
    assert!(spread(&members, &a) <= 1);
}

/// (moved, minimum) when `extra` joins `members`, the minimum being the
/// newcomer's count; then the same when the first member by id leaves the
/// bigger group, the minimum being the leaver's count.
type Movement = ((usize, usize), (usize, usize));

fn join_and_leave(
    members: &[MemberInfo],
    extra: MemberInfo,
    partitions: &PartitionCounts,
) -> Movement {
    let before = Sticky.assign(members, partitions);
    let mut joined = members.to_vec();
    joined.push(extra.clone());
    let after = Sticky.assign(&joined, partitions);
    let newcomer = after.partitions_of(&extra.id).len();
    let leaver = joined
        .iter()
        .map(|m| m.id.clone())
        .min()
        .expect("non-empty group");
    let rest: Vec<MemberInfo> = joined.iter().filter(|m| m.id != leaver).cloned().collect();
    let left = Sticky.assign(&rest, partitions);
    (
        (before.moves_to(&after), newcomer),
        (after.moves_to(&left), after.partitions_of(&leaver).len()),
    )
}

#[test]
fn sticky_moves_little_on_join_and_leave() {
    // Measured, topic "t": 10 -> 11 over 1,000 partitions moves 106 (min
    // 91) on the join and 102 (min 91) when member-0 then leaves; 3 -> 4
    // over 12 moves 4 (min 3) and 4 (min 3). Pinned exactly, because a
    // change here changes which partitions move in every running group.
    let cases: [(usize, u32, Movement); 2] = [
        (10, 1000, ((106, 91), (102, 91))),
        (3, 12, ((4, 3), (4, 3))),
    ];
    for (m, n, expected) in cases {
        let members = group((0..m).map(|i| format!("member-{i}")), &["t"]);
        let got = join_and_leave(&members, member("member-99", &["t"]), &counts(&[("t", n)]));
        assert_eq!(got, expected, "{m} -> {} over {n}", m + 1);
    }

    // Over 20 sets of ids the total stays within 1.5x the minimum
    // (measured on topic "a": 1.20 on join and on leave for 10 -> 11 over
    // 1,000; 1.28 and 1.25 for 3 -> 4 over 12).
    for (m, n) in [(10usize, 1000u32), (3, 12)] {
        let (mut moved, mut min) = (0, 0);
        for base in 0..20 {
            let members = group((0..m).map(|i| format!("member-{}", base * 100 + i)), &["a"]);
            let extra = member(&format!("member-{}", base * 100 + 99), &["a"]);
            let ((jm, jmin), (lm, lmin)) = join_and_leave(&members, extra, &counts(&[("a", n)]));
            moved += jm + lm;
            min += jmin + lmin;
        }
        assert!(
            moved * 2 <= min * 3,
            "{m} -> {} over {n}: moved {moved}, min {min}",
            m + 1
        );
    }
}

#[test]
fn sticky_is_fast_enough_for_large_groups() {
    let members = group((0..100).map(|i| format!("consumer-{i:03}")), &["a", "b"]);
    let partitions = counts(&[("a", 600), ("b", 400)]);
    let start = Instant::now();
    let a = Sticky.assign(&members, &partitions);
    let elapsed = start.elapsed();
    check_valid(&members, &partitions, &a);
    assert!(spread(&members, &a) <= 1);
    // Timing means something only in an optimised build.
    if !cfg!(debug_assertions) {
        assert!(elapsed.as_millis() < 50, "took {elapsed:?}");
    }
}

/// A random group: distinct ids, 1-3 topics of 0-64 partitions, each member
/// subscribed to a random set of them, or all to the same set.
#[derive(Debug, Clone)]
struct Snapshot {
    members: Vec<MemberInfo>,
    partitions: PartitionCounts,
    homogeneous: bool,
    /// A member not in `members`, subscribed like them when homogeneous.
    newcomer: MemberInfo,
}

const TOPICS: [&str; 3] = ["t0", "t1", "t2"];

fn topics_of(mask: u8, topic_count: usize) -> Vec<&'static str> {
    (0..topic_count)
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| TOPICS[i])
        .collect()
}

fn snapshot() -> impl Strategy<Value = Snapshot> {
    (
        prop::collection::btree_set("[a-z0-9]{1,5}", 1..=20),
        prop::collection::vec(0u32..=64, 1..=3),
        any::<bool>(),
        1u8..8,
        prop::collection::vec(0u8..8, 21),
        "[a-z]{1,3}",
    )
        .prop_map(|(ids, sizes, homogeneous, shared, masks, newcomer)| {
            let topic_count = sizes.len();
            let partitions = (0..topic_count)
                .map(|i| (TOPICS[i].to_string(), sizes[i]))
                .collect();
            // With one topic every non-empty mask means "subscribed to t0";
            // the low bit is forced so homogeneous groups subscribe to it.
            let mask = |i: usize| {
                if homogeneous {
                    shared | 1
                } else {
                    masks[i]
                }
            };
            let members = ids
                .into_iter()
                .enumerate()
                .map(|(i, id)| member(&id, &topics_of(mask(i), topic_count)))
                .collect();
            // The hyphen keeps the newcomer's id apart from the others.
            let newcomer = member(&format!("n-{newcomer}"), &topics_of(mask(20), topic_count));
            Snapshot {
                members,
                partitions,
                homogeneous,
                newcomer,
            }
        })
}

proptest! {
    #[test]
    fn every_strategy_assigns_each_partition_once_to_a_subscriber(s in snapshot()) {
        for strategy in strategies() {
            let a = strategy.assign(&s.members, &s.partitions);
            check_valid(&s.members, &s.partitions, &a);
            let mut reversed = s.members.clone();
            reversed.reverse();
            prop_assert_eq!(&a, &strategy.assign(&reversed, &s.partitions));
        }
    }

    #[test]
    fn sticky_is_balanced_and_moves_little_on_a_join(s in snapshot()) {
        let before = Sticky.assign(&s.members, &s.partitions);
        let mut joined = s.members.clone();
        joined.push(s.newcomer.clone());
        let after = Sticky.assign(&joined, &s.partitions);
        check_valid(&joined, &s.partitions, &after);
        let newcomer = after.partitions_of(&s.newcomer.id).len();
        let moved = before.moves_to(&after);
        if s.homogeneous {
            prop_assert!(spread(&s.members, &before) <= 1);
            prop_assert!(spread(&joined, &after) <= 1);
            // Few partitions per member make the matching fragile: over
            // 400,000 random groups of up to 21 members and 192 partitions
            // the worst join moved 4 * newcomer + 3 (11 for a newcomer with
            // 2: 19 -> 20 members over 40 partitions; 7 for 1 at 17 -> 18
            // over 18). Dealing afresh would move nearly every partition.
            prop_assert!(
                moved <= 4 * newcomer + 4,
                "moved {} for a newcomer with {}", moved, newcomer
            );
        }
    }
}
