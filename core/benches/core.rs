//! Criterion benchmarks of `tenure-core`.
//!
//! Run them with
//!
//! ```text
//! cargo bench -p tenure-core --bench core
//! ```
//!
//! (a filter after `--` runs a subset, e.g. `-- assignment`). Every figure
//! depends on the machine: compare ratios within one run (sticky against
//! range, one benchmark against another), not absolute numbers across
//! machines. Nothing here sleeps: members run on a virtual clock (`t0` plus
//! an offset), so wall time is CPU time spent in the library and the
//! benchmark's own bookkeeping.
//!
//! Groups (their names are quoted in the docs, keep them):
//!
//! - `member_events`: the steady state of ONE member (`m042`) of a
//!   100-member group sharing 1,000 partitions of topic `t` with the default
//!   sticky strategy, so it fetches ~10 of them. Each measured element is one
//!   `processed` acknowledgement (round-robin over its fetching partitions,
//!   offsets growing, virtual time advancing 1 ms per acknowledgement),
//!   followed by what a runtime does after every event: take
//!   `poll_output` until its `Timeout`, and call `handle_timeout` when that
//!   is due. The commits the 5 s commit interval triggers and the heartbeats are
//!   answered `Ok` inside the measured time but not counted as elements
//!   (about one per 300 acknowledgements), so the `thrpt` line reads as
//!   acknowledgements per second.
//! - `member_events_by_held/partitions={10,10000}`: the same acknowledgement
//!   (with what follows it, as above) on the only member of a group whose
//!   topic has 10 or 10,000 partitions, so that it holds them all. The
//!   acknowledgements go round the same 10 partitions in both, so the
//!   work they cause (commits included) is the same: the two lines differ
//!   only by what holding more partitions costs each event.
//! - `member_rebalance/{sticky,range}`: the time that member takes to handle
//!   one `MembersResult` in which a member (`m100`) joins the 100, computing
//!   the assignment over 101 members × 1,000 partitions, and to hand out the
//!   outputs it emits (`poll_output` until `Timeout`, unanswered). Between
//!   measurements the member is settled back to 100 members, untimed.
//! - `assignment/{sticky,range,round-robin}`: `AssignmentStrategy::assign`
//!   for 100 members × 1,000 partitions (one topic, every member subscribed).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use tenure_core::assignment::{AssignmentStrategy, PartitionCounts, Range, RoundRobin, Sticky};
use tenure_core::model::adapter;
use tenure_core::protocol::RegisterOutcome;
use tenure_core::{
    AppEvent, ClaimOutcome, Config, Event, FencingToken, FetchCommand, Member, MemberId,
    MemberInfo, Offset, RequestId, SessionId, StoreOp, StoreRequest, TopicPartition,
};
use tenure_core::{Committed, Output};

/// The group's size and partition count in the member benchmarks.
const MEMBERS: usize = 100;
const PARTITIONS: u32 = 1_000;
/// The member under test: somewhere in the middle of the sorted ids.
const OURS: &str = "m042";
/// The member that joins in `member_rebalance`.
const JOINER: &str = "m100";
/// Acknowledgements per measured iteration of `member_events`.
const EVENTS_PER_ITER: u64 = 1_000;
/// Virtual time between two acknowledgements.
const EVENT_STEP: Duration = Duration::from_millis(1);

fn member_info(id: &str, strategy: &str) -> MemberInfo {
    MemberInfo {
        id: MemberId::new(id).expect("bench member ids are valid names"),
        subscription: tenure_core::Subscription::Topics(["t".to_owned()].into_iter().collect()),
        strategy: strategy.to_owned(),
    }
}

/// Members `m000`..`m{n-1}`, all subscribed to `t`.
fn members_list(n: usize, strategy: &str) -> Vec<MemberInfo> {
    (0..n)
        .map(|i| member_info(&format!("m{i:03}"), strategy))
        .collect()
}

fn counts() -> PartitionCounts {
    [("t".to_owned(), PARTITIONS)].into_iter().collect()
}

/// One member on a virtual clock, with a store and an application that say
/// yes to everything.
struct Harness {
    member: Member,
    t0: Instant,
    /// Virtual time since `t0`.
    elapsed: Duration,
    /// The member list `WatchMembers` is answered with.
    members: Vec<MemberInfo>,
    next_token: u64,
    /// What the application is fetching: partition, claim, next offset to
    /// acknowledge (a list, so that going round it costs the same however
    /// long it is).
    fetching: Vec<(TopicPartition, FencingToken, Offset)>,
    /// How many of `fetching` the acknowledgements go round (all: `None`).
    active: Option<usize>,
    /// A `WatchMembers` left unanswered, for the caller to answer.
    members_request: Option<RequestId>,
    /// Answer `WatchMembers` at once (`false`: leave it in
    /// `members_request`).
    answer_members: bool,
}

impl Harness {
    /// `m042` of a 100-member group, joined, owning and fetching its share
    /// of the 1,000 partitions.
    fn settled(strategy: Arc<dyn AssignmentStrategy>) -> Harness {
        let name = strategy.name().to_owned();
        let h = Harness::joined(strategy, members_list(MEMBERS, &name), counts());
        let owned = h.fetching.len();
        assert!(
            (5..=20).contains(&owned),
            "{OURS} fetches {owned} partitions, expected about 10"
        );
        h
    }

    /// The only member of a group whose topic `t` has `partitions`
    /// partitions, owning and fetching them all.
    fn alone(partitions: u32) -> Harness {
        let h = Harness::joined(
            Arc::new(Sticky),
            vec![member_info(OURS, Sticky.name())],
            [("t".to_owned(), partitions)].into_iter().collect(),
        );
        assert_eq!(
            h.fetching.len(),
            partitions as usize,
            "{OURS} fetches them all"
        );
        h
    }

    /// `OURS`, joined to a group of `members` over `counts`, settled.
    fn joined(
        strategy: Arc<dyn AssignmentStrategy>,
        members: Vec<MemberInfo>,
        counts: PartitionCounts,
    ) -> Harness {
        let config = Config::new("bench", OURS, ["t"])
            .expect("valid bench config")
            .with_strategy(strategy);
        let t0 = Instant::now();
        let member = Member::new(config, 42, t0).expect("valid bench config");
        let mut h = Harness {
            member,
            t0,
            elapsed: Duration::ZERO,
            members,
            next_token: 1,
            fetching: Vec::new(),
            active: None,
            members_request: None,
            answer_members: true,
        };
        h.event(Event::SessionEstablished {
            session: SessionId(1),
        });
        // The store counts a session from the moment it opened.
        h.event(Event::SessionRenewed {
            sent: h.now(),
            counted_after: Duration::ZERO,
        });
        let now = h.now();
        h.member.set_partition_counts(now, counts);
        h.drain();
        assert!(h.member.is_settled(), "the bench member did not settle");
        h
    }

    fn now(&self) -> Instant {
        self.t0 + self.elapsed
    }

    /// Feeds one event, then carries out every command it leads to.
    fn event(&mut self, event: Event) {
        let now = self.now();
        self.member.handle_event(now, event);
        self.drain();
    }

    /// Lets due timers fire, as a runtime does when `poll_timeout` comes.
    fn timers(&mut self) {
        let now = self.now();
        if self.member.poll_timeout().is_some_and(|at| at <= now) {
            self.member.handle_timeout(now);
            self.drain();
        }
    }

    /// Carries out commands until there are none, answering store requests
    /// with success at once.
    fn drain(&mut self) {
        loop {
            let answer = match self.member.poll_output() {
                Output::App(AppEvent::Problem(error)) => {
                    panic!("the bench member reported: {error}")
                }
                Output::App(_) => None,
                Output::Fetch(fetch) => {
                    self.fetch(fetch);
                    None
                }
                Output::Store(command) => self.answer(command),
                Output::Timeout(_) => return,
                other => panic!("an output the bench does not know: {other:?}"),
            };
            if let Some(answer) = answer {
                // Answered at once: the store heard the session now.
                let now = self.now();
                if let Some(renewal) = adapter::renewal(now, &answer) {
                    self.member.handle_event(now, renewal);
                }
                self.member.handle_event(now, answer);
            }
        }
    }

    fn answer(&mut self, command: StoreRequest) -> Option<Event> {
        Some(match (command.id, command.op) {
            (id, StoreOp::Register { .. }) => Event::RegisterResult {
                id,
                result: Ok(RegisterOutcome::Registered),
            },
            (id, StoreOp::WatchMembers) => {
                if !self.answer_members {
                    self.members_request = Some(id);
                    return None;
                }
                Event::MembersResult {
                    id,
                    result: Ok(self.members.clone()),
                }
            }
            (id, StoreOp::Claim { .. }) => {
                let token = FencingToken(self.next_token);
                self.next_token += 1;
                Event::ClaimResult {
                    id,
                    result: Ok(ClaimOutcome::Created {
                        token,
                        committed: None,
                    }),
                }
            }
            (id, StoreOp::WatchOwner { .. }) => Event::OwnerWatchResult {
                id,
                result: Ok(false),
            },
            (id, StoreOp::ReadOffset { .. }) => Event::OffsetResult {
                id,
                result: Ok(Some(Committed::at(0))),
            },
            (id, StoreOp::CommitOffset { .. }) => Event::CommitResult { id, result: Ok(()) },
            (id, StoreOp::Heartbeat) => Event::HeartbeatResult { id, result: Ok(()) },
            (id, StoreOp::Release { .. }) => Event::ReleaseResult { id, result: Ok(()) },
            (id, StoreOp::Deregister) => Event::DeregisterResult { id, result: Ok(()) },
        })
    }

    /// Starts or stops a fetch; a stop drains at once (an application with
    /// nothing in hand).
    fn fetch(&mut self, command: FetchCommand) {
        match command {
            FetchCommand::Start {
                partition, token, ..
            } => match self.fetching.iter_mut().find(|(p, ..)| *p == partition) {
                Some(entry) => entry.1 = token,
                None => self.fetching.push((partition, token, 0)),
            },
            FetchCommand::Stop { partition, token } => {
                self.fetching.retain(|(p, ..)| *p != partition);
                let now = self.now();
                self.member.drained(now, &partition, token);
            }
            // The benchmark's store always answers: no session lapses.
            FetchCommand::Suspend { .. } | FetchCommand::Resume { .. } => {}
        }
    }

    /// `n` acknowledgements, round-robin over the fetching partitions, each
    /// `EVENT_STEP` after the last, with the timers a runtime would fire.
    fn acknowledge(&mut self, n: u64, cursor: &mut usize) {
        for _ in 0..n {
            self.elapsed += EVENT_STEP;
            let (partition, token, offset) = {
                let round = self.active.unwrap_or(self.fetching.len());
                let (partition, token, offset) = &mut self.fetching[*cursor % round];
                let acked = *offset;
                *offset += 1;
                (partition.clone(), *token, acked)
            };
            *cursor = cursor.wrapping_add(1);
            let now = self.now();
            self.member.processed(now, &partition, token, offset);
            self.drain();
            self.timers();
        }
    }

    /// Has the member read the member list again and answers that read with
    /// `members`, then settles everything that follows (untimed helper).
    fn change_members(&mut self, members: Vec<MemberInfo>) {
        self.members = members;
        self.event(Event::MembersChanged);
        assert!(self.member.is_settled(), "the bench member did not settle");
    }
}

fn member_events(c: &mut Criterion) {
    let mut group = c.benchmark_group("member_events");
    group.throughput(Throughput::Elements(EVENTS_PER_ITER));
    let mut h = Harness::settled(Arc::new(Sticky));
    let mut cursor = 0;
    // Warm the state past the first commit interval and heartbeat.
    h.acknowledge(10_000, &mut cursor);
    group.bench_function("sticky/members=100,partitions=1000", |b| {
        b.iter(|| h.acknowledge(EVENTS_PER_ITER, &mut cursor))
    });
    group.finish();
    assert!(h.member.is_settled(), "the bench member lost partitions");
    let committed = h
        .fetching
        .iter()
        .filter_map(|(p, ..)| h.member.committed(p))
        .min()
        .expect("the bench member fetches partitions");
    assert!(
        committed >= 100,
        "commits did not keep up: lowest committed offset {committed}"
    );
}

/// The partitions held in `member_events_by_held`, and how many of them
/// the acknowledgements go round.
const HELD: [u32; 2] = [10, 10_000];
const ACTIVE: usize = 10;

fn member_events_by_held(c: &mut Criterion) {
    let mut group = c.benchmark_group("member_events_by_held");
    group.throughput(Throughput::Elements(EVENTS_PER_ITER));
    for held in HELD {
        let mut h = Harness::alone(held);
        h.active = Some(ACTIVE);
        let mut cursor = 0;
        h.acknowledge(10_000, &mut cursor);
        group.bench_function(format!("partitions={held}"), |b| {
            b.iter(|| h.acknowledge(EVENTS_PER_ITER, &mut cursor))
        });
        assert!(h.member.is_settled(), "the bench member lost partitions");
        let committed = h.fetching[..ACTIVE]
            .iter()
            .filter_map(|(p, ..)| h.member.committed(p))
            .min();
        assert!(
            committed.is_some_and(|c| c >= 100),
            "commits did not keep up: lowest committed offset {committed:?}"
        );
    }
    group.finish();
}

fn member_rebalance(c: &mut Criterion) {
    let mut group = c.benchmark_group("member_rebalance");
    let strategies: [Arc<dyn AssignmentStrategy>; 2] = [Arc::new(Sticky), Arc::new(Range)];
    for strategy in strategies {
        let name = strategy.name().to_owned();
        let mut h = Harness::settled(strategy);
        let before = group_of(&name, false);
        let after = group_of(&name, true);
        group.bench_function(
            BenchmarkId::new(&name, "members=100+1,partitions=1000"),
            |b| {
                b.iter_custom(|iters| {
                    let mut measured = Duration::ZERO;
                    for _ in 0..iters {
                        // Untimed: the member asks for the list and waits.
                        h.answer_members = false;
                        h.event(Event::MembersChanged);
                        let id = h
                            .members_request
                            .take()
                            .expect("MembersChanged leads to a WatchMembers");
                        h.answer_members = true;

                        let now = h.now();
                        let start = Instant::now();
                        h.member.handle_event(
                            now,
                            Event::MembersResult {
                                id,
                                result: Ok(after.clone()),
                            },
                        );
                        let outputs: Vec<Output> =
                            std::iter::from_fn(|| match h.member.poll_output() {
                                Output::Timeout(_) => None,
                                output => Some(output),
                            })
                            .collect();
                        measured += start.elapsed();
                        let (mut fetches, mut commands) = (Vec::new(), Vec::new());
                        for output in outputs {
                            match output {
                                Output::Fetch(fetch) => fetches.push(fetch),
                                Output::Store(command) => commands.push(command),
                                output => drop(black_box(output)),
                            }
                        }

                        // Untimed: carry the commands out, settle, and go back
                        // to 100 members for the next iteration.
                        h.members = after.clone();
                        for fetch in fetches {
                            h.fetch(fetch);
                            h.drain();
                        }
                        for command in commands {
                            if let Some(answer) = h.answer(command) {
                                h.event(answer);
                            }
                        }
                        assert!(h.member.is_settled(), "the bench member did not settle");
                        h.change_members(before.clone());
                        h.elapsed += Duration::from_millis(10);
                        h.timers();
                    }
                    measured
                })
            },
        );
    }
    group.finish();
}

/// The 100 members, plus the joiner if `joined`.
fn group_of(strategy: &str, joined: bool) -> Vec<MemberInfo> {
    let mut members = members_list(MEMBERS, strategy);
    if joined {
        members.push(member_info(JOINER, strategy));
    }
    members
}

fn assignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("assignment");
    let counts = counts();
    let strategies: [Arc<dyn AssignmentStrategy>; 3] =
        [Arc::new(Sticky), Arc::new(Range), Arc::new(RoundRobin)];
    for strategy in strategies {
        let members = members_list(MEMBERS, strategy.name());
        let assigned = strategy.assign(&members, &counts);
        assert_eq!(
            assigned.len(),
            PARTITIONS as usize,
            "{} left partitions out",
            strategy.name()
        );
        group.bench_function(
            BenchmarkId::new(strategy.name(), "members=100,partitions=1000"),
            |b| b.iter(|| strategy.assign(black_box(&members), black_box(&counts))),
        );
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
}

criterion_group! {
    name = benches;
    config = config();
    targets = member_events, member_events_by_held, member_rebalance, assignment
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
