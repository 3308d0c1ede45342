//! The search: depth first over the states, each told apart by its
//! fingerprint, with the convergence of every state reached followed and
//! remembered.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use super::model::{Budget, Model, Move, Msg};
use super::state::State;
use super::{replay, Counterexample, ExploreReport};

/// A hasher for keys that are hashes already.
#[derive(Default)]
pub(super) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 = value as u64;
    }
}

pub(super) type Keyed<V> = HashMap<u128, V, BuildHasherDefault<Prehashed>>;

/// A state being expanded: its steps, and the next one to take.
pub(super) struct Frame {
    pub(super) index: u32,
    pub(super) depth: u32,
    pub(super) state: State,
    pub(super) moves: Vec<Move>,
    pub(super) next: usize,
}

/// The budgets and depths a state was visited with. Most states are
/// visited once: the first is kept inline.
pub(super) struct Visits {
    pub(super) first: (Budget, u32),
    pub(super) more: Vec<(Budget, u32)>,
}

pub(super) struct Search<'m> {
    pub(super) model: &'m Model,
    /// Every state visited, by fingerprint (without the fault budget), with
    /// the budgets (and depths) it was visited with.
    pub(super) visited: Keyed<Visits>,
    /// For each state visited: the state it was reached from and the step.
    pub(super) parents: Vec<(u32, u32)>,
    /// Time to converge from each state whose continuation was followed,
    /// by fingerprint (without the fault budget).
    pub(super) convergence: Keyed<Duration>,
    pub(super) stack: Vec<Frame>,
    pub(super) report: ExploreReport,
    pub(super) started: Instant,
}

impl<'m> Search<'m> {
    pub(super) fn new(model: &'m Model) -> Search<'m> {
        Search {
            model,
            visited: Keyed::default(),
            parents: Vec::new(),
            convergence: Keyed::default(),
            stack: Vec::new(),
            report: ExploreReport::default(),
            started: Instant::now(),
        }
    }

    pub(super) fn run(&mut self) {
        let (state, problems) = match State::initial(self.model) {
            Ok(initial) => initial,
            Err(detail) => {
                self.fail("valid configuration", detail, u32::MAX, None, Vec::new());
                return;
            }
        };
        if let Some((property, detail)) = problems.into_iter().next() {
            self.fail(property, detail, u32::MAX, None, Vec::new());
            return;
        }
        if !self.admit(state, u32::MAX, 0, 0) {
            return;
        }
        // Depth first: memory holds the visited set and one path of
        // states, where breadth first would hold a whole frontier of them.
        while let Some(frame) = self.stack.last_mut() {
            let Some(&mv) = frame.moves.get(frame.next) else {
                self.stack.pop();
                continue;
            };
            let choice = frame.next as u32;
            frame.next += 1;
            let (parent, depth) = (frame.index, frame.depth);
            if let Move::Deliver(i) = mv {
                if let Some(Msg::Batch { .. }) = frame.state.net.get(i).map(|f| &f.msg) {
                    self.report.batch_deliveries += 1;
                }
            }
            let mut next = frame.state.clone();
            let problems = next.apply(self.model, mv);
            self.report.transitions += 1;
            if let Some((property, detail)) = problems.into_iter().next() {
                self.fail(property, detail, parent, Some(choice), Vec::new());
                return;
            }
            if !self.admit(next, parent, choice, depth + 1) {
                return;
            }
        }
    }

    /// Records a state reached from state `parent` by its step `choice`,
    /// unless it was visited already; checks its convergence and queues it
    /// for expansion within the bounds. `false` once a violation is found.
    pub(super) fn admit(&mut self, state: State, parent: u32, choice: u32, depth: u32) -> bool {
        let (core, keys) = state.fingerprint(self.model);
        // A state visited with at least as much of every fault left (and,
        // under a depth bound, no deeper) has every future this one has.
        let bounded = self.model.config.max_depth.is_some();
        let seen = (state.budget, if bounded { depth } else { 0 });
        let covers = |(b, d): &(Budget, u32)| b.covers(&seen.0) && (!bounded || *d <= seen.1);
        match self.visited.get_mut(&core) {
            Some(visits) => {
                if covers(&visits.first) || visits.more.iter().any(covers) {
                    return true;
                }
                visits.more.push(seen);
            }
            None => {
                self.visited.insert(
                    core,
                    Visits {
                        first: seen,
                        more: Vec::new(),
                    },
                );
            }
        }
        let index = self.parents.len() as u32;
        self.parents.push((parent, choice));
        self.report.states += 1;
        self.report.max_depth = self.report.max_depth.max(depth);
        let every = self.model.config.progress_every;
        if every > 0 && self.report.states.is_multiple_of(every) {
            eprintln!(
                "explore: {} states, {} transitions, depth {}, {:.0?}",
                self.report.states,
                self.report.transitions,
                depth,
                self.started.elapsed()
            );
        }
        if self.model.config.convergence {
            if let Err((detail, continuation)) = self.converges(&state, core, keys) {
                self.fail("convergence", detail, index, None, continuation);
                return false;
            }
        }
        let deep = self.model.config.max_depth.is_some_and(|d| depth >= d);
        let full = self
            .model
            .config
            .max_states
            .is_some_and(|m| self.report.states >= m);
        if deep || full {
            self.report.cut += 1;
        } else {
            let moves = state.moves(self.model);
            self.stack.push(Frame {
                index,
                depth,
                state,
                moves,
                next: 0,
            });
        }
        true
    }

    /// Follows the fault-free continuation from `state` until it converges
    /// or meets a state whose time to converge is known, and remembers the
    /// time for every state on the way. `Err` with why and the
    /// continuation's steps when it does not converge within the bound.
    pub(super) fn converges(
        &mut self,
        state: &State,
        core: u128,
        keys: Vec<u128>,
    ) -> Result<(), (String, Vec<String>)> {
        if self.convergence.contains_key(&core) {
            return Ok(());
        }
        let model = self.model;
        let bound = model.config.convergence_bound();
        let mut s = state.clone();
        let start = s.now;
        let mut trail: Vec<(u128, Instant)> = Vec::new();
        let (mut key, mut keys) = (core, keys);
        let total = loop {
            if let Some(&rest) = self.convergence.get(&key) {
                break s.now.saturating_duration_since(start) + rest;
            }
            trail.push((key, s.now));
            let waited = s.now.saturating_duration_since(start);
            if s.converged(model).is_ok() {
                break waited;
            }
            if waited > bound || trail.len() > 100_000 {
                break Duration::MAX;
            }
            let mv = s.calm_move(&keys);
            let problems = s.apply(model, mv);
            self.report.lookahead_steps += 1;
            if let Some((property, detail)) = problems.into_iter().next() {
                return Err(
                    self.explain(state, format!("{property} violated on the way: {detail}"))
                );
            }
            (key, keys) = s.fingerprint(model);
        };
        if total > bound {
            let why = match state.clone().continue_calmly(model, &mut |_, _| {}) {
                Err(why) => why,
                Ok(took) => format!("converged only after {took:?}, beyond {bound:?}"),
            };
            return Err(self.explain(state, why));
        }
        self.report.slowest_convergence = self.report.slowest_convergence.max(total);
        for (key, at) in trail {
            let rest = total.saturating_sub(at.saturating_duration_since(start));
            self.convergence.insert(key, rest);
        }
        Ok(())
    }

    /// `detail` with the fault-free continuation from `state`, described.
    pub(super) fn explain(&self, state: &State, detail: String) -> (String, Vec<String>) {
        let mut steps = Vec::new();
        let mut s = state.clone();
        let model = self.model;
        let _ = s.continue_calmly(model, &mut |s, mv| steps.push(s.describe(model, mv)));
        (detail, steps)
    }

    /// Records the violation found in the state `index` (or after its step
    /// `choice`), with the path that leads there.
    pub(super) fn fail(
        &mut self,
        property: &'static str,
        detail: String,
        index: u32,
        choice: Option<u32>,
        continuation: Vec<String>,
    ) {
        let mut moves = Vec::new();
        let mut at = index;
        while at != u32::MAX {
            let (parent, mv) = self.parents[at as usize];
            if parent != u32::MAX {
                moves.push(mv as usize);
            }
            at = parent;
        }
        moves.reverse();
        if let Some(choice) = choice {
            moves.push(choice as usize);
        }
        let steps = match replay(&self.model.config, &moves) {
            Ok(replayed) => replayed.steps,
            Err(error) => vec![format!("(the path does not replay: {error})")],
        };
        self.report.violation = Some(Counterexample {
            property,
            detail,
            moves,
            steps,
            continuation,
        });
    }
}
