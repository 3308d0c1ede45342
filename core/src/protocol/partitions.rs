//! The member's partitions, and what it derives from them kept up to date
//! one partition at a time: the partitions' deadlines in time order, which
//! ones fetch, are ready to commit from, have something to commit, hold a
//! claim, could start fetching, and how often what the member publishes
//! changed.
//!
//! Every derived value is a function of one partition's state
//! ([`Derived::of`]); nothing here decides anything. A partition handed out
//! for change ([`Partitions::get_mut`], [`Partitions::insert`],
//! [`Partitions::remove`]) is noted, and [`Partitions::refresh`] works out
//! again what the noted ones derive. So an input that touches one partition
//! costs the same whether the member holds ten partitions or ten thousand,
//! and the timer table still reads every deadline from the state it comes
//! from.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::partition::{Fetch, OwnedStep, PartitionState, PartitionTimer, Phase};
use crate::types::{FencingToken, TopicPartition};

/// What the member reads of one partition's state as a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Derived {
    /// The partition's deadlines, by [`PartitionTimer`] (stall, retry,
    /// drain end).
    timers: [Option<Instant>; 3],
    /// Messages flow to the application (the lease's end matters).
    fetching: bool,
    /// Owned and ready: the commit interval's end matters.
    ready: bool,
    /// Past its claim (owned or releasing): the session must be confirmed.
    holds: bool,
    /// Owned and fetching: counts towards a settled member.
    settled: bool,
    /// Owned, with processed messages past the committed offset: the
    /// commit interval's end looks at it.
    uncommitted: bool,
    /// Owned and ready but not fetching: the lease decides whether it
    /// starts.
    startable: bool,
    /// What [`super::Member::owned`] says of it.
    owned: Option<FencingToken>,
    /// What [`super::Member::fetching`] says of it.
    feeding: Option<FencingToken>,
}

/// The partition timers, in the order of [`Derived::timers`].
const TIMERS: [PartitionTimer; 3] = [
    PartitionTimer::Stall,
    PartitionTimer::Retry,
    PartitionTimer::DrainEnd,
];

impl Derived {
    fn of(state: &PartitionState, stall_threshold: Duration) -> Derived {
        let mut timers = [None; 3];
        state.timers(stall_threshold, |at, timer| {
            timers[timer as usize] = Some(at);
        });
        let ready = state.phase == Phase::Owned(OwnedStep::Ready);
        let fetching = state.fetch == Fetch::Fetching;
        Derived {
            timers,
            fetching,
            ready,
            holds: !matches!(state.phase, Phase::Claiming(_)),
            settled: fetching && matches!(state.phase, Phase::Owned(_)),
            uncommitted: matches!(state.phase, Phase::Owned(_)) && state.commit_due().is_some(),
            startable: ready
                && state.token.is_some()
                && matches!(state.fetch, Fetch::Idle | Fetch::Stopped | Fetch::Suspended),
            owned: match state.phase {
                Phase::Owned(_) | Phase::Releasing(_) => state.token,
                Phase::Claiming(_) => None,
            },
            feeding: state.token.filter(|_| fetching),
        }
    }
}

/// The member's partitions with what it derives from them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Partitions {
    states: BTreeMap<TopicPartition, PartitionState>,
    /// What each partition derived when last refreshed.
    derived: BTreeMap<TopicPartition, Derived>,
    /// Partitions handed out for change since the last refresh (perhaps
    /// more than once).
    dirty: Vec<TopicPartition>,
    /// Every partition deadline, earliest first.
    deadlines: BTreeSet<(Instant, TopicPartition, PartitionTimer)>,
    /// The partitions a lease that allows fetching would start or resume.
    startable: BTreeSet<TopicPartition>,
    /// The owned partitions with processed messages not yet committed.
    uncommitted: BTreeSet<TopicPartition>,
    fetching: usize,
    ready: usize,
    holding: usize,
    settled: usize,
    /// Grows whenever what `owned`, `fetching` or `is_settled` say may
    /// have changed.
    changes: u64,
}

impl Partitions {
    pub fn len(&self) -> usize {
        self.states.len()
    }

    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    pub fn contains_key(&self, partition: &TopicPartition) -> bool {
        self.states.contains_key(partition)
    }

    pub fn get(&self, partition: &TopicPartition) -> Option<&PartitionState> {
        self.states.get(partition)
    }

    /// The state of `partition`, to change: noted for the next refresh.
    pub fn get_mut(&mut self, partition: &TopicPartition) -> Option<&mut PartitionState> {
        let state = self.states.get_mut(partition)?;
        self.dirty.push(partition.clone());
        Some(state)
    }

    /// The state of `partition`, for a change that nothing derived reads
    /// unless `noted` says so afterwards (an acknowledgement moves the
    /// processed offset at every message, and only the first one past a
    /// commit changes what is derived): not noted by itself.
    pub fn get_mut_unnoted(&mut self, partition: &TopicPartition) -> Option<&mut PartitionState> {
        self.states.get_mut(partition)
    }

    /// Notes `partition` for the next refresh.
    pub fn note(&mut self, partition: &TopicPartition) {
        self.dirty.push(partition.clone());
    }

    pub fn insert(&mut self, partition: TopicPartition, state: PartitionState) {
        self.dirty.push(partition.clone());
        self.states.insert(partition, state);
    }

    pub fn remove(&mut self, partition: &TopicPartition) -> Option<PartitionState> {
        let state = self.states.remove(partition)?;
        self.dirty.push(partition.clone());
        Some(state)
    }

    /// Every partition, leaving none.
    pub fn take_all(&mut self) -> BTreeMap<TopicPartition, PartitionState> {
        let changes = self.changes + u64::from(!self.states.is_empty());
        let states = std::mem::take(&mut self.states);
        *self = Partitions {
            changes,
            ..Partitions::default()
        };
        states
    }

    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &PartitionState)> {
        self.states.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &TopicPartition> {
        self.states.keys()
    }

    /// Works out again what the partitions noted since the last refresh
    /// derive.
    pub fn refresh(&mut self, stall_threshold: Duration) {
        if self.dirty.is_empty() {
            return;
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for partition in dirty.drain(..) {
            let new = self
                .states
                .get(&partition)
                .map(|state| Derived::of(state, stall_threshold));
            let old = match new {
                Some(new) => self.derived.insert(partition.clone(), new),
                None => self.derived.remove(&partition),
            };
            if old.is_some() != new.is_some() {
                // One more or one fewer: `is_settled` may say otherwise.
                self.changes += 1;
            }
            if old != new {
                self.apply(&partition, old.unwrap_or_default(), new.unwrap_or_default());
            }
        }
        self.dirty = dirty;
    }

    fn apply(&mut self, partition: &TopicPartition, old: Derived, new: Derived) {
        for ((kind, was), now) in TIMERS.into_iter().zip(old.timers).zip(new.timers) {
            if was != now {
                if let Some(at) = was {
                    self.deadlines.remove(&(at, partition.clone(), kind));
                }
                if let Some(at) = now {
                    self.deadlines.insert((at, partition.clone(), kind));
                }
            }
        }
        let count = |n: &mut usize, was: bool, now: bool| {
            *n = *n + usize::from(now) - usize::from(was);
        };
        count(&mut self.fetching, old.fetching, new.fetching);
        count(&mut self.ready, old.ready, new.ready);
        count(&mut self.holding, old.holds, new.holds);
        count(&mut self.settled, old.settled, new.settled);
        for (set, was, now) in [
            (&mut self.startable, old.startable, new.startable),
            (&mut self.uncommitted, old.uncommitted, new.uncommitted),
        ] {
            if was != now {
                if now {
                    set.insert(partition.clone());
                } else {
                    set.remove(partition);
                }
            }
        }
        if (old.owned, old.feeding, old.settled) != (new.owned, new.feeding, new.settled) {
            self.changes += 1;
        }
    }

    /// Whether nothing awaits a refresh.
    pub fn is_fresh(&self) -> bool {
        self.dirty.is_empty()
    }

    /// The partition deadlines in time order: when, whose, what for.
    pub fn deadlines(&self) -> impl Iterator<Item = (Instant, &TopicPartition, PartitionTimer)> {
        self.deadlines
            .iter()
            .map(|(at, partition, timer)| (*at, partition, *timer))
    }

    /// Whether any partition fetches.
    pub fn any_fetching(&self) -> bool {
        self.fetching > 0
    }

    /// Whether any partition is owned and ready to commit from.
    pub fn any_ready(&self) -> bool {
        self.ready > 0
    }

    /// Whether any partition is past its claim.
    pub fn any_holding(&self) -> bool {
        self.holding > 0
    }

    /// How many partitions are owned and fetching.
    pub fn settled_count(&self) -> usize {
        self.settled
    }

    /// The partitions a lease that allows fetching would start or resume,
    /// in order.
    pub fn startable(&self) -> Vec<TopicPartition> {
        self.startable.iter().cloned().collect()
    }

    /// The owned partitions with processed messages not yet committed, in
    /// order.
    pub fn uncommitted(&self) -> Vec<TopicPartition> {
        self.uncommitted.iter().cloned().collect()
    }

    /// A count that grows whenever what [`super::Member::owned`],
    /// [`super::Member::fetching`] or [`super::Member::is_settled`] say
    /// may have changed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// The states of every partition, to change, each noted.
    pub fn iter_mut_noted(
        &mut self,
    ) -> impl Iterator<Item = (&TopicPartition, &mut PartitionState)> {
        let dirty = &mut self.dirty;
        self.states.iter_mut().inspect(move |(partition, _)| {
            dirty.push((*partition).clone());
        })
    }

    /// Whether what is derived matches the states, worked out from
    /// scratch (the simulator checks it after every step); the first
    /// difference otherwise.
    #[cfg(feature = "sim")]
    pub fn check(&self, stall_threshold: Duration) -> Result<(), String> {
        if !self.dirty.is_empty() {
            return Err(format!("{} partitions await a refresh", self.dirty.len()));
        }
        let mut fresh = Partitions {
            states: self.states.clone(),
            dirty: self.states.keys().cloned().collect(),
            ..Partitions::default()
        };
        fresh.refresh(stall_threshold);
        let ours = (
            &self.derived,
            &self.deadlines,
            &self.startable,
            &self.uncommitted,
            (self.fetching, self.ready, self.holding, self.settled),
        );
        let theirs = (
            &fresh.derived,
            &fresh.deadlines,
            &fresh.startable,
            &fresh.uncommitted,
            (fresh.fetching, fresh.ready, fresh.holding, fresh.settled),
        );
        if ours != theirs {
            return Err(format!(
                "derived values differ from the states: kept {ours:?}, worked out {theirs:?}"
            ));
        }
        Ok(())
    }
}
