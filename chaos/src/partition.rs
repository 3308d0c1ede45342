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
use std::time::{Duration, Instant};

use crate::lines::wall_ms;
use crate::run::Run;
use crate::store::services;
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

impl Run {
    /// Cuts the links of a `kind` partition for `ms`, then heals them.
    pub async fn partition(
        &mut self,
        kind: PartitionKind,
        pick: u8,
        ms: u64,
    ) -> Result<(), String> {
        let service = self.store.service();
        let leader = self.wait_for_leader().await?;
        // The follower the partition is about: the one more members are
        // connected to alone, so that the minority side has some; the
        // seed's pick between equals.
        let followers: Vec<u8> = (1..=3).filter(|n| *n != leader).collect();
        let pick = match self
            .alone_on(followers[0])
            .len()
            .cmp(&self.alone_on(followers[1]).len())
        {
            std::cmp::Ordering::Greater => 0,
            std::cmp::Ordering::Less => 1,
            std::cmp::Ordering::Equal => pick,
        };
        let (links, minority) = kind.plan(leader, pick);
        for (a, b) in &links {
            services(&["link", service, "cut", &a.to_string(), &b.to_string()]).await?;
        }
        let from = wall_ms();
        let members = self.alone_on(minority);
        println!(
            "          leader {leader}, node {minority} without a quorum{}",
            if members.is_empty() {
                String::new()
            } else {
                format!(", connected to it alone: {}", members.join(" "))
            }
        );
        let majority_from = Arc::new(OnceLock::new());
        match kind {
            PartitionKind::IsolateLeader => {
                let seen = majority_from.clone();
                tokio::spawn(async move {
                    if let Some(at) = new_leader_seen(service, leader, from + ms).await {
                        let _ = seen.set(at);
                    }
                });
            }
            PartitionKind::Split | PartitionKind::CutFollower => {
                let _ = majority_from.set(from);
            }
        }
        self.partitions.push(Window {
            kind,
            from,
            until: from + ms,
            minority,
            members,
            majority_from,
        });
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            if let Err(e) = services(&["link", service, "heal"]).await {
                eprintln!("chaos: {e}");
            }
        });
        Ok(())
    }

    /// The live members connected to `node` alone.
    fn alone_on(&mut self, node: u8) -> Vec<String> {
        self.members
            .iter_mut()
            .filter(|(_, r)| r.killed_at.is_none() && r.node == Some(node))
            .filter_map(|(id, r)| (!r.has_ended()).then(|| id.clone()))
            .collect()
    }

    /// The node that leads the store, once exactly one does (an election
    /// may be under way after an earlier fault): 30 s at most.
    pub async fn wait_for_leader(&self) -> Result<u8, String> {
        let service = self.store.service();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(n) = services(&["leader", service]).await {
                return n
                    .parse()
                    .map_err(|_| format!("`scripts/services leader {service}` said {n:?}"));
            }
            if Instant::now() > deadline {
                return Err(format!("no node of {service} led for 30 s"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The nodes without a quorum now (a partition's, until its heal).
    pub fn minority_now(&self) -> Vec<u8> {
        let now = wall_ms();
        self.partitions
            .iter()
            .filter(|w| w.from <= now && now < w.until)
            .map(|w| w.minority)
            .collect()
    }
}

/// When (wall ms) a node other than `old` was first seen leading
/// `service`, polled until `until`; `None` if none was.
async fn new_leader_seen(service: &'static str, old: u8, until: u64) -> Option<u64> {
    while wall_ms() < until {
        let asked_at = wall_ms();
        if let Ok(n) = services(&["leader", service]).await {
            if n.parse::<u8>().is_ok_and(|n| n != old) {
                // It led when it was asked, or sooner.
                return Some(asked_at);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
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
