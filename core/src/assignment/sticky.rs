//! The `sticky` strategy, the default: balanced, and moving few partitions
//! when one member joins or leaves.
//!
//! Members know only the current membership, not the previous assignment,
//! so stickiness has to come from the scoring itself: rendezvous hashing.
//! Every (member, partition) pair gets a stable pseudo-random score, and a
//! partition prefers the members that score it highest. A join or leave
//! changes no score of the other pairs, so most partitions keep their owner.
//!
//! Plain rendezvous hashing is unbalanced, so loads are bounded: with `N`
//! assignable partitions and `M` members subscribed to at least one of their
//! topics, every member may take `floor(N / M)` partitions, and `N % M` of
//! them one more. The pairs are taken greedily from the highest score down;
//! a pair is taken when its partition is still free and its member still
//! has room. With the same scores on both sides this is the stable matching
//! of partitions and members, which changes little when one member comes or
//! goes. When subscriptions differ, a partition can be left over because all
//! its subscribers are full; it goes to its least-loaded subscriber, so
//! balance is then only approximate.
//!
//! Movement measured on single joins and leaves, one topic `a` (20 sets of
//! member ids `member-<k>` each, `moved / minimum`, where the minimum is the
//! count of the member that joined or left):
//!
//! | members  | partitions        | join avg | join worst | leave avg | leave worst |
//! |----------|-------------------|----------|------------|-----------|-------------|
//! | 10 → 11  | 1,000             | 1.20     | 1.32       | 1.20      | 1.27        |
//! | 10 → 11  | 500 + 300 + 200   | 1.21     | 1.31       | 1.18      | 1.27        |
//! | 7 → 8    | 100               | 1.34     | 1.62       | 1.29      | 1.75        |
//! | 3 → 4    | 12                | 1.28     | 1.67 (5/3) | 1.25      | 2.00 (6/3)  |
//! | 30 → 31  | 1,000             | 1.65     | 1.82       | 1.68      | 1.76        |
//!
//! On topic `t` instead of `a` the scores differ: 10 → 11 over 1,000 then
//! moves 106 on the join and 102 on the leave (minimum 91 each), and 3 → 4
//! over 12 moves 4 and 4 (minimum 3 each).
//!
//! Movement grows as the partitions per member shrink, because each old
//! member must give up only about `N / M²` partitions while the newcomer's
//! best-scored partitions fall on old members at random, and every old
//! member that loses too many pulls partitions from others. With one to
//! five partitions per member (random groups of up to 21 members over up to
//! 192 partitions) the worst join seen moved `4 × minimum + 3` partitions.
//! That is still far from dealing afresh, which moves nearly all of them.
//!
//! Two other greedy orders were tried and moved more: partitions in order
//! of their best score, each taking its best member with room (1.25 for
//! 10 → 11, 1.78 for 30 → 31), and filling every member to the floor
//! before handing out the extra partitions (1.26 and 1.71).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::rc::Rc;
use std::sync::Arc;

use super::{Assignment, PartitionCounts};
use crate::rng::mix64;
use crate::subscription::MemberInfo;
use crate::types::{MemberId, TopicPartition};

/// The `sticky` assignment strategy: rendezvous hashing with bounded loads,
/// so the assignment is balanced and a join or leave moves few partitions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sticky;

/// What one member keeps of its last sticky assignment to make the next
/// one cheaper: for each topic, who subscribed and each partition's best
/// scored subscriber.
///
/// Finding a partition's best subscriber scores it against every member,
/// P·M scores per assignment, which at 100 members over 10,000 partitions
/// was most of a membership change's work. A join or leave changes no
/// score of the members that stay, so the best of each partition is only
/// compared with the members that joined, and looked for afresh only where
/// the best one left: about P·(joined) + (P/M)·M scores for one change.
#[derive(Debug, Default)]
pub(super) struct Memo {
    topics: BTreeMap<String, TopicBest>,
}

/// The best subscriber of each partition of one topic.
#[derive(Debug)]
struct TopicBest {
    /// The subscribers then, sorted by id.
    ids: Vec<MemberId>,
    /// For each partition: its best score and the index in `ids` of the
    /// subscriber that has it (the first one if several have).
    best: Vec<(u64, u32)>,
}

/// Places each partition on its highest-ranked member (`members`, sorted by
/// id) that still has room under the bound.
pub(super) fn assign(members: &[&MemberInfo], partitions: &PartitionCounts) -> Assignment {
    assign_with(members, partitions, &mut Memo::default())
}

/// Each partition's best subscriber among `subscribers` (indices into
/// `member_hashes`, ascending), as (score, member index): from `memo` where
/// it still holds, and kept there for the next call.
fn best_offers(
    memo: &mut Memo,
    topic: &str,
    members: &[&MemberInfo],
    member_hashes: &[u64],
    subscribers: &[u32],
    keys: &[u64],
) -> Vec<(u64, u32)> {
    // The best of one partition among `among` (positions in `subscribers`):
    // the highest score, the first position among equal ones.
    let scan = |key: u64, among: &mut dyn Iterator<Item = u32>| -> Option<(u64, u32)> {
        let mut best: Option<(u64, u32)> = None;
        for k in among {
            let s = score(member_hashes[subscribers[k as usize] as usize], key);
            if best.is_none_or(|(b, _)| s > b) {
                best = Some((s, k));
            }
        }
        best
    };
    let ids: Vec<MemberId> = subscribers
        .iter()
        .map(|&m| members[m as usize].id.clone())
        .collect();
    let n = subscribers.len() as u32;
    let previous = memo.topics.remove(topic);
    // Positions then → positions now (`None`: left), and positions of the
    // members that joined, both id lists being sorted.
    let reuse = previous
        .filter(|p| p.best.len() == keys.len())
        .and_then(|p| {
            let mut now_of = vec![None; p.ids.len()];
            let mut joined = Vec::new();
            let (mut i, mut j) = (0, 0);
            while i < p.ids.len() || j < ids.len() {
                match (p.ids.get(i), ids.get(j)) {
                    (Some(a), Some(b)) if a == b => {
                        now_of[i] = Some(j as u32);
                        i += 1;
                        j += 1;
                    }
                    (Some(a), Some(b)) if a < b => i += 1,
                    (Some(_), None) => i += 1,
                    _ => {
                        joined.push(j as u32);
                        j += 1;
                    }
                }
            }
            let left = now_of.iter().filter(|k| k.is_none()).count();
            // Past a few changes, scoring afresh costs no more.
            (4 * (left + joined.len()) <= ids.len()).then_some((p.best, now_of, joined))
        });
    let best: Vec<(u64, u32)> = match reuse {
        Some((before, now_of, joined)) => keys
            .iter()
            .zip(before)
            .map(|(&key, (s, k))| match now_of[k as usize] {
                Some(k) => {
                    let mut best = (s, k);
                    for &j in &joined {
                        let sj = score(member_hashes[subscribers[j as usize] as usize], key);
                        // Equal scores go to the first subscriber.
                        if sj > best.0 || (sj == best.0 && j < best.1) {
                            best = (sj, j);
                        }
                    }
                    best
                }
                None => scan(key, &mut (0..n)).unwrap_or((0, 0)),
            })
            .collect(),
        None => keys
            .iter()
            .map(|&key| scan(key, &mut (0..n)).unwrap_or((0, 0)))
            .collect(),
    };
    let offers = best
        .iter()
        .map(|&(s, k)| (s, subscribers[k as usize]))
        .collect();
    memo.topics
        .insert(topic.to_owned(), TopicBest { ids, best });
    offers
}

/// [`assign`], reusing (and updating) what `memo` kept of the last call.
pub(super) fn assign_with(
    members: &[&MemberInfo],
    partitions: &PartitionCounts,
    memo: &mut Memo,
) -> Assignment {
    // The slots are in partition order: the map is built in one pass
    // rather than by inserting (and comparing) each partition in turn.
    let (slots, owner) = place(members, partitions, memo);
    slots
        .into_iter()
        .zip(owner)
        .filter_map(|(slot, owner)| Some((slot.partition, members[owner? as usize].id.clone())))
        .collect()
}

/// The partitions [`assign_with`] gives `member`, without the map of
/// every partition's owner: a member needs only its own, and the map cost
/// as much as the rest of an assignment.
pub(super) fn assign_to(
    members: &[&MemberInfo],
    partitions: &PartitionCounts,
    memo: &mut Memo,
    member: &MemberId,
) -> BTreeSet<TopicPartition> {
    let (slots, owner) = place(members, partitions, memo);
    let Some(me) = members.iter().position(|m| m.id == *member) else {
        return BTreeSet::new();
    };
    slots
        .into_iter()
        .zip(owner)
        .filter(|(_, owner)| *owner == Some(me as u32))
        .map(|(slot, _)| slot.partition)
        .collect()
}

/// Every assignable partition in partition order, with the index in
/// `members` of the one it goes to.
fn place(
    members: &[&MemberInfo],
    partitions: &PartitionCounts,
    memo: &mut Memo,
) -> (Vec<Slot>, Vec<Option<u32>>) {
    let member_hashes: Vec<u64> = members
        .iter()
        .map(|m| hash_bytes(m.id.as_str().as_bytes()))
        .collect();

    // Partitions in (topic, partition) order, each with its subscribers
    // (indices into `members`); partitions without one are left out.
    let mut slots: Vec<Slot> = Vec::new();
    let mut active = vec![false; members.len()];
    for (topic, &count) in partitions {
        if count == 0 {
            continue;
        }
        let subscribers: Vec<u32> = (0u32..)
            .zip(members)
            .filter(|(_, m)| m.subscribes_to(topic))
            .map(|(i, _)| i)
            .collect();
        if subscribers.is_empty() {
            continue;
        }
        for &i in &subscribers {
            active[i as usize] = true;
        }
        let topic_hash = hash_bytes(topic.as_bytes());
        let keys: Vec<u64> = (0..count)
            .map(|partition| partition_key(topic_hash, partition))
            .collect();
        let offers = best_offers(memo, topic, members, &member_hashes, &subscribers, &keys);
        let subscribers = Rc::new(subscribers);
        // One name shared by the topic's partitions, rather than one
        // allocation for each.
        let name: Arc<str> = Arc::from(topic.as_str());
        for ((partition, key), best) in (0..count).zip(keys).zip(offers) {
            slots.push(Slot {
                partition: TopicPartition {
                    topic: Arc::clone(&name),
                    partition,
                },
                key,
                subscribers: Rc::clone(&subscribers),
                best,
            });
        }
    }
    // Topics no one subscribes to any more are forgotten.
    memo.topics
        .retain(|topic, _| partitions.get(topic).is_some_and(|&count| count > 0));

    let total = slots.len();
    let active_members = active.iter().filter(|a| **a).count();
    if total == 0 || active_members == 0 {
        return (Vec::new(), Vec::new());
    }
    let floor = total / active_members;
    let mut extra_left = total % active_members;

    // Every (member, partition) pair is considered from the highest score
    // down, and taken when its partition is still free and its member still
    // has room. Sorting all the pairs cost O(P·M·log(P·M)) per member and
    // membership change, which at 100 members over 10,000 partitions took
    // most of a join's time. Instead each free partition offers only its
    // best pair not yet turned down, and a heap yields the best of those
    // offers: the same pairs in the same order (a member's room only
    // shrinks, so a pair turned down stays turned down), and most
    // partitions are placed at their first offer.
    let mut load = vec![0usize; members.len()];
    let mut owner: Vec<Option<u32>> = vec![None; total];
    let mut offers: BinaryHeap<Reverse<u128>> = (0u32..)
        .zip(&slots)
        .map(|(p, slot)| Reverse(key_of(slot.best.0, slot.best.1, p)))
        .collect::<Vec<_>>()
        .into();
    let has_room = |load: &[usize], extra_left: usize, m: usize| {
        load[m] < floor || (load[m] == floor && extra_left > 0)
    };
    while let Some(Reverse(pair)) = offers.pop() {
        let (m, p) = pair_indices(pair);
        if has_room(&load, extra_left, m) {
            // The extra partitions go to whichever members reach the floor
            // first in score order, so who gets one also follows the scores
            // rather than member order, and changes little on a join.
            if load[m] == floor {
                extra_left -= 1;
            }
            load[m] += 1;
            owner[p] = Some(m as u32);
            continue;
        }
        // Turned down: the partition offers its best pair whose member has
        // room now. A member without room never gets it back, so every pair
        // ranked above that one was turned down or would be: it is the
        // pair that going down the partition's sorted pairs would reach,
        // found without sorting them (at 100 members over 10,000 partitions
        // 6% are turned down, and sorting their pairs cost a third of the
        // assignment).
        let slot = &slots[p];
        let next = slot
            .subscribers
            .iter()
            .filter(|&&m| has_room(&load, extra_left, m as usize))
            .map(|&m| pair_key(&member_hashes, slot, m, p as u32))
            .min();
        if let Some(pair) = next {
            offers.push(Reverse(pair));
        }
    }

    for (slot, owner) in slots.iter().zip(&mut owner) {
        if owner.is_none() {
            // Only with differing subscriptions: every subscriber is full,
            // so bend the bound for the one with the least to do.
            *owner = slot.subscribers.iter().copied().min_by_key(|&m| {
                let s = score(member_hashes[m as usize], slot.key);
                (load[m as usize], std::cmp::Reverse(s), m)
            });
            if let Some(m) = *owner {
                load[m as usize] += 1;
            }
        }
    }
    (slots, owner)
}

/// The order in which pairs are considered, as one integer: the score
/// inverted so that the smallest key is the highest score, then the member
/// and partition indices so that ties resolve the same way everywhere.
fn pair_key(member_hashes: &[u64], slot: &Slot, m: u32, p: u32) -> u128 {
    key_of(score(member_hashes[m as usize], slot.key), m, p)
}

/// The pair key of score `s` for member `m` and partition `p`.
fn key_of(s: u64, m: u32, p: u32) -> u128 {
    (u128::from(!s) << 64) | (u128::from(m) << 32) | u128::from(p)
}

/// The (member, partition) indices of a pair key.
fn pair_indices(pair: u128) -> (usize, usize) {
    (
        ((pair >> 32) & 0xFFFF_FFFF) as usize,
        (pair & 0xFFFF_FFFF) as usize,
    )
}

/// One assignable partition.
struct Slot {
    partition: TopicPartition,
    /// The partition's hash, mixed with each member's to score the pair.
    key: u64,
    /// The subscribers of the partition's topic, shared by its partitions.
    subscribers: Rc<Vec<u32>>,
    /// Its best pair: the highest score and the member that has it.
    best: (u64, u32),
}

const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;

/// A stable hash of a byte string: FNV-1a folds the bytes, and the final
/// mix spreads FNV's weak high bits. Every member must compute the same
/// scores, whatever its build, so no std hasher is used.
fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    mix64(h ^ bytes.len() as u64)
}

/// The hash of one partition. The partition number is mixed before meeting
/// the topic hash so that neighbouring partitions get unrelated keys.
fn partition_key(topic_hash: u64, partition: u32) -> u64 {
    mix64(topic_hash ^ mix64(u64::from(partition).wrapping_add(0x9E37_79B9_7F4A_7C15)))
}

/// The rendezvous score of a (member, partition) pair.
fn score(member_hash: u64, partition_key: u64) -> u64 {
    mix64(member_hash.wrapping_add(partition_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::subscription::Subscription;
    use crate::types::MemberId;

    /// The assignment as first written: every pair sorted, then taken in
    /// order. The heap in `assign` must give exactly this, or members of
    /// different versions would disagree during a rolling upgrade.
    fn reference_assign(members: &[&MemberInfo], partitions: &PartitionCounts) -> Assignment {
        let member_hashes: Vec<u64> = members
            .iter()
            .map(|m| hash_bytes(m.id.as_str().as_bytes()))
            .collect();

        // Partitions in (topic, partition) order, each with its subscribers
        // (indices into `members`); partitions without one are left out.
        let mut slots: Vec<Slot> = Vec::new();
        let mut active = vec![false; members.len()];
        for (topic, &count) in partitions {
            if count == 0 {
                continue;
            }
            let subscribers: Vec<u32> = (0u32..)
                .zip(members)
                .filter(|(_, m)| m.subscribes_to(topic))
                .map(|(i, _)| i)
                .collect();
            if subscribers.is_empty() {
                continue;
            }
            for &i in &subscribers {
                active[i as usize] = true;
            }
            let topic_hash = hash_bytes(topic.as_bytes());
            let subscribers = Rc::new(subscribers);
            for partition in 0..count {
                slots.push(Slot {
                    partition: TopicPartition::new(topic, partition),
                    key: partition_key(topic_hash, partition),
                    subscribers: Rc::clone(&subscribers),
                    best: (0, 0),
                });
            }
        }

        let total = slots.len();
        let active_members = active.iter().filter(|a| **a).count();
        let mut assignment = Assignment::new();
        if total == 0 || active_members == 0 {
            return assignment;
        }
        let floor = total / active_members;
        let mut extra_left = total % active_members;

        // One sort key per pair: the score inverted so that an ascending sort
        // puts the highest score first, then the member and partition indices
        // so ties resolve the same way everywhere.
        let mut pairs: Vec<u128> =
            Vec::with_capacity(slots.iter().map(|s| s.subscribers.len()).sum());
        for (p, slot) in (0u32..).zip(&slots) {
            for &m in slot.subscribers.iter() {
                let s = score(member_hashes[m as usize], slot.key);
                pairs.push((u128::from(!s) << 64) | (u128::from(m) << 32) | u128::from(p));
            }
        }
        pairs.sort_unstable();

        let mut load = vec![0usize; members.len()];
        let mut owner: Vec<Option<u32>> = vec![None; total];
        for pair in pairs {
            let m = ((pair >> 32) & 0xFFFF_FFFF) as usize;
            let p = (pair & 0xFFFF_FFFF) as usize;
            if owner[p].is_some() {
                continue;
            }
            // The extra partitions go to whichever members reach the floor
            // first in score order, so who gets one also follows the scores
            // rather than member order, and changes little on a join.
            let room = if load[m] < floor {
                true
            } else if load[m] == floor && extra_left > 0 {
                extra_left -= 1;
                true
            } else {
                false
            };
            if room {
                load[m] += 1;
                owner[p] = Some(m as u32);
            }
        }

        for (slot, owner) in slots.iter().zip(&mut owner) {
            if owner.is_none() {
                // Only with differing subscriptions: every subscriber is full,
                // so bend the bound for the one with the least to do.
                *owner = slot.subscribers.iter().copied().min_by_key(|&m| {
                    let s = score(member_hashes[m as usize], slot.key);
                    (load[m as usize], std::cmp::Reverse(s), m)
                });
                if let Some(m) = *owner {
                    load[m as usize] += 1;
                }
            }
            if let Some(m) = *owner {
                assignment.insert(slot.partition.clone(), members[m as usize].id.clone());
            }
        }
        assignment
    }

    fn member(id: String, topics: Vec<&str>) -> MemberInfo {
        MemberInfo {
            id: MemberId::new(id).expect("a valid id"),
            subscription: Subscription::topics(topics).expect("valid topics"),
            strategy: "sticky".to_owned(),
        }
    }

    #[test]
    fn the_heap_takes_the_same_pairs_as_sorting_them_all() {
        let topics = ["a", "b", "c"];
        for seed in 0..300 {
            let mut rng = SplitMix64::new(seed);
            let members: Vec<MemberInfo> = (0..1 + rng.below(40))
                .map(|i| {
                    // Mostly the same subscription, sometimes a different
                    // one, so that partitions are also left over.
                    let mut chosen: Vec<&str> = if rng.chance(3, 4) {
                        topics.to_vec()
                    } else {
                        topics
                            .iter()
                            .copied()
                            .filter(|_| rng.chance(1, 2))
                            .collect()
                    };
                    if chosen.is_empty() {
                        chosen.push(topics[(i % 3) as usize]);
                    }
                    member(format!("member-{seed}-{i}"), chosen)
                })
                .collect();
            let counts: PartitionCounts = topics
                .iter()
                .map(|t| ((*t).to_owned(), rng.below(200) as u32))
                .collect();
            let sorted: Vec<&MemberInfo> = {
                let mut m: Vec<&MemberInfo> = members.iter().collect();
                m.sort_by(|a, b| a.id.cmp(&b.id));
                m
            };
            assert_eq!(
                assign(&sorted, &counts),
                reference_assign(&sorted, &counts),
                "seed {seed}: {} members, {counts:?}",
                members.len()
            );
        }
    }

    #[test]
    fn the_memo_changes_no_assignment() {
        // Groups that change a few members at a time (where the memo is
        // reused), many at once (where it is not), their subscriptions and
        // partition counts: each assignment through one memo must equal the
        // one worked out afresh.
        let topics = ["a", "b", "c"];
        for seed in 0..60 {
            let mut rng = SplitMix64::new(seed);
            let mut memo = Memo::default();
            let mut members: Vec<MemberInfo> = Vec::new();
            let mut next = 0;
            let mut counts: PartitionCounts = topics
                .iter()
                .map(|t| ((*t).to_owned(), 1 + rng.below(300) as u32))
                .collect();
            for step in 0..40 {
                let changes = if rng.chance(1, 8) {
                    1 + rng.below(20)
                } else {
                    1
                };
                for _ in 0..changes {
                    if members.is_empty() || rng.chance(1, 2) {
                        let chosen: Vec<&str> = if rng.chance(4, 5) {
                            topics.to_vec()
                        } else {
                            vec![topics[rng.below(3) as usize]]
                        };
                        members.push(member(format!("m-{seed}-{next}"), chosen));
                        next += 1;
                    } else {
                        members.remove(rng.below(members.len() as u64) as usize);
                    }
                }
                if rng.chance(1, 10) {
                    let topic = topics[rng.below(3) as usize].to_owned();
                    counts.insert(topic, rng.below(300) as u32);
                }
                let mut sorted: Vec<&MemberInfo> = members.iter().collect();
                sorted.sort_by(|a, b| a.id.cmp(&b.id));
                let reference = reference_assign(&sorted, &counts);
                assert_eq!(
                    assign_with(&sorted, &counts, &mut memo),
                    reference,
                    "seed {seed}, step {step}: {} members, {counts:?}",
                    members.len()
                );
                // And a member's own share, picked out without the map.
                if let Some(m) = sorted.get(step % sorted.len().max(1)) {
                    assert_eq!(
                        assign_to(&sorted, &counts, &mut memo, &m.id),
                        reference.partitions_of(&m.id),
                        "seed {seed}, step {step}: {}",
                        m.id
                    );
                }
            }
        }
    }
}
