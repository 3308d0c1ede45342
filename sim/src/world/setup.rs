//! Building the world: its members, their processes and sessions, and the
//! world's own bookkeeping (the timeline, delays, violations).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use crate::check::Story;
use tenure_core::assignment::PartitionCounts;
use tenure_core::model::store::Store;
use tenure_core::protocol::{Event, Member};
use tenure_core::records::Layout;
use tenure_core::rng::SplitMix64;
use tenure_core::types::{MemberId, SessionId, TopicPartition};

use super::operator::Operator;
use super::parts::{Action, App, Input, Node, World};
use super::{SimConfig, SimReport, Violation};

impl World {
    pub(super) fn new(config: SimConfig) -> Result<World, String> {
        // Virtual time starts at an arbitrary instant; only differences
        // matter, so runs are identical whatever the real clock says.
        let start = Instant::now();
        let mut rng = SplitMix64::new(config.seed);
        let server_lag = Duration::from_millis(rng.below(300));
        let quiet_at = start + config.chaos;
        let end_at = quiet_at
            + config.convergence_bound()
            + config.commit_interval * 4
            + Duration::from_secs(2);
        if config.ensemble.is_some() && config.etcd.is_some() {
            return Err(
                "a simulation runs on a ZooKeeper ensemble or an etcd cluster, not both".to_owned(),
            );
        }
        if config
            .etcd
            .as_ref()
            .is_some_and(|c| c.servers == 0 || c.grant_tries == 0)
        {
            return Err("an etcd cluster needs a server and a try of a lease grant".to_owned());
        }
        let mut counts = PartitionCounts::new();
        for (topic, n) in &config.topics {
            assignment_topic_check(topic)?;
            counts.insert(topic.clone(), *n);
        }
        let mut world = World {
            rng,
            start,
            now: start,
            quiet_at,
            end_at,
            seq: 0,
            queue: BinaryHeap::new(),
            actions: BTreeMap::new(),
            store: Store::new(),
            layout: Layout::new("", "sim"),
            nodes: Vec::new(),
            counts,
            hw: BTreeMap::new(),
            processed: BTreeMap::new(),
            committed: BTreeMap::new(),
            claimed_tokens: BTreeMap::new(),
            session_owner: BTreeMap::new(),
            server_lag,
            leaderless_until: None,
            etcd_leader: 0,
            elected_at: None,
            isolated: None,
            operator: Operator::default(),
            next_produce: start,
            next_app_tick: start,
            report: SimReport {
                seed: config.seed,
                ..SimReport::default()
            },
            config,
        };
        world.sync_logs();
        for _ in 0..world.config.members.max(1) {
            world.add_node()?;
        }
        if world.config.faults || world.config.churn {
            world.schedule_chaos();
        }
        let (start, quiet_at, end_at) = (world.start, world.quiet_at, world.end_at);
        world
            .operator
            .schedule(&world.config, start, quiet_at, end_at);
        if let Some(ensemble) = &world.config.ensemble {
            let first = world.start + ensemble.tick / 2;
            world.at(first, Action::Report);
        }
        Ok(world)
    }

    pub(super) fn at(&mut self, time: Instant, action: Action) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq)));
        self.actions.insert(self.seq, action);
    }

    /// Hands `event` to the member running on node `index` at `time`. It
    /// goes to the process running now: if the node restarts before `time`,
    /// the new process never sees it, as a real one never sees what its
    /// predecessor was told.
    pub(super) fn local(&mut self, time: Instant, index: usize, event: Input) {
        let incarnation = self.nodes[index].incarnation;
        self.at(
            time,
            Action::Local {
                node: index,
                incarnation,
                event,
            },
        );
    }

    pub(super) fn delay(&mut self) -> Duration {
        let max = self.config.max_delay.as_micros() as u64;
        Duration::from_micros(1 + self.rng.below(max.max(1)))
    }

    pub(super) fn elapsed(&self) -> Duration {
        self.now.saturating_duration_since(self.start)
    }

    pub(super) fn violation(&mut self, property: &'static str, detail: String) {
        // One violation of a kind is enough to replay; more would drown it.
        if self
            .report
            .violations
            .iter()
            .any(|v| v.property == property)
        {
            return;
        }
        self.report.violations.push(Violation {
            seed: self.config.seed,
            step: self.report.steps,
            at: self.elapsed(),
            property,
            detail,
        });
    }

    pub(super) fn sync_logs(&mut self) {
        for (topic, n) in &self.counts {
            for p in 0..*n {
                let tp = TopicPartition::new(topic, p);
                self.hw.entry(tp.clone()).or_insert(0);
                self.processed.entry(tp).or_default();
            }
        }
    }

    // ----- membership of the simulation -----

    pub(super) fn add_node(&mut self) -> Result<usize, String> {
        let index = self.nodes.len();
        let id = format!("m{index:02}");
        let node = Node {
            id: MemberId::new(&id).map_err(|e| e.to_string())?,
            member: None,
            incarnation: 0,
            session: None,
            resumable: None,
            connected: false,
            epoch: 0,
            last_contact: self.now,
            paused_until: None,
            leaving: false,
            gone: false,
            in_flight: BTreeMap::new(),
            gathered: Vec::new(),
            last_request_arrival: self.now,
            last_reply_delivery: self.now,
            unreported: false,
            ping_waiting: false,
            report_in_flight: None,
            cut_again: None,
            cut_on_answer: None,
            cut_until: None,
            holding: false,
            server: 0,
            granting: None,
            grant_began: self.now,
            next_keep_alive: self.now,
            joined: false,
            published: None,
            app: App {
                batch_time: Duration::from_millis(30),
                lanes: if self.config.out_of_order { 3 } else { 1 },
                ..App::default()
            },
        };
        self.nodes.push(node);
        self.start_member(index)?;
        Ok(index)
    }

    pub(super) fn start_member(&mut self, index: usize) -> Result<(), String> {
        let config = self.config.member_config(self.nodes[index].id.as_str())?;
        let seed = self.rng.next_u64();
        let member = Member::new(config, seed, self.now).map_err(|e| e.to_string())?;
        let node = &mut self.nodes[index];
        node.member = Some(member);
        node.published = None;
        node.incarnation += 1;
        node.in_flight.clear();
        node.gathered.clear();
        node.app.holdings.clear();
        node.app.batches.clear();
        node.app.story = Story::default();
        node.joined = false;
        node.granting = None;
        if let Some(cluster) = &self.config.etcd {
            // A new process's client starts on any of the servers.
            let servers = cluster.servers as u64;
            self.nodes[index].server = self.rng.below(servers) as usize;
        }
        // The leader revalidates a resumed session: one past its deadline
        // is found dead there and then, even before the expirer ran.
        match self.nodes[index].resumable.take() {
            Some(session) if self.serves(index) && self.server_touch(session) => {
                self.resume_session(index, session)
            }
            _ => self.open_session(index),
        }
        let counts = self.counts.clone();
        self.local(self.now, index, Input::Counts(counts));
        Ok(())
    }

    pub(super) fn open_session(&mut self, index: usize) {
        if let Some(cluster) = &self.config.etcd {
            let tries = cluster.grant_tries;
            self.nodes[index].grant_began = self.now;
            self.grant(index, tries - 1);
            return;
        }
        self.grant_now(index);
    }

    /// The store opens a session for node `index`'s client now.
    pub(super) fn grant_now(&mut self, index: usize) {
        // On etcd, a lease of the session in whole seconds, rounded up.
        let timeout = match &self.config.etcd {
            Some(cluster) => cluster.ttl(self.config.session_timeout),
            None => self.config.session_timeout,
        };
        let session = self.store.open_session(self.now, timeout);
        self.session_owner.insert(session, index);
        self.establish(index, session);
    }

    /// A static member's new process resumes the session its previous one
    /// left: the session, then the claims it holds.
    pub(super) fn resume_session(&mut self, index: usize, session: SessionId) {
        self.report.resumed_sessions += 1;
        let partitions: Vec<TopicPartition> = self
            .store
            .ephemerals(session)
            .iter()
            .filter_map(|path| match self.layout.classify(path) {
                Some(tenure_core::records::Watched::Owner(partition)) => Some(partition),
                _ => None,
            })
            .collect();
        self.establish(index, session);
        let now = self.now;
        self.local(now, index, Input::Store(Event::ClaimsHeld { partitions }));
    }

    /// The node's client is connected under `session`, and says so.
    pub(super) fn establish(&mut self, index: usize, session: SessionId) {
        let now = self.now;
        let node = &mut self.nodes[index];
        node.session = Some(session);
        node.joined = true;
        node.granting = None;
        node.connected = true;
        node.epoch += 1;
        node.last_contact = now;
        node.next_keep_alive = now;
        self.local(
            now,
            index,
            Input::Store(Event::SessionEstablished { session }),
        );
        self.renewed_now(index);
    }

    /// Tells node `index` the store counted its session now (opened, or
    /// found alive on a reconnection).
    pub(super) fn renewed_now(&mut self, index: usize) {
        let now = self.now;
        let renewal = Event::SessionRenewed {
            sent: now,
            counted_after: std::time::Duration::ZERO,
        };
        self.local(now, index, Input::Store(renewal));
    }

    pub(super) fn active_nodes(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].gone && !self.nodes[i].leaving)
            .collect()
    }

    // ----- chaos -----
}

fn assignment_topic_check(topic: &str) -> Result<(), String> {
    tenure_core::types::validate_topic(topic).map_err(|e| e.to_string())
}
