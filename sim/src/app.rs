//! The one simulated application both the simulator ([`crate::world`]) and
//! the explorer ([`crate::explore`]) drive: what a member's application
//! holds of each partition as the member starts, suspends, resumes and
//! stops its fetching. How it processes what it holds (in timed batches,
//! or eagerly) is each driver's own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tenure_core::{
    FencingToken, FetchCommand, FetchFrom, Member, Offset, Progress, TopicPartition,
};

/// What an application tells its member.
#[derive(Clone, Debug)]
pub(crate) enum Told {
    /// Everything of `partition` up to `offset` is processed.
    Processed {
        partition: TopicPartition,
        token: FencingToken,
        offset: Offset,
    },
    /// Everything of `partition` below `next` is processed and, above
    /// it, what `progress` names (batches finished out of order).
    Progressed {
        partition: TopicPartition,
        token: FencingToken,
        next: Offset,
        progress: Progress,
    },
    /// A stopped partition has nothing outstanding any more.
    Drained {
        partition: TopicPartition,
        token: FencingToken,
    },
}

impl Told {
    /// Tells `member`, at `now`.
    pub(crate) fn tell(self, member: &mut Member, now: Instant) {
        match self {
            Told::Processed {
                partition,
                token,
                offset,
            } => member.processed(now, &partition, token, offset),
            Told::Progressed {
                partition,
                token,
                next,
                progress,
            } => member.progressed(now, &partition, token, next, progress),
            Told::Drained { partition, token } => member.drained(now, &partition, token),
        }
    }
}

/// A partition's claim and the next offset to process.
pub(crate) type Position = (FencingToken, Offset);

/// What a member's application holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Holdings {
    /// Partitions being fetched: the claim and the next offset.
    pub(crate) fetching: BTreeMap<TopicPartition, Position>,
    /// Partitions held while the member's session may be lapsing: not
    /// consumed, the position kept for a resume.
    pub(crate) suspended: BTreeMap<TopicPartition, Position>,
    /// Partitions told to stop and not drained yet.
    pub(crate) stopping: BTreeSet<(TopicPartition, FencingToken)>,
}

/// What a fetch command changed, for the driver to follow up.
pub(crate) enum Applied {
    /// `partition` is fetched (again): started, or resumed.
    Fetching(TopicPartition),
    /// `partition` under the claim `token` waits to be drained.
    Stopping(TopicPartition, FencingToken),
    /// Nothing to follow up (a suspension).
    Held,
}

impl Holdings {
    /// Carries out `command`; `newest` is where a partition's log ends,
    /// for a start from the newest offset.
    pub(crate) fn apply(
        &mut self,
        command: FetchCommand,
        newest: impl FnOnce(&TopicPartition) -> Offset,
    ) -> Applied {
        match command {
            FetchCommand::Start {
                partition,
                from,
                token,
                ..
            } => {
                let start = match from {
                    FetchFrom::Offset(o) => o,
                    FetchFrom::Newest => newest(&partition),
                    // The simulated members start at the oldest offset
                    // (`FetchFrom::Unset` needs an application that seeks,
                    // which the simulation has not).
                    _ => 0,
                };
                self.fetching.insert(partition.clone(), (token, start));
                Applied::Fetching(partition)
            }
            FetchCommand::Stop { partition, token } => {
                for held in [&mut self.fetching, &mut self.suspended] {
                    if held.get(&partition).is_some_and(|(t, _)| *t == token) {
                        held.remove(&partition);
                    }
                }
                self.stopping.insert((partition.clone(), token));
                Applied::Stopping(partition, token)
            }
            FetchCommand::Suspend { partition, token } => {
                move_position(&mut self.fetching, &mut self.suspended, &partition, token);
                Applied::Held
            }
            FetchCommand::Resume { partition, token } => {
                move_position(&mut self.suspended, &mut self.fetching, &partition, token);
                Applied::Fetching(partition)
            }
        }
    }

    /// Whether the application still holds `partition` undrained by a
    /// stop: fetching it, or holding it suspended.
    pub(crate) fn holds(&self, partition: &TopicPartition) -> bool {
        self.fetching.contains_key(partition) || self.suspended.contains_key(partition)
    }

    /// Forgets everything: the process is gone.
    pub(crate) fn clear(&mut self) {
        *self = Holdings::default();
    }
}

/// Moves the position of `partition` under the claim `token` from one of
/// an application's holdings to another (a suspended fetch and back).
fn move_position(
    from: &mut BTreeMap<TopicPartition, Position>,
    to: &mut BTreeMap<TopicPartition, Position>,
    partition: &TopicPartition,
    token: FencingToken,
) {
    if from.get(partition).is_some_and(|(t, _)| *t == token) {
        if let Some(position) = from.remove(partition) {
            to.insert(partition.clone(), position);
        }
    }
}
