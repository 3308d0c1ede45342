//! Network partitions between the nodes of a 3-node store (cut and healed
//! by `scripts/services link`), and what the audit asks of the members on
//! the minority side.
//!
//! A partition leaves every member's connection to its own node alone: a
//! member connected to a node that can no longer reach a quorum keeps
//! talking to it. Such a member must stop handing out messages before its
//! session can expire on the majority side, where another member may then
//! take its partitions. The audit measures, for each member connected to a
//! minority node only (`--connect one`), the time from the moment the
//! majority could start counting its session down to the last message it
//! handed out before the heal: it must be less than the session timeout.
//!
//! That moment is the cut when a follower is cut off: the leader hears
//! nothing more of the sessions connected through it. When the leader is
//! the one isolated, it is the moment the majority's new leader is seen:
//! the isolated leader goes on answering its clients until it notices it
//! lost its quorum, and a new leader starts every session's timeout afresh
//! when it takes over (ZooKeeper restarts each session's expiry, etcd
//! extends every lease), so no session can expire on the majority before.
//! A partition healed before a new leader was seen expired nothing.

use std::sync::{Arc, OnceLock};

use crate::transcript::Log;

/// Which links a partition cuts.
#[derive(Clone, Copy, Debug)]
pub enum PartitionKind {
    /// The leader from both followers: it is alone, the followers elect a
    /// new leader.
    IsolateLeader,
    /// A follower from both others (1|2, the leader on the majority side).
    Split,
    /// One follower from the leader only: a partial partition, where the
    /// follower still reaches the other follower, which follows the leader.
    CutFollower,
}

impl PartitionKind {
    /// The kinds, in the order the schedule numbers them.
    pub const ALL: [PartitionKind; 3] = [
        PartitionKind::IsolateLeader,
        PartitionKind::Split,
        PartitionKind::CutFollower,
    ];

    /// The links to cut, and the node left without a quorum, given the
    /// leader and which of the two followers (`pick`: 0 or 1, in node
    /// order) the partition is about.
    pub fn plan(self, leader: u8, pick: u8) -> (Vec<(u8, u8)>, u8) {
        let followers: Vec<u8> = (1..=3).filter(|n| *n != leader).collect();
        let follower = followers[usize::from(pick % 2)];
        let other = followers[usize::from(1 - pick % 2)];
        match self {
            PartitionKind::IsolateLeader => {
                (followers.iter().map(|f| (leader, *f)).collect(), leader)
            }
            PartitionKind::Split => (vec![(follower, leader), (follower, other)], follower),
            PartitionKind::CutFollower => (vec![(follower, leader)], follower),
        }
    }
}

impl std::fmt::Display for PartitionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PartitionKind::IsolateLeader => "isolate the store's leader",
            PartitionKind::Split => "split the store 1|2, a follower alone",
            PartitionKind::CutFollower => "cut a follower from the store's leader",
        })
    }
}

/// A partition as it was made.
pub struct Window {
    pub kind: PartitionKind,
    /// Wall ms of the cut, and of the heal as planned.
    pub from: u64,
    pub until: u64,
    /// The node left without a quorum.
    pub minority: u8,
    /// The members connected to that node only, at the cut.
    pub members: Vec<String>,
    /// Wall ms from which the majority counts the minority's sessions
    /// down: the cut, or when the leader is isolated, when a new leader
    /// was seen (unset if none was before the heal).
    pub majority_from: Arc<OnceLock<u64>>,
}

/// The partitions' line: for every member connected to a minority node
/// alone, the time from the moment the majority could start counting its
/// session down to the last message it handed out before the heal.
/// Returns whether every one is below the session timeout.
pub fn audit(log: &Log, windows: &[Window], session_ms: u64) -> bool {
    if windows.is_empty() {
        return true;
    }
    let mut max: Option<(u64, &str, &Window)> = None;
    let mut measured = 0;
    let mut held = true;
    for window in windows {
        let Some(reference) = window.majority_from.get().copied() else {
            // No new leader before the heal: nothing could expire.
            continue;
        };
        for member in &window.members {
            measured += 1;
            let last = log
                .messages
                .iter()
                .filter(|(m, at, ..)| m == member && (window.from..window.until).contains(at))
                .map(|(_, at, ..)| *at)
                .max();
            if let Some(last) = last {
                // Negative (a hand-out before a new leader was seen) counts
                // as 0.
                let after = last.saturating_sub(reference);
                if after >= session_ms {
                    held = false;
                    println!(
                        "  {member} on node {} handed out {after} ms after the majority could \
                         count its session down ({}, {} ms after the cut), past its session \
                         ({session_ms} ms)",
                        window.minority,
                        window.kind,
                        reference - window.from
                    );
                }
                if max.is_none_or(|(m, ..)| after > m) {
                    max = Some((after, member, window));
                }
            }
        }
    }
    let worst = match max {
        Some((after, member, window)) => format!(
            "{after} ({member} on node {}, {})",
            window.minority, window.kind
        ),
        None => "none".to_owned(),
    };
    println!(
        "partitions={} minority_members={measured} minority_last_handout_ms={worst} \
         session_ms={session_ms}{}",
        windows.len(),
        if held {
            ""
        } else {
            " VIOLATION: handed out past the session"
        }
    );
    held
}
