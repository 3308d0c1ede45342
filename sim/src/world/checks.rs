//! The guarantees checked as the world runs and at its end: exclusive
//! ownership, leases within sessions, convergence, and the final ledgers.

use crate::check::{self, Seen};

use super::parts::World;

impl World {
    /// The members running now, with the sessions their clients hold.
    fn running(&self) -> impl Iterator<Item = Seen<'_>> + Clone {
        let now = self.now;
        self.nodes
            .iter()
            .filter_map(move |node| match &node.member {
                Some(member) if node.running(now) => Some(Seen {
                    member,
                    session: node.session,
                }),
                _ => None,
            })
    }

    /// Every step: no two members own or fetch one partition at once, and
    /// no member's lease runs past what the store keeps of its session.
    pub(super) fn check_step(&mut self) {
        let problems = check::every_step(&self.store, &self.layout, self.now, self.running());
        for (property, problem) in problems {
            self.violation(property, problem);
        }
    }

    /// Whether every partition is owned and fetched by the member the final
    /// assignment names.
    pub(super) fn converged(&self) -> Result<(), String> {
        let live: Vec<Seen<'_>> = self
            .nodes
            .iter()
            .filter(|node| !node.gone)
            .filter_map(|node| {
                node.member.as_ref().map(|member| Seen {
                    member,
                    session: node.session,
                })
            })
            .collect();
        check::converged(
            &self.store,
            &self.layout,
            &self.config.strategy,
            &self.counts,
            &live,
        )
    }

    pub(super) fn check_convergence(&mut self) {
        if self.report.converged_after.is_some() {
            return;
        }
        if self.converged().is_ok() {
            self.report.converged_after = Some(self.now.saturating_duration_since(self.quiet_at));
        }
    }

    pub(super) fn final_checks(&mut self) {
        if let Some(detail) = self.operator.judge(&self.config, self.start) {
            self.violation(
                "the operator's tooling sees every commit applied before it asked",
                detail,
            );
        }
        let bound = self.config.convergence_bound();
        match self.report.converged_after {
            Some(after) if after <= bound => {}
            Some(after) => self.violation(
                "convergence",
                format!("converged {after:?} after the chaos, beyond the bound {bound:?}"),
            ),
            None => {
                let why = self.converged().err().unwrap_or_default();
                self.violation("convergence", format!("never converged: {why}"));
            }
        }
        let mut messages = 0u64;
        let mut duplicates = 0u64;
        let mut lost = None;
        let mut behind = None;
        for (partition, hw) in &self.hw {
            let counts = self
                .processed
                .get(partition)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            messages += *hw as u64;
            for offset in 0..*hw {
                match counts.get(offset as usize).copied().unwrap_or(0) {
                    0 => {
                        lost.get_or_insert((partition.clone(), offset));
                    }
                    n => duplicates += u64::from(n - 1),
                }
            }
            let committed = self.committed.get(partition).copied().unwrap_or(0);
            if committed != *hw {
                behind.get_or_insert((partition.clone(), committed, *hw));
            }
        }
        self.report.messages = messages;
        self.report.duplicates = duplicates;
        if let Some((partition, offset)) = lost {
            self.violation(
                "no lost messages",
                format!("{partition} offset {offset} was never processed"),
            );
        }
        if let Some((partition, committed, hw)) = behind {
            self.violation(
                "offsets committed",
                format!("{partition} committed {committed}, end offset {hw}"),
            );
        }
    }
}
