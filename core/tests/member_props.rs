//! Property tests of the member state machine: random interleavings of
//! session changes, membership, store results (success, NodeExists, NoNode,
//! lost connections, fencing, expiry, corrupt data), application progress
//! and time, with the member's safety rules checked after every step.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tenure_core::assignment::{Assignment, AssignmentStrategy, PartitionCounts};
use tenure_core::model::adapter;
use tenure_core::protocol::RegisterOutcome;
use tenure_core::{
    AppEvent, ClaimOutcome, Config, Error, Event, FencingToken, FetchCommand, Member, MemberId,
    MemberInfo, Offset, RequestId, SessionId, StoreError, StoreOp, StoreRequest, TopicPartition,
};
use tenure_core::{Committed, Output};

const STRATEGY: &str = "fixed";
const OURS: &str = "m1";
const POOL: [&str; 4] = ["m0", "m1", "m2", "m3"];
const TOPICS: [&str; 2] = ["t", "u"];

/// A test strategy: partitions in topic order are dealt out to the sorted
/// members in turn.
#[derive(Debug)]
struct Deal;

impl AssignmentStrategy for Deal {
    fn name(&self) -> &str {
        STRATEGY
    }

    fn assign(&self, members: &[MemberInfo], partitions: &PartitionCounts) -> Assignment {
        let ids: Vec<&MemberId> = members
            .iter()
            .map(|m| &m.id)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut assignment = Assignment::new();
        if ids.is_empty() {
            return assignment;
        }
        let mut i = 0;
        for (topic, count) in partitions {
            for n in 0..*count {
                assignment.insert(TopicPartition::new(topic, n), ids[i % ids.len()].clone());
                i += 1;
            }
        }
        assignment
    }
}

fn mid(id: &str) -> MemberId {
    MemberId::new(id).unwrap()
}

fn info(id: &str, strategy: &str) -> MemberInfo {
    MemberInfo {
        id: mid(id),
        subscription: tenure_core::Subscription::Topics(
            TOPICS.iter().map(|t| (*t).to_owned()).collect(),
        ),
        strategy: strategy.to_owned(),
    }
}

#[derive(Clone, Debug)]
enum Op {
    Establish,
    Suspend(u16),
    Resume,
    Expire,
    MembersChanged,
    Counts(u32, u32),
    /// Answer pending request `pick` with outcome `outcome`; `extra` picks
    /// the member list, offsets and sessions.
    Answer {
        pick: usize,
        outcome: u8,
        extra: u8,
    },
    OwnerDeleted(u8),
    Processed(usize, u16),
    Drained(usize),
    Advance(u32),
    Shutdown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Establish),
        2 => any::<u16>().prop_map(Op::Suspend),
        2 => Just(Op::Resume),
        1 => Just(Op::Expire),
        3 => Just(Op::MembersChanged),
        3 => (0u32..4, 0u32..3).prop_map(|(a, b)| Op::Counts(a, b)),
        30 => (any::<usize>(), any::<u8>(), any::<u8>())
            .prop_map(|(pick, outcome, extra)| Op::Answer { pick, outcome, extra }),
        2 => any::<u8>().prop_map(Op::OwnerDeleted),
        8 => (any::<usize>(), any::<u16>()).prop_map(|(i, o)| Op::Processed(i, o)),
        4 => any::<usize>().prop_map(Op::Drained),
        8 => (0u32..15_000).prop_map(Op::Advance),
        1 => Just(Op::Shutdown),
    ]
}

/// Which rules to check beyond the ones that hold today.
#[derive(Clone, Copy, Default)]
struct Strict {
    /// After `handle_timeout(t)`, `poll_timeout()` is `None` or after `t`.
    timeouts: bool,
    /// A claim whose fetch was stopped is deleted only after `drained` or
    /// a reported drain timeout.
    drain_before_release: bool,
}

struct Sim {
    member: Member,
    t0: Instant,
    now: Instant,
    strict: Strict,
    session: Option<u64>,
    next_session: u64,
    /// Bumped on every expiry; requests remember the epoch they were sent in.
    epoch: u64,
    pending: Vec<(StoreRequest, u64)>,
    /// When each request was taken: the store (one node, its own leader)
    /// renews the session then if it answers.
    sent: HashMap<RequestId, Instant>,
    next_token: u64,
    /// Tokens of claims answered as ours under the current session.
    granted: BTreeMap<TopicPartition, BTreeSet<FencingToken>>,
    /// Tokens of claims from before an expiry.
    dead: BTreeSet<FencingToken>,
    fetching: BTreeMap<TopicPartition, FencingToken>,
    /// Fetches held while the session may be lapsing.
    suspended: BTreeMap<TopicPartition, FencingToken>,
    /// Stopped fetches the application has not drained yet.
    draining: Vec<(TopicPartition, FencingToken)>,
    /// Partitions reported as not drained in time.
    drain_timed_out: BTreeSet<TopicPartition>,
    released: BTreeSet<(TopicPartition, FencingToken)>,
    /// The final commit the first release of each claim carried: a
    /// release sent again (its answer lost) carries the same one, or none.
    release_commits: BTreeMap<(TopicPartition, FencingToken), Option<Offset>>,
    highest_sent: BTreeMap<(TopicPartition, FencingToken), Offset>,
    highest_acked: BTreeMap<(TopicPartition, FencingToken), Offset>,
    view: Vec<MemberInfo>,
    shutdown: bool,
}

impl Sim {
    fn new(seed: u64, strict: Strict) -> Sim {
        let t0 = Instant::now();
        let mut config = Config::new("g", OURS, TOPICS).unwrap();
        config = config.with_strategy(Arc::new(Deal));
        config = config.with_processing_timeout(Duration::from_secs(20));
        config = config.with_claim_stall_threshold(Duration::from_secs(30));
        Sim {
            member: Member::new(config, seed, t0).unwrap(),
            t0,
            now: t0,
            strict,
            session: None,
            next_session: 1,
            epoch: 0,
            pending: Vec::new(),
            sent: HashMap::new(),
            next_token: 1,
            granted: BTreeMap::new(),
            dead: BTreeSet::new(),
            fetching: BTreeMap::new(),
            suspended: BTreeMap::new(),
            draining: Vec::new(),
            drain_timed_out: BTreeSet::new(),
            released: BTreeSet::new(),
            release_commits: BTreeMap::new(),
            highest_sent: BTreeMap::new(),
            highest_acked: BTreeMap::new(),
            view: vec![info(OURS, STRATEGY)],
            shutdown: false,
        }
    }

    fn token(&mut self) -> FencingToken {
        self.next_token += 1;
        FencingToken(self.next_token)
    }

    /// Hands the member `event`, after the renewal a single store node
    /// vouches for with it.
    fn feed(&mut self, event: Event) -> Result<(), TestCaseError> {
        let sent = event.request_id().and_then(|id| self.sent.remove(&id));
        if let Some(renewal) = sent.and_then(|sent| adapter::renewal(sent, &event)) {
            self.member.handle_event(self.now, renewal);
        }
        self.member.handle_event(self.now, event);
        self.collect()
    }

    /// Hands the member one of its application's inputs.
    fn give(&mut self, input: impl FnOnce(&mut Member, Instant)) -> Result<(), TestCaseError> {
        input(&mut self.member, self.now);
        self.collect()
    }

    fn timeout(&mut self, at: Instant) -> Result<(), TestCaseError> {
        self.now = at;
        self.member.handle_timeout(at);
        self.collect()?;
        if self.strict.timeouts {
            let next = self.member.poll_timeout();
            prop_assert!(
                next.is_none_or(|n| n > at),
                "poll_timeout {:?} not after handle_timeout at {:?}",
                next.map(|n| n - self.t0),
                at - self.t0
            );
        }
        Ok(())
    }

    fn advance(&mut self, by: Duration) -> Result<(), TestCaseError> {
        let target = self.now + by;
        for _ in 0..10_000 {
            match self.member.poll_timeout() {
                Some(at) if at <= target => {
                    let at = at.max(self.now);
                    self.timeout(at)?;
                    if self.member.poll_timeout().is_some_and(|n| n <= at) {
                        // A timer the member does not act on (checked in
                        // strict mode); go on to the target.
                        break;
                    }
                }
                _ => break,
            }
        }
        self.timeout(target)
    }

    /// Takes every command and checks the safety rules on each.
    fn collect(&mut self) -> Result<(), TestCaseError> {
        // A drain that timed out is reported in the same step as the
        // release it allows: note it before checking that release.
        let outputs: Vec<Output> = std::iter::from_fn(|| match self.member.poll_output() {
            Output::Timeout(_) => None,
            output => Some(output),
        })
        .collect();
        for output in &outputs {
            if let Output::App(AppEvent::Problem(Error::DrainTimeout { partition, .. })) = output {
                self.drain_timed_out.insert(partition.clone());
            }
        }
        // In the order the member decided them: a stop reaches the fetcher
        // before the release that follows it reaches the store.
        for output in outputs {
            match output {
                Output::Fetch(fetch) => self.check_fetch(&fetch)?,
                Output::Store(command) => {
                    self.check(&command)?;
                    self.sent.insert(command.id, self.now);
                    self.pending.push((command, self.epoch));
                }
                _ => {}
            }
        }
        let fetching: BTreeMap<TopicPartition, FencingToken> = self
            .member
            .fetching()
            .map(|(p, t)| (p.clone(), t))
            .collect();
        prop_assert_eq!(
            &fetching,
            &self.fetching,
            "fetching() disagrees with commands"
        );
        Ok(())
    }

    fn check_fetch(&mut self, command: &FetchCommand) -> Result<(), TestCaseError> {
        match command {
            FetchCommand::Start {
                partition, token, ..
            } => {
                prop_assert!(
                    self.granted
                        .get(partition)
                        .is_some_and(|t| t.contains(token)),
                    "start of {:?} under {:?} without a successful claim",
                    partition,
                    token
                );
                prop_assert!(!self.dead.contains(token), "start under a dead token");
                prop_assert!(
                    !self.released.contains(&(partition.clone(), *token)),
                    "start after release"
                );
                prop_assert!(
                    !self.fetching.contains_key(partition),
                    "start of {:?} while fetching it",
                    partition
                );
                self.fetching.insert(partition.clone(), *token);
            }
            FetchCommand::Stop { partition, token } => {
                let stopped = self
                    .fetching
                    .remove(partition)
                    .or_else(|| self.suspended.remove(partition));
                prop_assert_eq!(
                    stopped,
                    Some(*token),
                    "stop of {:?} that was not fetching under that token",
                    partition
                );
                self.draining.push((partition.clone(), *token));
            }
            FetchCommand::Suspend { partition, token } => {
                prop_assert_eq!(
                    self.fetching.remove(partition),
                    Some(*token),
                    "suspend of {:?} that was not fetching under that token",
                    partition
                );
                self.suspended.insert(partition.clone(), *token);
            }
            FetchCommand::Resume { partition, token } => {
                prop_assert!(!self.dead.contains(token), "resume under a dead token");
                prop_assert_eq!(
                    self.suspended.remove(partition),
                    Some(*token),
                    "resume of {:?} that was not suspended under that token",
                    partition
                );
                self.fetching.insert(partition.clone(), *token);
            }
        }
        Ok(())
    }

    /// Checks a commit of `offset` to `partition` under `token` as it goes
    /// out, alone or carried by a release (`again`: the same release as
    /// before, sent again).
    fn check_commit(
        &mut self,
        partition: &TopicPartition,
        offset: Offset,
        token: FencingToken,
        again: bool,
    ) -> Result<(), TestCaseError> {
        let key = (partition.clone(), token);
        prop_assert!(
            self.granted
                .get(partition)
                .is_some_and(|t| t.contains(&token)),
            "commit of {:?} under {:?}, not a claim of ours",
            partition,
            token
        );
        prop_assert!(!self.dead.contains(&token), "commit under a dead token");
        prop_assert!(
            again || !self.released.contains(&key),
            "commit after release"
        );
        if let Some(sent) = self.highest_sent.get(&key) {
            prop_assert!(offset >= *sent, "commit {} after {}", offset, sent);
        }
        if let Some(acked) = self.highest_acked.get(&key) {
            prop_assert!(offset > *acked, "commit {} after acked {}", offset, acked);
        }
        self.highest_sent.insert(key, offset);
        Ok(())
    }

    fn check(&mut self, command: &StoreRequest) -> Result<(), TestCaseError> {
        match (&command.id, &command.op) {
            (
                _,
                StoreOp::CommitOffset {
                    partition,
                    offset,
                    token,
                    ..
                },
            ) => self.check_commit(partition, *offset, *token, false)?,
            (
                _,
                StoreOp::Release {
                    commit: Some(_),
                    token: None,
                    ..
                },
            ) => prop_assert!(
                false,
                "a release carries a commit without its claim's token"
            ),
            (
                _,
                StoreOp::Release {
                    partition,
                    token: Some(token),
                    commit,
                    ..
                },
            ) => {
                let key = (partition.clone(), *token);
                let first = *self.release_commits.entry(key).or_insert(*commit);
                if let Some(offset) = commit {
                    prop_assert_eq!(
                        first,
                        Some(*offset),
                        "a release of {:?} sent again carries another commit",
                        partition
                    );
                    let again = self.released.contains(&(partition.clone(), *token));
                    self.check_commit(partition, *offset, *token, again)?;
                }
                prop_assert!(!self.dead.contains(token), "release under a dead token");
                if self.strict.drain_before_release {
                    let undrained = self
                        .draining
                        .iter()
                        .any(|(p, t)| p == partition && t == token);
                    prop_assert!(
                        !undrained || self.drain_timed_out.contains(partition),
                        "release of {:?} before it drained",
                        partition
                    );
                }
                self.released.insert((partition.clone(), *token));
            }
            (_, StoreOp::Claim { partition, .. }) => {
                self.drain_timed_out.remove(partition);
            }
            _ => {}
        }
        Ok(())
    }

    fn members(&self, extra: u8) -> Vec<MemberInfo> {
        let mut members = vec![info(OURS, STRATEGY)];
        for (bit, id) in POOL.iter().enumerate() {
            if *id != OURS && extra & (1 << bit) != 0 {
                // Rarely, another member runs another strategy.
                let strategy = if extra & 0xC0 == 0xC0 {
                    "range"
                } else {
                    STRATEGY
                };
                members.push(info(id, strategy));
            }
        }
        if extra & 0x10 != 0 {
            members.reverse();
        }
        members
    }

    fn session_for(&self, extra: u8) -> SessionId {
        let current = self.session.unwrap_or(0);
        match extra % 3 {
            0 => SessionId(current),
            1 => SessionId(current.saturating_sub(1)),
            _ => SessionId(1_000 + u64::from(extra)),
        }
    }

    /// The answer to `command`; `outcome` picks which.
    fn answer(&mut self, command: &StoreRequest, epoch: u64, outcome: u8, extra: u8) -> Event {
        let live = epoch == self.epoch && self.session.is_some();
        match (&command.id, &command.op) {
            (id, StoreOp::Register { .. }) => Event::RegisterResult {
                id: *id,
                result: match outcome % 6 {
                    0..=2 => Ok(RegisterOutcome::Registered),
                    3 => Ok(RegisterOutcome::Exists {
                        session: self.session_for(extra),
                    }),
                    4 => Err(StoreError::ConnectionLoss),
                    _ => Err(StoreError::SessionExpired),
                },
            },
            (id, StoreOp::Deregister) => Event::DeregisterResult {
                id: *id,
                result: match outcome % 3 {
                    0 => Ok(()),
                    1 => Err(StoreError::ConnectionLoss),
                    _ => Err(StoreError::NoNode),
                },
            },
            (id, StoreOp::WatchMembers) => Event::MembersResult {
                id: *id,
                result: if outcome.is_multiple_of(5) {
                    Err(StoreError::ConnectionLoss)
                } else {
                    let members = self.members(extra);
                    self.view = members.clone();
                    Ok(members)
                },
            },
            (
                id,
                StoreOp::Claim {
                    partition,
                    read_offset,
                },
            ) => {
                // Asked for, the offset comes with the claim or not, read
                // or failed.
                let committed = match (read_offset, extra % 4) {
                    (false, _) | (true, 0) => None,
                    (true, 1) => Some(Ok(Some(Committed::at(i64::from(extra))))),
                    (true, 2) => Some(Ok(None)),
                    (true, _) => Some(Err(StoreError::ConnectionLoss)),
                };
                let result = match outcome % 10 {
                    0..=2 => Ok(ClaimOutcome::Created {
                        token: self.token(),
                        committed,
                    }),
                    3..=5 => Ok(ClaimOutcome::Held {
                        owner: Some(mid(POOL[usize::from(extra) % POOL.len()])),
                        session: self.session_for(extra),
                        token: self.token(),
                    }),
                    6 => Err(StoreError::NoNode),
                    7 => Err(StoreError::ConnectionLoss),
                    8 => Err(StoreError::SessionExpired),
                    _ => Err(StoreError::Corrupt {
                        path: "owners".into(),
                        detail: "garbage".into(),
                        source: None,
                    }),
                };
                let ours = match &result {
                    Ok(ClaimOutcome::Created { token, .. }) => Some(*token),
                    Ok(ClaimOutcome::Held { session, token, .. })
                        if Some(session.0) == self.session =>
                    {
                        Some(*token)
                    }
                    _ => None,
                };
                if let (Some(token), true) = (ours, live) {
                    self.granted
                        .entry(partition.clone())
                        .or_default()
                        .insert(token);
                }
                Event::ClaimResult { id: *id, result }
            }
            (id, StoreOp::WatchOwner { .. }) => Event::OwnerWatchResult {
                id: *id,
                result: match outcome % 3 {
                    0 => Ok(true),
                    1 => Ok(false),
                    _ => Err(StoreError::ConnectionLoss),
                },
            },
            (id, StoreOp::ReadOffset { .. }) => Event::OffsetResult {
                id: *id,
                result: match outcome % 5 {
                    0 | 1 => Ok(Some(Committed::at(i64::from(extra)))),
                    2 => Ok(None),
                    3 => Err(StoreError::ConnectionLoss),
                    _ => Err(StoreError::Corrupt {
                        path: "offsets".into(),
                        detail: "not a number".into(),
                        source: None,
                    }),
                },
            },
            (
                id,
                StoreOp::CommitOffset {
                    partition,
                    offset,
                    token,
                    ..
                },
            ) => {
                let result = match outcome % 6 {
                    0..=2 => Ok(()),
                    3 => Err(StoreError::NotOwner),
                    4 => Err(StoreError::ConnectionLoss),
                    _ => Err(StoreError::SessionExpired),
                };
                if result.is_ok() {
                    let acked = self
                        .highest_acked
                        .entry((partition.clone(), *token))
                        .or_insert(*offset);
                    *acked = (*acked).max(*offset);
                }
                Event::CommitResult { id: *id, result }
            }
            (
                id,
                StoreOp::Release {
                    partition,
                    token,
                    commit,
                    ..
                },
            ) => {
                let result = match outcome % 5 {
                    0 | 1 => Ok(()),
                    2 => Err(StoreError::NoNode),
                    3 => Err(StoreError::NotOwner),
                    _ => Err(StoreError::ConnectionLoss),
                };
                if let (Ok(()), Some(offset), Some(token)) = (&result, commit, token) {
                    let acked = self
                        .highest_acked
                        .entry((partition.clone(), *token))
                        .or_insert(*offset);
                    *acked = (*acked).max(*offset);
                }
                Event::ReleaseResult { id: *id, result }
            }
            (id, StoreOp::Heartbeat) => Event::HeartbeatResult {
                id: *id,
                result: match outcome % 4 {
                    0 | 1 => Ok(()),
                    2 => Err(StoreError::ConnectionLoss),
                    _ => Err(StoreError::SessionExpired),
                },
            },
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Establish => {
                if self.session.is_none() {
                    let session = self.next_session;
                    self.next_session += 1;
                    self.session = Some(session);
                    self.feed(Event::SessionEstablished {
                        session: SessionId(session),
                    })?;
                    // The store counts a session from the moment it opened.
                    self.feed(Event::SessionRenewed {
                        sent: self.now,
                        counted_after: Duration::ZERO,
                    })?;
                }
            }
            Op::Suspend(back) => {
                if self.session.is_some() {
                    let back = Duration::from_millis(u64::from(*back) % 5_000);
                    let last_heard = self.now.checked_sub(back).unwrap_or(self.t0).max(self.t0);
                    self.feed(Event::SessionSuspended { last_heard })?;
                }
            }
            Op::Resume => {
                if self.session.is_some() {
                    self.feed(Event::SessionResumed)?;
                }
            }
            Op::Expire => {
                if self.session.is_some() {
                    self.session = None;
                    self.feed(Event::SessionExpired)?;
                    prop_assert!(self.fetching.is_empty(), "still fetching after expiry");
                    self.epoch += 1;
                    for tokens in std::mem::take(&mut self.granted).into_values() {
                        self.dead.extend(tokens);
                    }
                    prop_assert!(self.member.owned().next().is_none());
                }
            }
            Op::MembersChanged => self.feed(Event::MembersChanged)?,
            Op::Counts(t, u) => {
                let counts: PartitionCounts = [("t".to_owned(), *t), ("u".to_owned(), *u)]
                    .into_iter()
                    .collect();
                self.give(|member, now| member.set_partition_counts(now, counts))?;
            }
            Op::Answer {
                pick,
                outcome,
                extra,
            } => {
                if !self.pending.is_empty() {
                    let (command, epoch) = self.pending.remove(pick % self.pending.len());
                    let event = self.answer(&command, epoch, *outcome, *extra);
                    self.feed(event)?;
                }
            }
            Op::OwnerDeleted(n) => {
                let topic = TOPICS[usize::from(*n) % 2];
                let partition = TopicPartition::new(topic, u32::from(*n / 2) % 4);
                self.feed(Event::OwnerDeleted { partition })?;
            }
            Op::Processed(i, offset) => {
                let candidates: Vec<(TopicPartition, FencingToken)> = self
                    .fetching
                    .iter()
                    .map(|(p, t)| (p.clone(), *t))
                    .chain(self.draining.iter().cloned())
                    .collect();
                if !candidates.is_empty() {
                    let (partition, token) = candidates[i % candidates.len()].clone();
                    let offset = i64::from(*offset);
                    self.give(|member, now| member.processed(now, &partition, token, offset))?;
                }
            }
            Op::Drained(i) => {
                if !self.draining.is_empty() {
                    let (partition, token) = self.draining.remove(i % self.draining.len());
                    self.give(|member, now| member.drained(now, &partition, token))?;
                }
            }
            Op::Advance(ms) => self.advance(Duration::from_millis(u64::from(*ms)))?,
            Op::Shutdown => {
                self.shutdown = true;
                self.give(|member, now| member.shutdown(now))?;
            }
        }
        Ok(())
    }

    /// Shuts down (if not yet) and answers everything successfully: the
    /// member must close.
    fn finish(&mut self) -> Result<(), TestCaseError> {
        // The store is reachable again: a suspended session resumes (until
        // then, rightly, nothing is committed and nothing closes).
        if self.session.is_some() {
            self.feed(Event::SessionResumed)?;
        }
        if !self.shutdown {
            self.shutdown = true;
            self.give(|member, now| member.shutdown(now))?;
        }
        for _ in 0..200 {
            if self.member.is_closed() {
                break;
            }
            if self.session.is_none() {
                self.step(&Op::Establish)?;
            }
            for (command, epoch) in std::mem::take(&mut self.pending) {
                // Success for every kind: outcome 0 is success for each.
                let event = self.answer(&command, epoch, 0, 0);
                let event = match event {
                    Event::MembersResult { id, .. } => Event::MembersResult {
                        id,
                        result: Ok(self.view.clone()),
                    },
                    Event::OwnerWatchResult { id, .. } => Event::OwnerWatchResult {
                        id,
                        result: Ok(false),
                    },
                    other => other,
                };
                self.feed(event)?;
            }
            for (partition, token) in std::mem::take(&mut self.draining) {
                self.give(|member, now| member.drained(now, &partition, token))?;
            }
            if self.pending.is_empty() && self.draining.is_empty() {
                // A moment already past is a timer the member does not act
                // on (checked in strict mode): move on regardless.
                let next = self
                    .member
                    .poll_timeout()
                    .filter(|t| *t > self.now)
                    .unwrap_or(self.now + Duration::from_secs(1));
                let by = next - self.now;
                self.advance(by)?;
            }
        }
        prop_assert!(
            self.member.is_closed(),
            "not closed after shutdown; pending {:?}",
            self.pending
        );
        prop_assert!(self.fetching.is_empty(), "closed while fetching");
        Ok(())
    }
}

fn run(seed: u64, ops: &[Op], strict: Strict) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(seed, strict);
    sim.step(&Op::Establish)?;
    for op in ops {
        sim.step(op)?;
    }
    sim.finish()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn safety_rules_hold_under_random_interleavings(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        run(seed, &ops, Strict::default())?;
    }
}

proptest! {
    // Stricter rules that once caught real bugs: timers that never fire,
    // and releases that cut a drain short.
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn poll_timeout_is_never_in_the_past_after_handle_timeout(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        run(seed, &ops, Strict { timeouts: true, ..Strict::default() })?;
    }

    #[test]
    fn a_stopped_claim_is_released_only_after_it_drained(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 0..200),
    ) {
        run(seed, &ops, Strict { drain_before_release: true, ..Strict::default() })?;
    }
}

/// A fixed run through an expiry with answers to requests sent before it.
#[test]
fn an_answer_after_expiry_to_a_claim_sent_before_it_grants_nothing() {
    let ops = [
        Op::Counts(2, 0),
        Op::Answer {
            pick: 0,
            outcome: 0,
            extra: 0,
        },
        Op::Answer {
            pick: 0,
            outcome: 1,
            extra: 1,
        },
        Op::Expire,
        Op::Answer {
            pick: 0,
            outcome: 0,
            extra: 0,
        },
        Op::Answer {
            pick: 0,
            outcome: 0,
            extra: 0,
        },
        Op::Establish,
        Op::Advance(5_000),
    ];
    run(3, &ops, Strict::default()).unwrap();
}
