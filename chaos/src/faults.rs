//! Carrying out the faults of the schedule on the run's processes and
//! store (network partitions between a 3-node store's nodes among them),
//! and letting everything go at the end.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::partition::{PartitionKind, Window};
use crate::run::Run;
use crate::schedule::Fault;
use crate::signals::{signal, signal_pid};
use crate::store::services;
use tenure_chaos_lines::wall_ms;

impl Run {
    /// Carries out `fault`; a pause, a cut and a leader's absence end by
    /// themselves later.
    pub async fn inject(&mut self, fault: &Fault) -> Result<(), String> {
        match fault {
            Fault::Kill(id) => {
                let running = self.running(id)?;
                signal(&running.process, "KILL");
                running.killed_at = Some(wall_ms());
                signal(&running.proxy, "KILL");
            }
            Fault::Pause(id, ms) | Fault::Cut(id, ms) => {
                let running = self.running(id)?;
                // A cut freezes the member's proxy to the store, a pause
                // the member itself.
                let target = match fault {
                    Fault::Cut(..) => &running.proxy,
                    _ => &running.process,
                };
                let pid = target.id();
                signal(target, "STOP");
                let ms = *ms;
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    signal_pid(pid, "CONT");
                });
            }
            Fault::Join(id) => self.start_member(id).await?,
            Fault::Leave(id) => signal(&self.running(id)?.process, "TERM"),
            Fault::RestartNode(n) => {
                let service = self.store.service();
                let from = wall_ms();
                if self.store.nodes == 1 {
                    services(&["restart", service]).await?;
                    self.outages.push((from, wall_ms()));
                } else {
                    services(&["node", service, "restart", &n.to_string()]).await?;
                }
            }
            Fault::KillLeader(ms) => {
                let service = self.store.service();
                let leader = self.wait_for_leader().await?.to_string();
                services(&["node", service, "kill", &leader]).await?;
                let ms = *ms;
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    if let Err(e) = services(&["node", service, "start", &leader]).await {
                        eprintln!("chaos: {e}");
                    }
                });
            }
            Fault::Partition(kind, pick, ms) => self.partition(*kind, *pick, *ms).await?,
            Fault::Upgrade(id) => self.upgrade(id).await?,
        }
        Ok(())
    }

    /// The member the schedule names, which must be running: one that
    /// ended on its own (a crash) stops the run, which says so.
    fn running(&mut self, id: &str) -> Result<&mut crate::run::Running, String> {
        let running = self
            .members
            .get_mut(id)
            .ok_or(format!("the schedule names {id}, which is not running"))?;
        match running.process.try_wait() {
            Ok(None) => Ok(running),
            Ok(Some(status)) => Err(format!(
                "member {id} ended on its own ({status}) while the schedule had it running"
            )),
            Err(e) => Err(format!("cannot look at member {id}'s process: {e}")),
        }
    }

    /// Lets everything go: continues whatever is stopped, heals every
    /// partition and brings every store node back.
    pub async fn let_go(&mut self) -> Result<(), String> {
        for running in self.members.values_mut() {
            if running.killed_at.is_none() && !running.has_ended() {
                signal(&running.process, "CONT");
                signal(&running.proxy, "CONT");
            }
        }
        if self.store.nodes == 3 {
            let service = self.store.service();
            if !self.partitions.is_empty() {
                services(&["link", service, "heal"]).await?;
            }
            for n in 1..=3u8 {
                services(&["node", service, "start", &n.to_string()]).await?;
            }
        }
        Ok(())
    }
}

/// Network partitions between a 3-node store's nodes (see
/// [`crate::partition`]).
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
