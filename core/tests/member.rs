//! Scenario tests of the member state machine: each test drives one
//! `Member` through a script of events on a virtual clock and checks the
//! commands it emits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenure_core::assignment::{Assignment, AssignmentStrategy, PartitionCounts};
use tenure_core::model::adapter;
use tenure_core::protocol::RegisterOutcome;
use tenure_core::{
    AppEvent, ClaimOutcome, Config, ConfigError, Error, Event, FencingToken, FetchCommand,
    FetchFrom, Member, MemberId, MemberInfo, Offset, Operation, RequestId, SessionId, StoreError,
    StoreOp, StoreRequest, TopicPartition,
};
use tenure_core::{Committed, Output, Progress};

const STRATEGY: &str = "fixed";
const OURS: &str = "m1";

/// A test strategy: a partition goes to the first member of its preference
/// list that is present, else to this test's member if present, else to the
/// smallest member id.
#[derive(Debug, Default)]
struct Fixed {
    prefer: BTreeMap<TopicPartition, Vec<MemberId>>,
}

impl AssignmentStrategy for Fixed {
    fn name(&self) -> &str {
        STRATEGY
    }

    fn assign(&self, members: &[MemberInfo], partitions: &PartitionCounts) -> Assignment {
        let ids: BTreeSet<&MemberId> = members.iter().map(|m| &m.id).collect();
        let mut assignment = Assignment::new();
        for (topic, count) in partitions {
            for n in 0..*count {
                let partition = TopicPartition::new(topic, n);
                let preferred = self
                    .prefer
                    .get(&partition)
                    .and_then(|list| list.iter().find(|m| ids.contains(m)));
                let fallback = || {
                    let ours = mid(OURS);
                    ids.get(&ours).or_else(|| ids.iter().next()).copied()
                };
                if let Some(owner) = preferred.or_else(fallback) {
                    assignment.insert(partition, owner.clone());
                }
            }
        }
        assignment
    }
}

fn tp(n: u32) -> TopicPartition {
    TopicPartition::new("t", n)
}

fn mid(id: &str) -> MemberId {
    MemberId::new(id).unwrap()
}

fn info(id: &str) -> MemberInfo {
    info_with(id, STRATEGY)
}

fn info_with(id: &str, strategy: &str) -> MemberInfo {
    MemberInfo {
        id: mid(id),
        subscription: tenure_core::Subscription::Topics(["t".to_owned()].into_iter().collect()),
        strategy: strategy.to_owned(),
    }
}

fn counts(n: u32) -> PartitionCounts {
    [("t".to_owned(), n)].into_iter().collect()
}

fn config_with(prefer: &[(u32, &str)]) -> Config {
    Config::new("g", OURS, ["t"])
        .unwrap()
        .with_strategy(Arc::new(Fixed {
            prefer: prefer.iter().map(|(p, m)| (tp(*p), vec![mid(m)])).collect(),
        }))
}

fn base_config() -> Config {
    config_with(&[])
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The member under test, a virtual clock and helpers to feed it.
struct Harness {
    member: Member,
    t0: Instant,
    now: Instant,
    /// Answer `Heartbeat` commands met while advancing with this result
    /// (and leave them out of what `advance` returns).
    auto_heartbeat: Option<Result<(), StoreError>>,
    /// What the member told the application during the latest `event` or
    /// `advance`.
    app_events: Vec<AppEvent>,
    /// The fetch starts and stops of the latest `event` or `advance`.
    fetches: Vec<FetchCommand>,
    /// Every fetch start and stop so far.
    fetch_log: Vec<FetchCommand>,
    /// Every output of the latest `event` or `advance`, in its order.
    outputs: Vec<Output>,
    /// When each store request was taken: the store (one node, its own
    /// leader) renews the session then if it answers.
    sent: HashMap<RequestId, Instant>,
}

impl Harness {
    fn new(config: Config) -> Self {
        Self::with_seed(config, 7)
    }

    fn with_seed(config: Config, seed: u64) -> Self {
        let t0 = Instant::now();
        let member = Member::new(config, seed, t0).expect("valid config");
        Harness {
            member,
            t0,
            now: t0,
            auto_heartbeat: None,
            app_events: Vec::new(),
            fetches: Vec::new(),
            fetch_log: Vec::new(),
            outputs: Vec::new(),
            sent: HashMap::new(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Takes what the member emitted: fetch starts and stops and
    /// application events are kept, store requests returned.
    fn drain(&mut self) -> Vec<StoreRequest> {
        let mut requests = Vec::new();
        loop {
            let output = self.member.poll_output();
            if !matches!(output, Output::Timeout(_)) {
                self.outputs.push(output.clone());
            }
            match output {
                Output::Fetch(fetch) => {
                    self.fetch_log.push(fetch.clone());
                    self.fetches.push(fetch);
                }
                Output::App(event) => self.app_events.push(event),
                Output::Store(request) => {
                    self.sent.insert(request.id, self.now);
                    requests.push(request);
                }
                Output::Timeout(_) => return requests,
                other => panic!("an output this harness does not know: {other:?}"),
            }
        }
    }

    /// The fetch starts of the latest `event` or `advance`.
    fn starts(&self) -> Vec<(TopicPartition, FetchFrom, FencingToken)> {
        self.fetches
            .iter()
            .filter_map(|c| match c {
                FetchCommand::Start {
                    partition,
                    from,
                    token,
                    ..
                } => Some((partition.clone(), *from, *token)),
                _ => None,
            })
            .collect()
    }

    /// The fetch suspensions (`true`) and resumptions (`false`) of the
    /// latest `event` or `advance`.
    fn holds(&self) -> Vec<(TopicPartition, FencingToken, bool)> {
        self.fetches
            .iter()
            .filter_map(|c| match c {
                FetchCommand::Suspend { partition, token } => {
                    Some((partition.clone(), *token, true))
                }
                FetchCommand::Resume { partition, token } => {
                    Some((partition.clone(), *token, false))
                }
                _ => None,
            })
            .collect()
    }

    /// The fetch stops of the latest `event` or `advance`.
    fn stops(&self) -> Vec<(TopicPartition, FencingToken)> {
        self.fetches
            .iter()
            .filter_map(|c| match c {
                FetchCommand::Stop { partition, token } => Some((partition.clone(), *token)),
                _ => None,
            })
            .collect()
    }

    /// Hands the member one input at the current time; returns the store
    /// requests it caused.
    fn input(&mut self, give: impl FnOnce(&mut Member, Instant)) -> Vec<StoreRequest> {
        self.app_events.clear();
        self.fetches.clear();
        self.outputs.clear();
        give(&mut self.member, self.now);
        self.drain()
    }

    /// Hands the member `event` as a single store node would: a result
    /// comes after the renewal it vouches for, and a new session is
    /// counted from the moment it opened.
    fn event(&mut self, event: Event) -> Vec<StoreRequest> {
        let renewal = self.renewal(&event);
        self.input(|member, now| {
            let opened = matches!(event, Event::SessionEstablished { .. });
            if !opened {
                renewal
                    .into_iter()
                    .for_each(|r| member.handle_event(now, r));
            }
            member.handle_event(now, event);
            if opened {
                member.handle_event(
                    now,
                    Event::SessionRenewed {
                        sent: now,
                        counted_after: Duration::ZERO,
                    },
                );
            }
        })
    }

    /// The renewal a single store node gives with `reply`, if any.
    fn renewal(&mut self, reply: &Event) -> Option<Event> {
        let sent = self.sent.remove(&reply.request_id()?)?;
        adapter::renewal(sent, reply)
    }

    fn set_counts(&mut self, counts: PartitionCounts) -> Vec<StoreRequest> {
        self.input(|member, now| member.set_partition_counts(now, counts))
    }

    fn shutdown(&mut self) -> Vec<StoreRequest> {
        self.input(|member, now| member.shutdown(now))
    }

    fn ack(
        &mut self,
        partition: TopicPartition,
        token: FencingToken,
        offset: Offset,
    ) -> Vec<StoreRequest> {
        self.input(|member, now| member.processed(now, &partition, token, offset))
    }

    /// What the member told the application during the latest `event` or
    /// `advance`, problems aside.
    fn told(&self) -> Vec<&AppEvent> {
        self.app_events
            .iter()
            .filter(|e| !matches!(e, AppEvent::Problem(_)))
            .collect()
    }

    /// The problems the member reported during the latest `event` or
    /// `advance`.
    fn reports(&self) -> Vec<Error> {
        self.app_events
            .iter()
            .filter_map(|e| match e {
                AppEvent::Problem(error) => Some(error.clone()),
                _ => None,
            })
            .collect()
    }

    /// Moves the clock forward by `by`, calling `handle_timeout` at every
    /// moment `poll_timeout` names on the way.
    fn advance(&mut self, by: Duration) -> Vec<StoreRequest> {
        self.app_events.clear();
        self.fetches.clear();
        self.outputs.clear();
        let target = self.now + by;
        let mut out = Vec::new();
        for _ in 0..100_000 {
            match self.member.poll_timeout() {
                Some(at) if at <= target => {
                    let at = at.max(self.now);
                    self.now = at;
                    self.member.handle_timeout(at);
                    let commands = self.drain();
                    out.extend(self.answer_heartbeats(commands));
                    if let Some(next) = self.member.poll_timeout() {
                        if next <= at {
                            // A timer the member does not act on; move on
                            // rather than spin (checked in its own test).
                            break;
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = target;
        self.member.handle_timeout(target);
        let commands = self.drain();
        out.extend(self.answer_heartbeats(commands));
        out
    }

    fn answer_heartbeats(&mut self, commands: Vec<StoreRequest>) -> Vec<StoreRequest> {
        let Some(result) = self.auto_heartbeat.clone() else {
            return commands;
        };
        let mut out = Vec::new();
        for command in commands {
            if let StoreRequest {
                id,
                op: StoreOp::Heartbeat,
                ..
            } = command
            {
                let reply = Event::HeartbeatResult {
                    id,
                    result: result.clone(),
                };
                if let Some(renewal) = self.renewal(&reply) {
                    self.member.handle_event(self.now, renewal);
                }
                self.member.handle_event(self.now, reply);
                let more = self.drain();
                out.extend(self.answer_heartbeats(more));
            } else {
                out.push(command);
            }
        }
        out
    }

    /// Session 1, registration and a member list of `members`; returns
    /// whatever the member emitted last.
    fn join(&mut self, members: &[MemberInfo]) -> Vec<StoreRequest> {
        let commands = self.event(Event::SessionEstablished {
            session: SessionId(1),
        });
        self.join_under(commands, members)
    }

    fn join_under(
        &mut self,
        commands: Vec<StoreRequest>,
        members: &[MemberInfo],
    ) -> Vec<StoreRequest> {
        assert_eq!(commands.len(), 2, "{commands:?}");
        let register = match &commands[0] {
            StoreRequest {
                id,
                op: StoreOp::Register { member, .. },
                ..
            } => {
                assert_eq!(member.id, mid(OURS));
                assert_eq!(member.strategy, STRATEGY);
                *id
            }
            other => panic!("expected Register, got {other:?}"),
        };
        let watch = match &commands[1] {
            StoreRequest {
                id,
                op: StoreOp::WatchMembers,
                ..
            } => *id,
            other => panic!("expected WatchMembers, got {other:?}"),
        };
        let after = self.event(Event::RegisterResult {
            id: register,
            result: Ok(RegisterOutcome::Registered),
        });
        assert!(after.is_empty(), "{after:?}");
        self.event(Event::MembersResult {
            id: watch,
            result: Ok(members.to_vec()),
        })
    }

    /// Answers a claim with `Created{token}`, the offset read with
    /// `committed`, and returns the `StartFetching` position.
    fn own(
        &mut self,
        claim: RequestId,
        partition: &TopicPartition,
        token: u64,
        committed: Option<Offset>,
    ) -> FetchFrom {
        let commands = self.event(Event::ClaimResult {
            id: claim,
            result: Ok(ClaimOutcome::Created {
                token: FencingToken(token),
                committed: None,
            }),
        });
        let read = read_offsets(&commands);
        assert_eq!(read.len(), 1, "{commands:?}");
        assert_eq!(&read[0].1, partition);
        let commands = self.event(Event::OffsetResult {
            id: read[0].0,
            result: Ok(committed.map(Committed::at)),
        });
        let starts = self.starts();
        assert_eq!(starts.len(), 1, "{commands:?}");
        assert_eq!(&starts[0].0, partition);
        assert_eq!(starts[0].2, FencingToken(token));
        starts[0].1
    }

    /// Joins alone with `n` partitions and owns them all (tokens 100 + p,
    /// committed offsets 0), every one fetching.
    fn owning(&mut self, n: u32) {
        // Ourselves as the store lists us: our own registration.
        self.join(&[self.member.info().clone()]);
        let commands = self.set_counts(counts(n));
        let claims = claims(&commands);
        assert_eq!(claims.len(), n as usize, "{commands:?}");
        for (id, partition) in claims {
            let token = 100 + u64::from(partition.partition);
            assert_eq!(
                self.own(id, &partition, token, Some(0)),
                FetchFrom::Offset(0)
            );
        }
        assert_eq!(self.member.fetching().count(), n as usize);
    }

    fn processed(&mut self, partition: u32, offset: Offset) -> Vec<StoreRequest> {
        self.ack(
            tp(partition),
            FencingToken(100 + u64::from(partition)),
            offset,
        )
    }

    fn drained(&mut self, partition: u32) -> Vec<StoreRequest> {
        let token = FencingToken(100 + u64::from(partition));
        self.input(|member, now| member.drained(now, &tp(partition), token))
    }

    /// A membership change to `members`; returns the commands it caused.
    fn members(&mut self, members: &[MemberInfo]) -> Vec<StoreRequest> {
        let commands = self.event(Event::MembersChanged);
        let watch = match commands.as_slice() {
            [StoreRequest {
                id,
                op: StoreOp::WatchMembers,
                ..
            }] => *id,
            other => panic!("expected WatchMembers, got {other:?}"),
        };
        self.event(Event::MembersResult {
            id: watch,
            result: Ok(members.to_vec()),
        })
    }
}

fn claims(commands: &[StoreRequest]) -> Vec<(RequestId, TopicPartition)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (id, StoreOp::Claim { partition, .. }) => Some((*id, partition.clone())),
            _ => None,
        })
        .collect()
}

fn read_offsets(commands: &[StoreRequest]) -> Vec<(RequestId, TopicPartition)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (id, StoreOp::ReadOffset { partition }) => Some((*id, partition.clone())),
            _ => None,
        })
        .collect()
}

fn watches(commands: &[StoreRequest]) -> Vec<(RequestId, TopicPartition)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (id, StoreOp::WatchOwner { partition }) => Some((*id, partition.clone())),
            _ => None,
        })
        .collect()
}

fn commits(commands: &[StoreRequest]) -> Vec<(RequestId, TopicPartition, Offset, FencingToken)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (
                id,
                StoreOp::CommitOffset {
                    partition,
                    offset,
                    token,
                    ..
                },
            ) => Some((*id, partition.clone(), *offset, *token)),
            _ => None,
        })
        .collect()
}

fn releases(commands: &[StoreRequest]) -> Vec<(RequestId, TopicPartition, Option<FencingToken>)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (
                id,
                StoreOp::Release {
                    partition, token, ..
                },
            ) => Some((*id, partition.clone(), *token)),
            _ => None,
        })
        .collect()
}

/// The final commits the releases among `commands` carry: each release's
/// id, partition, offset and token.
fn final_commits(
    commands: &[StoreRequest],
) -> Vec<(RequestId, TopicPartition, Offset, Option<FencingToken>)> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (
                id,
                StoreOp::Release {
                    partition,
                    token,
                    commit: Some(offset),
                    ..
                },
            ) => Some((*id, partition.clone(), *offset, *token)),
            _ => None,
        })
        .collect()
}

fn heartbeats(commands: &[StoreRequest]) -> Vec<RequestId> {
    commands
        .iter()
        .filter_map(|c| match (&c.id, &c.op) {
            (id, StoreOp::Heartbeat) => Some(*id),
            _ => None,
        })
        .collect()
}

// ----- happy path and offsets -----

#[test]
fn happy_path_claims_reads_the_offset_and_fetches_from_it_with_the_token() {
    let mut h = Harness::new(base_config());
    let commands = h.join(&[info(OURS)]);
    assert!(commands.is_empty(), "no partitions known yet: {commands:?}");
    assert!(h.member.is_registered());

    let commands = h.set_counts(counts(1));
    let claims = claims(&commands);
    assert_eq!(claims.len(), 1, "{commands:?}");
    assert_eq!(claims[0].1, tp(0));
    assert_eq!(h.member.assigned(), &BTreeSet::from([tp(0)]));
    assert_eq!(h.app_events, vec![AppEvent::Claiming { partition: tp(0) }]);

    h.advance(ms(30));
    let commands = h.event(Event::ClaimResult {
        id: claims[0].0,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(9),
            committed: None,
        }),
    });
    assert_eq!(
        h.app_events,
        vec![AppEvent::Claimed {
            partition: tp(0),
            token: FencingToken(9),
            waited: ms(30),
        }],
        "the wait counts from the first attempt"
    );
    let reads = read_offsets(&commands);
    assert_eq!(reads.len(), 1, "{commands:?}");
    assert!(h.starts().is_empty(), "no fetch before the offset read");
    assert_eq!(
        h.member.owned().collect::<Vec<_>>(),
        vec![(&tp(0), FencingToken(9))]
    );

    h.event(Event::OffsetResult {
        id: reads[0].0,
        result: Ok(Some(Committed::at(42))),
    });
    assert_eq!(
        h.starts(),
        vec![(tp(0), FetchFrom::Offset(42), FencingToken(9))]
    );
    assert_eq!(
        h.app_events,
        vec![AppEvent::OffsetRead {
            partition: tp(0),
            token: FencingToken(9),
            committed: Some(42),
        }]
    );
    assert_eq!(h.member.committed(&tp(0)), Some(42));
    assert!(h.member.is_settled());
}

#[test]
fn a_claim_that_read_the_offset_with_it_fetches_without_another_request() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(2));
    assert!(
        commands.iter().all(|c| matches!(
            c.op,
            StoreOp::Claim {
                read_offset: true,
                ..
            }
        )),
        "the claims ask for the offset: {commands:?}"
    );
    let claims = claims(&commands);
    assert_eq!(
        claims.iter().map(|c| &c.1).collect::<Vec<_>>(),
        vec![&tp(0), &tp(1)]
    );

    let commands = h.event(Event::ClaimResult {
        id: claims[0].0,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(9),
            committed: Some(Ok(Some(Committed::at(42)))),
        }),
    });
    assert!(commands.is_empty(), "nothing more to ask: {commands:?}");
    assert_eq!(
        h.starts(),
        vec![(tp(0), FetchFrom::Offset(42), FencingToken(9))]
    );
    assert!(
        h.app_events.contains(&AppEvent::OffsetRead {
            partition: tp(0),
            token: FencingToken(9),
            committed: Some(42),
        }),
        "{:?}",
        h.app_events
    );
    assert_eq!(h.member.committed(&tp(0)), Some(42));

    // A read that failed with the claim is reported, and goes again on
    // its own after a backoff; the claim stands.
    let corrupt = StoreError::Corrupt {
        path: "offsets/t/1".into(),
        detail: "not a number".into(),
        source: None,
    };
    let commands = h.event(Event::ClaimResult {
        id: claims[1].0,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(10),
            committed: Some(Err(corrupt.clone())),
        }),
    });
    assert!(read_offsets(&commands).is_empty(), "{commands:?}");
    assert!(h.starts().is_empty());
    assert_eq!(
        h.reports(),
        vec![Error::Store {
            operation: Operation::ReadOffset,
            partition: Some(tp(1)),
            source: corrupt,
        }]
    );
    assert_eq!(h.member.owned_token(&tp(1)), Some(FencingToken(10)));
    let commands = h.advance(secs(5));
    let reads = read_offsets(&commands);
    assert_eq!(
        reads.iter().map(|r| &r.1).collect::<Vec<_>>(),
        vec![&tp(1)],
        "{commands:?}"
    );
    h.event(Event::OffsetResult {
        id: reads[0].0,
        result: Ok(None),
    });
    assert_eq!(
        h.starts(),
        vec![(tp(1), FetchFrom::Oldest, FencingToken(10))]
    );
    assert!(h.member.is_settled());
}

#[test]
fn no_committed_offset_starts_at_the_configured_initial_offset() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    assert_eq!(h.own(claim, &tp(0), 5, None), FetchFrom::Oldest);

    let mut newest = base_config();
    newest = newest.with_initial_offset(tenure_core::InitialOffset::Newest);
    let mut h = Harness::new(newest);
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    assert_eq!(h.own(claim, &tp(0), 5, None), FetchFrom::Newest);
}

#[test]
fn processed_offsets_are_committed_on_the_interval_and_never_go_backwards() {
    let mut h = Harness::new(base_config());
    h.auto_heartbeat = Some(Ok(()));
    h.owning(2);
    assert!(h.processed(0, 50).is_empty());

    // Just before the interval: nothing.
    let commands = h.advance(secs(5) - ms(1));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    let commands = h.advance(ms(1));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "only the processed partition: {commands:?}");
    assert_eq!(
        (&sent[0].1, sent[0].2, sent[0].3),
        (&tp(0), 51, FencingToken(100))
    );
    assert!(h
        .event(Event::CommitResult {
            id: sent[0].0,
            result: Ok(())
        })
        .is_empty());
    assert_eq!(h.member.committed(&tp(0)), Some(51));

    // Nothing new processed: no commit.
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");

    // A lower acknowledgement after a higher one does not lower the commit.
    h.processed(0, 60);
    h.processed(0, 55);
    let commands = h.advance(secs(5));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "{commands:?}");
    assert_eq!(sent[0].2, 61);
    h.event(Event::CommitResult {
        id: sent[0].0,
        result: Ok(()),
    });

    // Only a lower acknowledgement: nothing to commit.
    h.processed(0, 58);
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert_eq!(h.member.committed(&tp(0)), Some(61));
}

#[test]
fn commit_now_commits_what_was_processed_without_waiting_for_the_interval() {
    let mut h = Harness::new(base_config());
    h.auto_heartbeat = Some(Ok(()));
    h.owning(2);
    h.processed(0, 50);
    let commands = h.input(|member, now| member.commit_now(now));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "only the processed partition: {commands:?}");
    assert_eq!(
        (&sent[0].1, sent[0].2, sent[0].3),
        (&tp(0), 51, FencingToken(100))
    );
    // In flight already: a second call sends nothing more.
    h.processed(0, 60);
    let commands = h.input(|member, now| member.commit_now(now));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    h.event(Event::CommitResult {
        id: sent[0].0,
        result: Ok(()),
    });
    assert_eq!(h.member.committed(&tp(0)), Some(51));
    // Answered: the newer offset goes out at once, not at the interval.
    let commands = h.input(|member, now| member.commit_now(now));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "{commands:?}");
    assert_eq!(sent[0].2, 61);
}

#[test]
fn offsets_kept_by_the_application_are_never_read_nor_written() {
    let mut config = base_config();
    config = config.with_store_offsets(false);
    let mut h = Harness::new(config);
    h.auto_heartbeat = Some(Ok(()));
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands);
    assert_eq!(claim.len(), 1, "{commands:?}");
    assert!(
        matches!(
            commands[0].op,
            StoreOp::Claim {
                read_offset: false,
                ..
            }
        ),
        "no offset read with the claim: {commands:?}"
    );
    let commands = h.event(Event::ClaimResult {
        id: claim[0].0,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(100),
            committed: None,
        }),
    });
    assert!(read_offsets(&commands).is_empty(), "{commands:?}");
    let starts = h.starts();
    assert_eq!(starts, vec![(tp(0), FetchFrom::Oldest, FencingToken(100))]);

    h.processed(0, 50);
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    let commands = h.input(|member, now| member.commit_now(now));
    assert!(commits(&commands).is_empty(), "{commands:?}");

    // Leaving: drained, then released with no final commit.
    h.input(|member, now| member.shutdown(now));
    let commands = h.drained(0);
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert_eq!(releases(&commands).len(), 1, "{commands:?}");
}

#[test]
fn acknowledgements_under_another_token_are_not_committed() {
    let mut h = Harness::new(base_config());
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.ack(tp(0), FencingToken(99), 10);
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");
}

// ----- claims -----

#[test]
fn node_exists_watches_the_owner_and_claims_when_it_is_deleted() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;

    let commands = h.event(Event::ClaimResult {
        id: claim,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid("m2")),
            session: SessionId(77),
            token: FencingToken(3),
        }),
    });
    let watch = watches(&commands);
    assert_eq!(watch.len(), 1, "{commands:?}");
    assert_eq!(watch[0].1, tp(0));
    assert!(h.member.owned().next().is_none());

    let commands = h.event(Event::OwnerWatchResult {
        id: watch[0].0,
        result: Ok(true),
    });
    assert!(commands.is_empty(), "{commands:?}");
    // Watching: no polling claims while the owner holds on.
    let commands = h.advance(secs(5));
    assert!(claims(&commands).is_empty(), "{commands:?}");

    let commands = h.event(Event::OwnerDeleted { partition: tp(0) });
    let again = claims(&commands);
    assert_eq!(again.len(), 1, "claim at once: {commands:?}");
    assert_eq!(again[0].1, tp(0));

    // The owner is there again; this time it is gone before the watch.
    let commands = h.event(Event::ClaimResult {
        id: again[0].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid("m2")),
            session: SessionId(77),
            token: FencingToken(4),
        }),
    });
    let watch = watches(&commands);
    assert_eq!(watch.len(), 1, "{commands:?}");
    let commands = h.event(Event::OwnerWatchResult {
        id: watch[0].0,
        result: Ok(false),
    });
    let third = claims(&commands);
    assert_eq!(third.len(), 1, "claim at once: {commands:?}");
    assert_eq!(h.own(third[0].0, &tp(0), 5, Some(3)), FetchFrom::Offset(3));
}

#[test]
fn a_watched_owner_is_looked_at_again_if_the_notification_is_lost() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    let commands = h.event(Event::ClaimResult {
        id: claim,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid("m2")),
            session: SessionId(77),
            token: FencingToken(3),
        }),
    });
    h.event(Event::OwnerWatchResult {
        id: watches(&commands)[0].0,
        result: Ok(true),
    });
    let commands = h.advance(secs(10));
    assert_eq!(claims(&commands).len(), 1, "{commands:?}");
}

#[test]
fn no_node_on_the_follow_up_read_retries_after_a_bounded_backoff_forever() {
    let config = base_config();
    let (min, max) = (config.backoff_min(), config.backoff_max());
    let mut h = Harness::new(config);
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let mut claim = claims(&commands)[0].0;
    let mut stalled = 0;
    for round in 0..50 {
        let commands = h.event(Event::ClaimResult {
            id: claim,
            result: Err(StoreError::NoNode),
        });
        assert!(claims(&commands).is_empty(), "round {round}: {commands:?}");
        assert!(h.reports().is_empty(), "round {round}: {commands:?}");
        let at = h.member.poll_timeout().expect("a retry is scheduled");
        let delay = at - h.now;
        assert!(delay >= min / 2 && delay <= max, "round {round}: {delay:?}");
        let commands = h.advance(delay);
        stalled += h
            .reports()
            .iter()
            .filter(|e| matches!(e, Error::ClaimStalled { .. }))
            .count();
        let again = claims(&commands);
        assert_eq!(again.len(), 1, "round {round}: {commands:?}");
        assert_eq!(again[0].1, tp(0));
        claim = again[0].0;
    }
    assert!(
        h.elapsed() > secs(60),
        "the backoff grew: {:?}",
        h.elapsed()
    );
    assert!(stalled <= 1);
    assert_eq!(h.member.assigned(), &BTreeSet::from([tp(0)]));
    assert_eq!(h.own(claim, &tp(0), 8, Some(1)), FetchFrom::Offset(1));
}

#[test]
fn unknown_claim_outcome_is_retried_and_our_own_record_is_recognised() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    let commands = h.event(Event::ClaimResult {
        id: claim,
        result: Err(StoreError::ConnectionLoss),
    });
    assert!(claims(&commands).is_empty());
    let commands = h.advance(secs(2));
    let retry = claims(&commands);
    assert_eq!(retry.len(), 1, "{commands:?}");

    // The first create went through: the record carries our session.
    let commands = h.event(Event::ClaimResult {
        id: retry[0].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid(OURS)),
            session: SessionId(1),
            token: FencingToken(12),
        }),
    });
    assert!(watches(&commands).is_empty(), "{commands:?}");
    let reads = read_offsets(&commands);
    assert_eq!(reads.len(), 1, "{commands:?}");
    h.event(Event::OffsetResult {
        id: reads[0].0,
        result: Ok(Some(Committed::at(4))),
    });
    assert_eq!(
        h.starts(),
        vec![(tp(0), FetchFrom::Offset(4), FencingToken(12))]
    );
}

#[test]
fn an_unknown_claim_outcome_is_cleaned_up_when_the_partition_moves_away() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    h.event(Event::ClaimResult {
        id: claim,
        result: Err(StoreError::ConnectionLoss),
    });
    // During the backoff the partition goes to m0: our create may have
    // landed, so the record is deleted if it is ours.
    let commands = h.members(&[info("m0"), info(OURS)]);
    let released = releases(&commands);
    assert_eq!(released.len(), 1, "{commands:?}");
    assert_eq!((&released[0].1, released[0].2), (&tp(0), None));
    assert!(claims(&commands).is_empty());
}

#[test]
fn a_claim_in_flight_when_the_partition_moves_away_is_released_if_it_landed() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    let commands = h.members(&[info("m0"), info(OURS)]);
    assert!(releases(&commands).is_empty(), "{commands:?}");
    let commands = h.event(Event::ClaimResult {
        id: claim,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(6),
            committed: None,
        }),
    });
    assert!(h.starts().is_empty(), "{commands:?}");
    let released = releases(&commands);
    assert_eq!(released.len(), 1, "{commands:?}");
    assert_eq!(
        (&released[0].1, released[0].2),
        (&tp(0), Some(FencingToken(6)))
    );
}

#[test]
fn stale_and_repeated_results_change_nothing() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    h.own(claim, &tp(0), 10, Some(0));

    let unknown = RequestId(9_999);
    for event in [
        Event::ClaimResult {
            id: unknown,
            result: Ok(ClaimOutcome::Created {
                token: FencingToken(11),
                committed: None,
            }),
        },
        Event::OffsetResult {
            id: unknown,
            result: Ok(Some(Committed::at(3))),
        },
        Event::CommitResult {
            id: unknown,
            result: Err(StoreError::NotOwner),
        },
        Event::MembersResult {
            id: unknown,
            result: Ok(vec![info("m0")]),
        },
        Event::RegisterResult {
            id: unknown,
            result: Err(StoreError::Other(tenure_core::ClientError::message("boom"))),
        },
        Event::ReleaseResult {
            id: unknown,
            result: Ok(()),
        },
        // A second answer to the claim already answered.
        Event::ClaimResult {
            id: claim,
            result: Ok(ClaimOutcome::Held {
                owner: Some(mid("m2")),
                session: SessionId(5),
                token: FencingToken(11),
            }),
        },
        Event::ClaimResult {
            id: claim,
            result: Err(StoreError::NoNode),
        },
        // A stray notification for a partition we own.
        Event::OwnerDeleted { partition: tp(0) },
    ] {
        let commands = h.event(event.clone());
        assert!(commands.is_empty(), "{event:?} -> {commands:?}");
    }
    assert_eq!(
        h.member.fetching().collect::<Vec<_>>(),
        vec![(&tp(0), FencingToken(10))]
    );
    assert_eq!(h.member.assigned(), &BTreeSet::from([tp(0)]));
    assert!(h.member.is_settled());
}

#[test]
fn a_stale_offset_read_result_does_not_restart_fetching() {
    let mut h = Harness::new(base_config());
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let claim = claims(&commands)[0].0;
    let commands = h.event(Event::ClaimResult {
        id: claim,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(10),
            committed: None,
        }),
    });
    let read = read_offsets(&commands)[0].0;
    h.event(Event::OffsetResult {
        id: read,
        result: Ok(Some(Committed::at(5))),
    });
    assert_eq!(h.starts().len(), 1);
    let second = h.event(Event::OffsetResult {
        id: read,
        result: Ok(Some(Committed::at(1))),
    });
    assert!(second.is_empty(), "{second:?}");
    assert_eq!(h.member.committed(&tp(0)), Some(5));
}

// ----- releases -----

#[test]
fn a_moved_partition_stops_drains_then_releases_with_its_final_commit() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.auto_heartbeat = Some(Ok(()));
    h.owning(2);
    h.processed(0, 10);

    let commands = h.members(&[info("m0"), info(OURS)]);
    assert!(
        commands.is_empty(),
        "nothing for the store yet: {commands:?}"
    );
    assert_eq!(
        h.fetches,
        vec![FetchCommand::Stop {
            partition: tp(0),
            token: FencingToken(100)
        }],
        "stop first, and only the moved partition"
    );
    assert_eq!(
        h.app_events,
        vec![AppEvent::Releasing {
            partition: tp(0),
            token: FencingToken(100)
        }]
    );
    assert_eq!(h.member.assigned(), &BTreeSet::from([tp(1)]));

    // In-flight messages are still acknowledged while draining.
    assert!(h.processed(0, 12).is_empty());
    let commands = h.advance(secs(30));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert!(releases(&commands).is_empty(), "{commands:?}");

    // The release goes out once drained, carrying the final commit: one
    // request, no commit of its own before it.
    let commands = h.drained(0);
    assert!(commits(&commands).is_empty(), "{commands:?}");
    let released = final_commits(&commands);
    assert_eq!(
        released
            .iter()
            .map(|r| (&r.1, r.2, r.3))
            .collect::<Vec<_>>(),
        vec![(&tp(0), 13, Some(FencingToken(100)))],
        "{commands:?}"
    );
    assert_eq!(releases(&commands).len(), 1, "{commands:?}");
    assert_eq!(
        h.app_events,
        vec![AppEvent::Committing {
            partition: tp(0),
            token: FencingToken(100),
            offset: 13
        }]
    );

    // An acknowledgement after the final commit was sent is ignored.
    assert!(h.processed(0, 20).is_empty());
    assert!(h
        .event(Event::ReleaseResult {
            id: released[0].0,
            result: Ok(())
        })
        .is_empty());
    assert_eq!(
        h.app_events,
        vec![
            AppEvent::Committed {
                partition: tp(0),
                token: FencingToken(100),
                offset: 13
            },
            AppEvent::Released {
                partition: tp(0),
                token: FencingToken(100)
            }
        ],
        "committed and handed over, not lost"
    );
    let stats = h.member.stats();
    assert_eq!(
        (stats.claims, stats.released, stats.lost, stats.commits),
        (2, 1, 0, 1),
        "{stats:?}"
    );
    assert_eq!(
        h.member.owned().collect::<Vec<_>>(),
        vec![(&tp(1), FencingToken(101))]
    );
    let commands = h.advance(secs(20));
    assert!(commits(&commands).is_empty(), "{commands:?}");
}

#[test]
fn a_release_that_never_drains_times_out_then_commits_and_releases() {
    let mut config = config_with(&[(0, "m0")]);
    config = config.with_processing_timeout(secs(30));
    let mut h = Harness::new(config);
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.processed(0, 4);
    h.members(&[info("m0"), info(OURS)]);
    assert_eq!(h.stops(), vec![(tp(0), FencingToken(100))]);

    let commands = h.advance(secs(30) - ms(1));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert!(h.reports().is_empty(), "{commands:?}");

    let commands = h.advance(ms(1));
    assert_eq!(
        h.reports(),
        vec![Error::DrainTimeout {
            partition: tp(0),
            timeout: secs(30)
        }]
    );
    let sent = final_commits(&commands);
    assert_eq!(sent.len(), 1, "{commands:?}");
    assert_eq!(sent[0].2, 5);
    assert!(commits(&commands).is_empty());

    // Late acknowledgements and a late drain are ignored.
    assert!(h.processed(0, 9).is_empty());
    assert!(h.drained(0).is_empty());
    let commands = h.event(Event::ReleaseResult {
        id: sent[0].0,
        result: Ok(()),
    });
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(h.member.committed(&tp(0)), None, "the partition is gone");
    assert_eq!(h.member.stats().commits, 1);
    assert_eq!(h.member.stats().released, 1);
}

/// A progress record of the offsets `done`.
fn done(offsets: &[Offset]) -> Progress {
    let mut progress = Progress::new();
    for &offset in offsets {
        progress.mark_done(offset);
    }
    progress
}

/// The commits among `commands` with the progress each writes.
fn progress_commits(commands: &[StoreRequest]) -> Vec<(TopicPartition, Offset, Progress)> {
    commands
        .iter()
        .filter_map(|c| match &c.op {
            StoreOp::CommitOffset {
                partition,
                offset,
                progress,
                ..
            } => Some((partition.clone(), *offset, progress.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn progress_read_with_the_offset_reaches_the_fetch_and_goes_with_every_commit() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.auto_heartbeat = Some(Ok(()));
    let ours = h.member.info().clone();
    h.join(&[ours]);
    let claimed = claims(&h.set_counts(counts(1)));
    let commands = h.event(Event::ClaimResult {
        id: claimed[0].0,
        result: Ok(ClaimOutcome::Created {
            token: FencingToken(100),
            committed: None,
        }),
    });
    let read = read_offsets(&commands);
    let stored = Committed {
        offset: 10,
        progress: done(&[12, 13]),
    };
    h.event(Event::OffsetResult {
        id: read[0].0,
        result: Ok(Some(stored.clone())),
    });
    assert_eq!(
        h.fetches,
        vec![FetchCommand::Start {
            partition: tp(0),
            from: FetchFrom::Offset(10),
            token: FencingToken(100),
            progress: stored.progress.clone(),
        }],
        "the fetch skips what the record says was done"
    );
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "nothing new: {commands:?}");

    // More done above the frontier, which stays: due all the same.
    let token = FencingToken(100);
    h.input(|member, now| member.progressed(now, &tp(0), token, 10, done(&[12, 13, 15])));
    let commands = h.advance(secs(5));
    let sent = progress_commits(&commands);
    assert_eq!(sent, vec![(tp(0), 10, done(&[12, 13, 15]))], "{commands:?}");
    h.event(Event::CommitResult {
        id: commits(&commands)[0].0,
        result: Ok(()),
    });
    let commands = h.advance(secs(5));
    assert!(
        commits(&commands).is_empty(),
        "stored already: {commands:?}"
    );

    // A stale report (a lower frontier) changes nothing.
    h.input(|member, now| member.progressed(now, &tp(0), token, 9, done(&[11])));
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");

    // The frontier moves: the record keeps only what lies above it.
    h.input(|member, now| member.progressed(now, &tp(0), token, 14, done(&[12, 13, 15])));
    let commands = h.advance(secs(5));
    assert_eq!(progress_commits(&commands), vec![(tp(0), 14, done(&[15]))]);
    h.event(Event::CommitResult {
        id: commits(&commands)[0].0,
        result: Ok(()),
    });
    assert_eq!(h.member.committed(&tp(0)), Some(14));

    // The release's final commit carries the progress too.
    h.input(|member, now| member.progressed(now, &tp(0), token, 14, done(&[15, 16])));
    h.members(&[info("m0"), info(OURS)]);
    let commands = h.drained(0);
    let carried: Vec<_> = commands
        .iter()
        .filter_map(|c| match &c.op {
            StoreOp::Release {
                commit, progress, ..
            } => Some((*commit, progress.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(carried, vec![(Some(14), done(&[15, 16]))], "{commands:?}");
}

#[test]
fn a_release_whose_claim_is_another_s_reports_its_final_commit_fenced_and_is_lost() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.processed(0, 7);
    h.members(&[info("m0"), info(OURS)]);
    let sent = final_commits(&h.drained(0));
    assert_eq!(sent.len(), 1);
    let commands = h.event(Event::ReleaseResult {
        id: sent[0].0,
        result: Err(StoreError::NotOwner),
    });
    assert!(commands.is_empty(), "not ours to claim: {commands:?}");
    assert_eq!(
        h.reports(),
        vec![Error::CommitFenced {
            partition: tp(0),
            offset: 8
        }]
    );
    assert!(
        h.app_events.contains(&AppEvent::CommitFenced {
            partition: tp(0),
            token: FencingToken(100),
            offset: 8
        }),
        "{:?}",
        h.app_events
    );
    assert!(
        h.app_events.contains(&AppEvent::Lost {
            partition: tp(0),
            token: FencingToken(100)
        }),
        "lost, not handed over: {:?}",
        h.app_events
    );
    let stats = h.member.stats();
    assert_eq!(
        (
            stats.commits,
            stats.commits_fenced,
            stats.released,
            stats.lost
        ),
        (0, 1, 0, 1),
        "{stats:?}"
    );
    assert!(h.member.owned().next().is_none());
}

#[test]
fn a_release_whose_answer_is_lost_goes_again_with_its_final_commit() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.processed(0, 7);
    h.members(&[info("m0"), info(OURS)]);
    let first = final_commits(&h.drained(0));
    assert_eq!(first.len(), 1);
    assert!(h
        .event(Event::ReleaseResult {
            id: first[0].0,
            result: Err(StoreError::ConnectionLoss),
        })
        .is_empty());
    assert!(
        h.app_events.iter().any(|e| matches!(
            e,
            AppEvent::CommitFailed {
                offset: 8,
                error: StoreError::ConnectionLoss,
                ..
            }
        )),
        "{:?}",
        h.app_events
    );
    // After the backoff, the same release with the same commit.
    let commands = h.advance(secs(5));
    let again = final_commits(&commands);
    assert_eq!(
        again.iter().map(|r| (&r.1, r.2, r.3)).collect::<Vec<_>>(),
        vec![(&tp(0), 8, Some(FencingToken(100)))],
        "{commands:?}"
    );
    // The first attempt had gone through: the record is gone, and whether
    // this commit was written is not known.
    assert!(h
        .event(Event::ReleaseResult {
            id: again[0].0,
            result: Err(StoreError::NoNode),
        })
        .is_empty());
    assert!(
        h.app_events.contains(&AppEvent::Released {
            partition: tp(0),
            token: FencingToken(100)
        }),
        "{:?}",
        h.app_events
    );
    assert!(!h
        .app_events
        .iter()
        .any(|e| matches!(e, AppEvent::Committed { .. })));
    assert!(h.member.owned().next().is_none());
}

#[test]
fn a_release_with_nothing_processed_deletes_the_claim_without_committing() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.owning(1);
    h.members(&[info("m0"), info(OURS)]);
    let commands = h.drained(0);
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert_eq!(
        releases(&commands)
            .iter()
            .map(|r| (&r.1, r.2))
            .collect::<Vec<_>>(),
        vec![(&tp(0), Some(FencingToken(100)))]
    );
}

#[test]
fn a_rebalance_that_adds_partitions_does_not_touch_the_kept_ones() {
    let mut h = Harness::new(base_config());
    h.owning(2);
    let commands = h.set_counts(counts(3));
    assert!(h.stops().is_empty(), "{commands:?}");
    assert!(releases(&commands).is_empty(), "{commands:?}");
    assert_eq!(
        claims(&commands)
            .into_iter()
            .map(|c| c.1)
            .collect::<Vec<_>>(),
        vec![tp(2)]
    );
    assert_eq!(h.member.fetching().count(), 2);
}

#[test]
fn a_rebalance_that_moves_one_partition_pauses_only_that_one() {
    let mut h = Harness::new(config_with(&[(1, "m0")]));
    h.owning(3);
    let commands = h.members(&[info(OURS), info("m0")]);
    assert_eq!(h.stops(), vec![(tp(1), FencingToken(101))]);
    assert!(claims(&commands).is_empty(), "{commands:?}");
    assert_eq!(
        h.member.fetching().map(|f| f.0.clone()).collect::<Vec<_>>(),
        vec![tp(0), tp(2)]
    );
}

#[test]
fn a_fenced_commit_stops_fetching_reports_and_claims_again() {
    let mut h = Harness::new(base_config());
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.processed(0, 5);
    let commands = h.advance(secs(5));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "{commands:?}");

    let commands = h.event(Event::CommitResult {
        id: sent[0].0,
        result: Err(StoreError::NotOwner),
    });
    assert_eq!(h.stops(), vec![(tp(0), FencingToken(100))]);
    assert_eq!(
        h.reports(),
        vec![Error::CommitFenced {
            partition: tp(0),
            offset: 6
        }]
    );
    // Fenced, lost (not released), and claimed anew.
    assert_eq!(
        h.told(),
        vec![
            &AppEvent::CommitFenced {
                partition: tp(0),
                token: FencingToken(100),
                offset: 6
            },
            &AppEvent::Lost {
                partition: tp(0),
                token: FencingToken(100)
            },
            &AppEvent::Claiming { partition: tp(0) },
        ]
    );
    let again = claims(&commands);
    assert_eq!(again.len(), 1, "still assigned: {commands:?}");
    // In the one ordered output, the stop comes before the new claim of
    // the same step: no driver can claim again while still fetching.
    let stop = h.outputs.iter().position(
        |o| matches!(o, Output::Fetch(FetchCommand::Stop { partition, .. }) if *partition == tp(0)),
    );
    let claim = h.outputs.iter().position(|o| {
        matches!(o, Output::Store(StoreRequest { op: StoreOp::Claim { partition, .. }, .. }) if *partition == tp(0))
    });
    assert!(
        matches!((stop, claim), (Some(s), Some(c)) if s < c),
        "the stop must come first: {:?}",
        h.outputs
    );
    let stats = h.member.stats();
    assert_eq!(
        (
            stats.claims,
            stats.lost,
            stats.commits_fenced,
            stats.problems
        ),
        (1, 1, 1, 1),
        "{stats:?}"
    );
    assert!(h.member.fetching().next().is_none());
    assert!(h.member.owned().next().is_none());
    // Acknowledgements under the fenced claim are not committed.
    h.processed(0, 9);
    let commands = h.advance(secs(5));
    assert!(commits(&commands).is_empty(), "{commands:?}");
}

#[test]
fn a_stalled_claim_is_reported_once_and_goes_on() {
    let config = base_config();
    let threshold = config.claim_stall_threshold();
    let mut h = Harness::new(config);
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(1));
    let mut pending = commands;
    let mut stalls = Vec::new();
    let mut claims_after_report = 0;
    while h.elapsed() < threshold * 3 {
        for command in std::mem::take(&mut pending) {
            let event = match (command.id, command.op) {
                (id, StoreOp::Claim { .. }) => {
                    if !stalls.is_empty() {
                        claims_after_report += 1;
                    }
                    Event::ClaimResult {
                        id,
                        result: Ok(ClaimOutcome::Held {
                            owner: Some(mid("m2")),
                            session: SessionId(50),
                            token: FencingToken(2),
                        }),
                    }
                }
                (id, StoreOp::WatchOwner { .. }) => Event::OwnerWatchResult {
                    id,
                    result: Ok(true),
                },
                other => panic!("unexpected {other:?}"),
            };
            pending.extend(h.event(event));
            stalls.extend(h.reports().into_iter().map(|e| (h.elapsed(), e)));
        }
        pending.extend(h.advance(secs(1)));
        stalls.extend(h.reports().into_iter().map(|e| (h.elapsed(), e)));
    }
    assert_eq!(stalls.len(), 1, "{stalls:?}");
    let (when, error) = &stalls[0];
    assert!(
        *when >= threshold && *when <= threshold + secs(1),
        "{when:?}"
    );
    match error {
        Error::ClaimStalled {
            partition,
            waited,
            holder,
        } => {
            assert_eq!(partition, &tp(0));
            assert!(*waited >= threshold);
            assert_eq!(holder.as_ref(), Some(&mid("m2")));
        }
        other => panic!("expected ClaimStalled, got {other:?}"),
    }
    assert!(claims_after_report > 0, "the claim goes on");
}

// ----- sessions -----

#[test]
fn a_suspended_session_holds_fetching_before_it_could_expire_and_resumes_where_it_stood() {
    let config = base_config();
    let (timeout, margin) = (config.session_timeout(), config.suspension_margin());
    let mut h = Harness::new(config);
    h.owning(1);
    h.advance(secs(1));
    h.processed(0, 3);
    // The backend's word is taken when it is older than what the member
    // saw itself (only the backend knows what renews its session).
    let last_heard = h.t0;
    h.auto_heartbeat = Some(Err(StoreError::ConnectionLoss));
    let commands = h.event(Event::SessionSuspended { last_heard });
    assert!(h.holds().is_empty(), "{commands:?}");

    let deadline = last_heard + timeout - margin;
    assert!(h.member.poll_timeout().is_some_and(|t| t <= deadline));
    let mut before = h.advance(deadline - h.now - ms(1));
    assert!(h.holds().is_empty(), "{before:?}");
    h.processed(0, 7);
    // Answer the commit due on the way with a lost connection.
    for (id, ..) in commits(&before) {
        before.extend(h.event(Event::CommitResult {
            id,
            result: Err(StoreError::ConnectionLoss),
        }));
    }
    h.advance(ms(1));
    // Held, not stopped: nothing to drain, the claim and position stay.
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), true)]);
    assert!(h.stops().is_empty());
    assert!(h.member.fetching().next().is_none());

    // Past that point nothing is committed while suspended.
    let commands = h.advance(secs(20));
    assert!(commits(&commands).is_empty(), "{commands:?}");
    assert!(
        h.starts().is_empty() && h.holds().is_empty(),
        "{commands:?}"
    );

    h.auto_heartbeat = None;
    let commands = h.event(Event::SessionResumed);
    assert!(h.holds().is_empty(), "not before the server answers");
    let beats = heartbeats(&commands);
    assert_eq!(beats.len(), 1, "confirm at once: {commands:?}");
    h.event(Event::HeartbeatResult {
        id: beats[0],
        result: Ok(()),
    });
    // Goes on where it stood: no new fetch, same claim.
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), false)]);
    assert!(h.starts().is_empty());
    assert_eq!(h.member.fetching().count(), 1);
}

#[test]
fn an_answer_alone_does_not_renew_the_lease() {
    let config = base_config();
    let lease = config.session_timeout() - config.suspension_margin();
    let mut h = Harness::new(config);
    h.owning(1);
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + lease));
    // A heartbeat answered with no word from the backend that the leader
    // renewed the session (a follower answering from what it has).
    let commands = h.advance(secs(4));
    let beats = heartbeats(&commands);
    assert_eq!(beats.len(), 1, "{commands:?}");
    let after = h.input(|member, now| {
        member.handle_event(
            now,
            Event::HeartbeatResult {
                id: beats[0],
                result: Ok(()),
            },
        )
    });
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + lease));
    // Nor does it bring the next heartbeat on at once: that comes a third
    // of the session after the one answered, renewal or not.
    assert!(heartbeats(&after).is_empty(), "{after:?}");
    let commands = h.advance(lease - h.elapsed());
    assert_eq!(heartbeats(&commands).len(), 1, "{commands:?}");
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), true)]);
}

#[test]
fn a_renewal_the_leader_counts_late_renews_the_lease_once_a_later_one_proves_it() {
    let config = base_config();
    let lease = config.session_timeout() - config.suspension_margin();
    // A ZooKeeper follower reports activity at its leader's next ping.
    let counted_after = config.session_timeout() / 3;
    let mut h = Harness::new(config);
    h.owning(1);
    let renewed = |h: &mut Harness, counted_after| {
        let sent = h.now;
        h.event(Event::SessionRenewed {
            sent,
            counted_after,
        });
    };
    h.advance(secs(3));
    renewed(&mut h, counted_after);
    // The leader may count nothing of it before the member's lease ends:
    // the lease still leans on the session's opening.
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + lease));
    // Too soon after to prove it.
    h.advance(secs(3));
    renewed(&mut h, counted_after);
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + lease));
    // Sent a whole delay after the first was answered: the follower has
    // reported it, but the report may not have reached the leader yet.
    h.advance(secs(1));
    renewed(&mut h, counted_after);
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + lease));
    // Sent after that answer: the leader read the report before it, and
    // answered, so it kept the session then: the first is counted.
    h.advance(ms(100));
    renewed(&mut h, counted_after);
    assert_eq!(h.member.consume_deadline(), Some(h.t0 + secs(3) + lease));
    // Consumption goes on past the first lease, held at the proven one.
    h.advance(secs(2) - ms(100));
    assert!(h.holds().is_empty());
    h.advance(secs(3) + lease - h.elapsed());
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), true)]);
}

#[test]
fn heartbeats_come_sooner_where_the_leader_counts_renewals_late() {
    let config = base_config();
    let counted_after = config.session_timeout() / 3;
    let mut h = Harness::new(config);
    h.owning(1);
    h.advance(secs(1));
    h.event(Event::SessionRenewed {
        sent: h.now - ms(20),
        counted_after,
    });
    // Due a third of the delay after the latest answer, although the
    // leader may not have counted it: the heartbeats after it prove it.
    let pace = counted_after / 3;
    assert!(heartbeats(&h.advance(pace - ms(1))).is_empty());
    assert_eq!(heartbeats(&h.advance(ms(1))).len(), 1);
}

#[test]
fn a_paused_process_stops_at_once_and_commits_only_after_confirmation() {
    let mut h = Harness::new(base_config());
    h.owning(1);
    h.processed(0, 5);
    // No event for three session timeouts.
    h.now = h.t0 + secs(30);
    h.member.handle_timeout(h.now);
    let commands = h.drain();
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), true)]);
    assert!(commits(&commands).is_empty(), "{commands:?}");
    let beats = heartbeats(&commands);
    assert_eq!(beats.len(), 1, "{commands:?}");

    // Unconfirmed, the next interval commits nothing either.
    let commands = h.advance(secs(6));
    assert!(commits(&commands).is_empty(), "{commands:?}");

    let commands = h.event(Event::HeartbeatResult {
        id: beats[0],
        result: Ok(()),
    });
    // The server heard the heartbeat at the 30 s mark: the lease runs again
    // from there, and the partition goes on where it stood.
    assert_eq!(h.holds(), vec![(tp(0), FencingToken(100), false)]);
    h.auto_heartbeat = Some(Ok(()));
    h.answer_heartbeats(commands);
    let commands = h.advance(secs(5));
    let sent = commits(&commands);
    assert_eq!(sent.len(), 1, "{commands:?}");
    assert_eq!(sent[0].2, 6);
}

#[test]
fn a_paused_process_does_not_commit_a_release_before_confirmation() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.owning(1);
    h.processed(0, 5);
    h.members(&[info("m0"), info(OURS)]);
    assert_eq!(h.stops().len(), 1);
    // Paused past the drain timeout and the session timeout.
    h.now = h.t0 + secs(70);
    h.member.handle_timeout(h.now);
    let commands = h.drain();
    assert!(
        commits(&commands).is_empty() && releases(&commands).is_empty(),
        "commit before the session is confirmed: {commands:?}"
    );
    // Confirmed alive, the release goes with its final commit.
    h.auto_heartbeat = Some(Ok(()));
    h.answer_heartbeats(commands);
    let commands = h.advance(secs(5));
    let sent = final_commits(&commands);
    assert_eq!(
        sent.iter().map(|c| (&c.1, c.2)).collect::<Vec<_>>(),
        vec![(&tp(0), 6)],
        "{commands:?}"
    );
}

#[test]
fn expiry_drops_everything_without_touching_the_store_and_rejoins() {
    let mut h = Harness::new(config_with(&[(2, "m2")]));
    h.join(&[info(OURS), info("m2")]);
    let commands = h.set_counts(counts(3));
    let claims0 = claims(&commands);
    assert_eq!(claims0.len(), 2, "{commands:?}");
    for (id, partition) in claims0 {
        let token = 100 + u64::from(partition.partition);
        h.own(id, &partition, token, Some(0));
    }
    // m2 leaves: p2 is ours to claim, held by m2 for now.
    let commands = h.members(&[info(OURS)]);
    let claim = claims(&commands);
    assert_eq!(claim.len(), 1);
    let commands = h.event(Event::ClaimResult {
        id: claim[0].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid("m2")),
            session: SessionId(9),
            token: FencingToken(1),
        }),
    });
    let watch = watches(&commands)[0].0;
    h.processed(0, 4);

    let commands = h.event(Event::SessionExpired);
    let stopped: BTreeSet<_> = h.stops().into_iter().collect();
    assert_eq!(
        stopped,
        BTreeSet::from([(tp(0), FencingToken(100)), (tp(1), FencingToken(101))])
    );
    assert_eq!(h.reports(), vec![Error::SessionExpired { partitions: 3 }]);
    assert!(commands.is_empty(), "nothing for the store: {commands:?}");
    // The application hears which claims were lost, and that the claim
    // still waiting on m2 was given up.
    assert_eq!(
        h.told(),
        vec![
            &AppEvent::Lost {
                partition: tp(0),
                token: FencingToken(100)
            },
            &AppEvent::Lost {
                partition: tp(1),
                token: FencingToken(101)
            },
            &AppEvent::ClaimAbandoned { partition: tp(2) },
        ]
    );
    assert!(h.member.fetching().next().is_none());
    assert!(h.member.owned().next().is_none());
    assert!(h.member.assigned().is_empty());

    // Old results and acknowledgements are ignored; nothing happens until a
    // new session.
    assert!(h
        .event(Event::OwnerWatchResult {
            id: watch,
            result: Ok(false)
        })
        .is_empty());
    assert!(h.processed(0, 9).is_empty());
    assert!(h.drained(0).is_empty());
    let commands = h.advance(secs(30));
    assert!(commands.is_empty(), "{commands:?}");

    let commands = h.event(Event::SessionEstablished {
        session: SessionId(2),
    });
    let commands = h.join_under(commands, &[info(OURS)]);
    let claims1 = claims(&commands);
    assert_eq!(claims1.len(), 3, "{commands:?}");
    // p0's record from the old session has not been deleted yet: not ours.
    let commands = h.event(Event::ClaimResult {
        id: claims1[0].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid(OURS)),
            session: SessionId(1),
            token: FencingToken(100),
        }),
    });
    assert_eq!(watches(&commands).len(), 1, "{commands:?}");
    assert!(read_offsets(&commands).is_empty(), "{commands:?}");
    let from = h.own(claims1[1].0, &tp(1), 201, Some(0));
    assert_eq!(from, FetchFrom::Offset(0));
}

#[test]
fn a_new_session_without_an_expiry_still_drops_the_old_claims() {
    let mut h = Harness::new(base_config());
    h.owning(2);
    // The backend opened a new session without saying the old one ended:
    // claims made under the old one are not ours any more.
    let commands = h.event(Event::SessionEstablished {
        session: SessionId(2),
    });
    let stopped: BTreeSet<_> = h.stops().into_iter().collect();
    assert_eq!(
        stopped,
        BTreeSet::from([(tp(0), FencingToken(100)), (tp(1), FencingToken(101))])
    );
    assert!(h
        .reports()
        .contains(&Error::SessionExpired { partitions: 2 }));
    assert!(h.member.owned().next().is_none());
    // It registers again under the new session, and its commands say so.
    let register = commands.iter().find_map(|c| match c {
        StoreRequest {
            session,
            op: StoreOp::Register { .. },
            ..
        } => Some(*session),
        _ => None,
    });
    assert_eq!(register, Some(SessionId(2)), "{commands:?}");
}

#[test]
fn a_strategy_mismatch_is_reported_once_and_freezes_the_assignment() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.owning(2);
    let before = h.member.assigned().clone();
    let commands = h.members(&[info(OURS), info_with("m0", "range")]);
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(
        h.reports(),
        vec![Error::StrategyMismatch {
            ours: STRATEGY.to_owned(),
            member: mid("m0"),
            theirs: "range".to_owned(),
        }]
    );
    let commands = h.members(&[info(OURS), info_with("m0", "range")]);
    assert!(commands.is_empty(), "{commands:?}");
    assert!(h.reports().is_empty(), "reported once");
    let commands = h.set_counts(counts(4));
    assert!(commands.is_empty(), "no new claims: {commands:?}");
    assert_eq!(h.member.assigned(), &before);
    assert_eq!(h.member.fetching().count(), 2);

    // Once the other member agrees, the assignment moves again.
    let commands = h.members(&[info(OURS), info("m0")]);
    assert_eq!(h.stops(), vec![(tp(0), FencingToken(100))]);
    assert_eq!(claims(&commands).len(), 2, "{commands:?}");
}

#[test]
fn a_pattern_subscription_mismatch_is_reported_once_and_freezes_the_assignment() {
    let mut config = config_with(&[(0, "m0")]);
    let ours = tenure_core::Subscription::matching("t|u").unwrap();
    config = config.with_subscription(ours.clone());
    let mut h = Harness::new(config);
    h.owning(2);
    let before = h.member.assigned().clone();
    let mine = MemberInfo {
        subscription: ours.clone(),
        ..info(OURS)
    };
    let theirs = tenure_core::Subscription::matching("t").unwrap();
    let other = MemberInfo {
        subscription: theirs.clone(),
        ..info("m0")
    };
    let commands = h.members(&[mine.clone(), other.clone()]);
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(
        h.reports(),
        vec![Error::SubscriptionMismatch {
            ours: ours.to_string(),
            member: mid("m0"),
            theirs: theirs.to_string(),
        }]
    );
    let commands = h.members(&[mine.clone(), other]);
    assert!(commands.is_empty(), "{commands:?}");
    assert!(h.reports().is_empty(), "reported once");
    let commands = h.set_counts(counts(4));
    assert!(commands.is_empty(), "no new claims: {commands:?}");
    assert_eq!(h.member.assigned(), &before);

    // A member that names the topics disagrees with a pattern too.
    let commands = h.members(&[mine.clone(), info("m0")]);
    assert!(commands.is_empty(), "{commands:?}");
    assert!(matches!(
        h.reports().as_slice(),
        [Error::SubscriptionMismatch { theirs, .. }] if theirs == "t"
    ));

    // Once the other member subscribes the same way, the assignment moves.
    let agreeing = MemberInfo {
        subscription: ours,
        ..info("m0")
    };
    let commands = h.members(&[mine, agreeing]);
    assert_eq!(h.stops(), vec![(tp(0), FencingToken(100))]);
    assert_eq!(claims(&commands).len(), 2, "{commands:?}");
}

#[test]
fn members_naming_different_topics_agree_as_kafka_0_8s_did() {
    let mut h = Harness::new(base_config());
    h.owning(2);
    let other = MemberInfo {
        subscription: tenure_core::Subscription::topics(["t", "u"]).unwrap(),
        ..info("m0")
    };
    h.members(&[info(OURS), other]);
    assert!(h.reports().is_empty(), "{:?}", h.reports());
}

#[test]
fn shutdown_releases_everything_then_deregisters_and_closes() {
    let mut h = Harness::new(base_config());
    h.owning(2);
    h.processed(0, 9);
    let commands = h.shutdown();
    let stopped: BTreeSet<_> = h.stops().into_iter().collect();
    assert_eq!(
        stopped,
        BTreeSet::from([(tp(0), FencingToken(100)), (tp(1), FencingToken(101))])
    );
    assert!(
        commands.is_empty(),
        "nothing for the store yet: {commands:?}"
    );

    let commands = h.drained(0);
    let release0 = final_commits(&commands);
    assert_eq!(
        release0.iter().map(|c| (&c.1, c.2)).collect::<Vec<_>>(),
        vec![(&tp(0), 10)]
    );
    let commands = h.drained(1);
    let release1 = releases(&commands);
    assert_eq!(release1.len(), 1, "{commands:?}");
    assert!(
        final_commits(&commands).is_empty(),
        "nothing processed, nothing to commit: {commands:?}"
    );

    let commands = h.event(Event::ReleaseResult {
        id: release0[0].0,
        result: Ok(()),
    });
    assert!(
        commands.is_empty(),
        "one release still pending: {commands:?}"
    );
    let commands = h.event(Event::ReleaseResult {
        id: release1[0].0,
        result: Err(StoreError::NoNode),
    });
    let deregister = match commands.as_slice() {
        [StoreRequest {
            id,
            op: StoreOp::Deregister,
            ..
        }] => *id,
        other => panic!("expected Deregister, got {other:?}"),
    };
    assert!(!h.member.is_closed());
    let commands = h.event(Event::DeregisterResult {
        id: deregister,
        result: Ok(()),
    });
    assert!(commands.is_empty());
    assert!(h.member.is_closed());
    assert_eq!(h.member.poll_timeout(), None);
    assert!(h.event(Event::MembersChanged).is_empty());
}

#[test]
fn shutdown_before_any_session_closes_at_once() {
    let mut h = Harness::new(base_config());
    let commands = h.shutdown();
    assert!(commands.is_empty(), "{commands:?}");
    assert!(h.member.is_closed());
}

// ----- timers -----

#[test]
fn poll_timeout_is_in_the_future_after_handle_timeout_during_a_shutdown() {
    let mut h = Harness::new(base_config());
    h.owning(1);
    let commands = h.event(Event::MembersChanged);
    let watch = match commands.as_slice() {
        [StoreRequest {
            id,
            op: StoreOp::WatchMembers,
            ..
        }] => *id,
        other => panic!("{other:?}"),
    };
    h.event(Event::MembersResult {
        id: watch,
        result: Err(StoreError::ConnectionLoss),
    });
    // The partition drains slowly during the shutdown.
    h.shutdown();
    assert_eq!(h.stops().len(), 1);
    let at = h.member.poll_timeout().unwrap();
    h.now = at;
    h.member.handle_timeout(at);
    h.drain();
    let next = h.member.poll_timeout();
    assert!(next.is_none_or(|n| n > at), "{next:?} <= {at:?}");
}

#[test]
fn poll_timeout_is_in_the_future_after_handle_timeout_while_registering_again() {
    let mut h = Harness::new(base_config());
    h.owning(1);
    let commands = h.advance(secs(4));
    let beats = heartbeats(&commands);
    assert_eq!(beats.len(), 1, "{commands:?}");
    h.event(Event::HeartbeatResult {
        id: beats[0],
        result: Err(StoreError::ConnectionLoss),
    });
    // Our registration record vanished: the member registers again.
    let commands = h.members(&[info("m0")]);
    assert!(
        commands.iter().any(|c| matches!(
            c,
            StoreRequest {
                op: StoreOp::Register { .. },
                ..
            }
        )),
        "{commands:?}"
    );
    let at = h.member.poll_timeout().unwrap();
    h.now = at.max(h.now);
    h.member.handle_timeout(h.now);
    h.drain();
    let next = h.member.poll_timeout();
    assert!(next.is_none_or(|n| n > h.now), "{next:?} <= {:?}", h.now);
}

#[test]
fn a_failed_interval_commit_does_not_cut_a_drain_short() {
    let mut h = Harness::new(config_with(&[(0, "m0")]));
    h.auto_heartbeat = Some(Ok(()));
    h.owning(1);
    h.processed(0, 5);
    let commands = h.advance(secs(5));
    let interval = commits(&commands);
    assert_eq!(interval.len(), 1, "{commands:?}");
    // The partition moves while the interval commit is in flight.
    h.members(&[info("m0"), info(OURS)]);
    assert_eq!(h.stops().len(), 1);
    let commands = h.event(Event::CommitResult {
        id: interval[0].0,
        result: Err(StoreError::ConnectionLoss),
    });
    assert!(commands.is_empty(), "{commands:?}");
    // The application is still draining.
    let commands = h.advance(secs(10));
    assert!(
        commits(&commands).is_empty(),
        "commit before Drained: {commands:?}"
    );
    assert!(
        releases(&commands).is_empty(),
        "release before Drained: {commands:?}"
    );
}

// ----- configuration -----

#[test]
fn invalid_configurations_are_refused_with_the_setting_named() {
    let t0 = Instant::now();
    let refused = |config: Config| Member::new(config, 1, t0).err();
    for name in [
        "session_timeout",
        "processing_timeout",
        "commit_interval",
        "backoff_min",
        "backoff_max",
        "claim_stall_threshold",
        "suspension_margin",
    ] {
        let config = base_config();
        let zero = Duration::ZERO;
        let config = match name {
            "session_timeout" => config
                .with_session_timeout(zero)
                .with_suspension_margin(secs(1)),
            "processing_timeout" => config.with_processing_timeout(zero),
            "commit_interval" => config.with_commit_interval(zero),
            "backoff_min" => config.with_backoff(zero, secs(2)),
            "backoff_max" => config.with_backoff(secs(1), zero),
            "suspension_margin" => config.with_suspension_margin(zero),
            _ => config.with_claim_stall_threshold(zero),
        };
        assert_eq!(refused(config), Some(ConfigError::Zero { name }), "{name}");
    }

    let config = base_config().with_backoff(secs(3), secs(2));
    assert_eq!(
        refused(config),
        Some(ConfigError::NotBelow {
            name: "backoff_min",
            value: secs(3),
            bound_name: "backoff_max",
            bound: secs(2),
        })
    );
    let config = Config::new("g", OURS, ["t"])
        .unwrap()
        .with_backoff(secs(2), secs(2));
    assert!(Member::new(config, 1, t0).is_ok(), "equal bounds are fine");

    for margin in [secs(10), secs(11)] {
        let mut config = config_with(&[]);
        config = config.with_suspension_margin(margin);
        assert_eq!(
            refused(config),
            Some(ConfigError::NotBelow {
                name: "suspension_margin",
                value: margin,
                bound_name: "session_timeout",
                bound: secs(10),
            })
        );
    }

    for group in ["a/b", "", "..", "."] {
        match Config::new(group, OURS, ["t"]) {
            Err(ConfigError::Name(e)) => assert_eq!((e.kind, e.name.as_str()), ("group", group)),
            other => panic!("group {group:?}: {other:?}"),
        }
    }
    match Config::new("g", OURS, ["bad topic!"]) {
        Err(ConfigError::Name(e)) => assert_eq!((e.kind, e.name.as_str()), ("topic", "bad topic!")),
        other => panic!("{other:?}"),
    }
    let mut config = base_config();
    config = config.with_subscription(tenure_core::Subscription::Topics(
        ["bad topic!".to_owned()].into(),
    ));
    assert!(matches!(refused(config), Some(ConfigError::Name(_))));
    assert!(matches!(
        Config::new("g", "a/b", ["t"]),
        Err(ConfigError::Name(e)) if e.kind == "member id"
    ));
    assert_eq!(
        Config::new("g", OURS, Vec::<String>::new()).err(),
        Some(ConfigError::NoTopics)
    );
    let mut config = base_config();
    config = config.with_subscription(tenure_core::Subscription::Topics(Default::default()));
    assert_eq!(refused(config), Some(ConfigError::NoTopics));
}

#[test]
fn with_session_timeout_keeps_the_derived_settings_consistent() {
    let config = Config::new("g", OURS, ["t"])
        .unwrap()
        .with_session_timeout(secs(30));
    assert_eq!(config.session_timeout(), secs(30));
    assert_eq!(config.suspension_margin(), secs(6));
    assert_eq!(
        config.claim_stall_threshold(),
        config.processing_timeout() + secs(30)
    );
    assert!(config.validate().is_ok());
    // A short session timeout leaves a margin below it.
    let config = Config::new("g", OURS, ["t"])
        .unwrap()
        .with_session_timeout(ms(1));
    assert!(config.validate().is_ok(), "{config:?}");
}

// ----- determinism -----

type ScriptedRun = (Vec<StoreRequest>, Vec<FetchCommand>, Vec<Option<Duration>>);

fn scripted_run(seed: u64) -> ScriptedRun {
    let mut h = Harness::with_seed(config_with(&[(1, "m0")]), seed);
    let mut log = Vec::new();
    let mut timeouts = Vec::new();
    log.extend(h.join(&[info(OURS)]));
    log.extend(h.set_counts(counts(3)));
    let mut pending = log.clone();
    let mut fetches_seen = 0;
    for round in 0..40u64 {
        let mut next = Vec::new();
        // Fetches started since the last round get an acknowledgement.
        let started: Vec<FetchCommand> = h.fetch_log[fetches_seen..].to_vec();
        fetches_seen = h.fetch_log.len();
        for fetch in started {
            if let FetchCommand::Start {
                partition, token, ..
            } = fetch
            {
                next.extend(h.ack(partition, token, round as i64));
            }
        }
        for command in std::mem::take(&mut pending) {
            let event = match (command.id, command.op) {
                (id, StoreOp::Claim { .. }) => Event::ClaimResult {
                    id,
                    result: match round % 3 {
                        0 => Err(StoreError::NoNode),
                        1 => Err(StoreError::ConnectionLoss),
                        _ => Ok(ClaimOutcome::Created {
                            token: FencingToken(round),
                            committed: None,
                        }),
                    },
                },
                (id, StoreOp::ReadOffset { .. }) => Event::OffsetResult {
                    id,
                    result: Ok(Some(Committed::at(0))),
                },
                (id, StoreOp::Heartbeat) => Event::HeartbeatResult { id, result: Ok(()) },
                (id, StoreOp::CommitOffset { .. }) => Event::CommitResult { id, result: Ok(()) },
                _ => continue,
            };
            next.extend(h.event(event));
        }
        if round == 20 {
            next.extend(h.members(&[info(OURS), info("m0")]));
        }
        next.extend(h.advance(ms(300)));
        timeouts.push(h.member.poll_timeout().map(|t| t - h.t0));
        log.extend(next.iter().cloned());
        pending = next;
    }
    (log, h.fetch_log, timeouts)
}

#[test]
fn the_same_seed_and_events_give_the_same_commands() {
    let a = scripted_run(42);
    let b = scripted_run(42);
    assert!(a.0.len() > 10, "the script does something: {:?}", a.0);
    assert!(!a.1.is_empty(), "and fetches: {:?}", a.1);
    assert_eq!(a, b);
}

// ----- a resumed session (static membership) -----

/// A member whose process restarted and resumed its session finds its
/// registration and its claims: it keeps the claims its assignment gives
/// it, with their tokens (nothing moves), and releases the others.
#[test]
fn a_resumed_session_keeps_the_claims_it_is_assigned_and_releases_the_rest() {
    // Partition 1 goes to m2 while m2 is there; partition 0 to us.
    let mut h = Harness::new(config_with(&[(1, "m2")]));
    let commands = h.event(Event::SessionEstablished {
        session: SessionId(1),
    });
    let (register, watch) = match commands.as_slice() {
        [StoreRequest {
            id: r,
            op: StoreOp::Register { .. },
            ..
        }, StoreRequest {
            id: w,
            op: StoreOp::WatchMembers,
            ..
        }] => (*r, *w),
        other => panic!("expected Register and WatchMembers, got {other:?}"),
    };
    // The session still holds partitions 0 and 1 from before the restart.
    assert!(h
        .event(Event::ClaimsHeld {
            partitions: vec![tp(0), tp(1)],
        })
        .is_empty());
    assert!(h.set_counts(counts(2)).is_empty(), "not registered yet");
    // Our registration is the session's own: no second one, no wait.
    assert!(h
        .event(Event::RegisterResult {
            id: register,
            result: Ok(RegisterOutcome::Exists {
                session: SessionId(1),
            }),
        })
        .is_empty());
    assert!(h.reports().is_empty(), "{:?}", h.reports());
    let commands = h.event(Event::MembersResult {
        id: watch,
        result: Ok(vec![info(OURS), info("m2")]),
    });
    let mut claimed = claims(&commands);
    claimed.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        claimed.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        vec![tp(0), tp(1)],
        "both claims are looked at again: {commands:?}"
    );
    assert_eq!(h.member.assigned(), &BTreeSet::from([tp(0)]));

    // Partition 0: the session's own record, its token kept.
    let commands = h.event(Event::ClaimResult {
        id: claimed[0].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid(OURS)),
            session: SessionId(1),
            token: FencingToken(40),
        }),
    });
    assert!(releases(&commands).is_empty(), "{commands:?}");
    assert_eq!(
        h.member.owned().collect::<Vec<_>>(),
        vec![(&tp(0), FencingToken(40))]
    );
    // Partition 1: the session's own record too, not ours to keep: released
    // under its token, for m2 to take.
    let commands = h.event(Event::ClaimResult {
        id: claimed[1].0,
        result: Ok(ClaimOutcome::Held {
            owner: Some(mid(OURS)),
            session: SessionId(1),
            token: FencingToken(41),
        }),
    });
    let released = releases(&commands);
    assert_eq!(released.len(), 1, "{commands:?}");
    assert_eq!(
        (&released[0].1, released[0].2),
        (&tp(1), Some(FencingToken(41)))
    );
    h.event(Event::ReleaseResult {
        id: released[0].0,
        result: Ok(()),
    });
    assert_eq!(
        h.member.owned().collect::<Vec<_>>(),
        vec![(&tp(0), FencingToken(40))]
    );
}

/// Claims reported for a session that then expires are forgotten with it.
#[test]
fn the_claims_of_a_resumed_session_go_with_its_expiry() {
    let mut h = Harness::new(base_config());
    h.event(Event::SessionEstablished {
        session: SessionId(1),
    });
    h.event(Event::ClaimsHeld {
        partitions: vec![tp(3)],
    });
    h.event(Event::SessionExpired);
    // A fresh session, alone, two partitions: partition 3 is nobody's
    // business any more.
    h.join(&[info(OURS)]);
    let commands = h.set_counts(counts(2));
    let claimed: Vec<TopicPartition> = claims(&commands).into_iter().map(|(_, p)| p).collect();
    assert_eq!(claimed, vec![tp(0), tp(1)], "{commands:?}");
}
