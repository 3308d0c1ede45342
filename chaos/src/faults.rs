//! Carrying out the faults of the schedule on the run's processes and
//! store, and letting everything go at the end.

use std::time::Duration;

use crate::lines::wall_ms;
use crate::run::Run;
use crate::schedule::Fault;
use crate::signals::{signal, signal_pid};
use crate::store::services;

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
