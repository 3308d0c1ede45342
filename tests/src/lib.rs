//! tenure's integration tests against real ZooKeeper, etcd and Kafka (the
//! servers of `scripts/services`), and what they share: group scenarios
//! that every store must pass (the same tests run on the embedded in-memory
//! store, a real ZooKeeper and a real etcd), the stores under test, Kafka
//! test data, and a metrics recorder. The tests are in `tests/`, the
//! end-to-end benchmarks in `examples/`.

#![allow(dead_code)]

pub mod bench;
pub mod cluster;
pub mod etcd;
pub mod kafka;
pub mod memory;
pub mod postgres;
pub mod recorder;
pub mod serve;
pub mod zookeeper;

pub use tenure_testkit::proxy;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure::core::{Config, FencingToken, MemberId, Offset, TopicPartition};
use tenure::tokio::{Backend, GroupMember, View};
use tokio::sync::mpsc;

/// A store under test.
#[async_trait]
pub trait Stores: Send + Sync {
    /// A backend for one more member.
    fn backend(&self) -> Box<dyn Backend>;
    /// A backend for a member that will die, and what makes its death look
    /// like a crash to the store (no goodbye: its session must expire).
    async fn doomed(&self) -> (Box<dyn Backend>, Box<dyn FnOnce() + Send>);
    /// The member id the store names as owner of `partition` in `group`.
    async fn owner(&self, group: &str, partition: &TopicPartition) -> Option<String>;
    /// The committed offset of `partition` in `group`.
    async fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Offset>;
    /// The session timeout the server granted the session that holds
    /// `member`'s registration in `group`, as the server tells it (`None`
    /// where there is no server to ask).
    async fn granted_session_timeout(&self, _group: &str, _member: &str) -> Option<Duration> {
        None
    }
}

pub const TOPIC: &str = "t";
pub const SESSION: Duration = Duration::from_secs(2);

pub fn tp(n: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, n)
}

/// `name` and the time in nanoseconds: a name no other run uses (a topic,
/// a ZooKeeper chroot, an etcd prefix).
pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}-{nanos}")
}

/// A group name no other test uses.
pub fn group(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{name}-{}-{nanos}", std::process::id())
}

pub fn config(group: &str, member: &str) -> Config {
    config_for(group, member, TOPIC)
}

/// A member of `group` consuming `topic`, with the short timeouts the
/// tests use.
pub fn config_for(group: &str, member: &str, topic: &str) -> Config {
    Config::new(group, member, [topic])
        .expect("valid config")
        .with_session_timeout(SESSION)
        .with_processing_timeout(Duration::from_secs(2))
        .with_commit_interval(Duration::from_millis(200))
        .with_backoff(Duration::from_millis(20), Duration::from_millis(500))
}

/// Every member's view as published, with a check at every change that no
/// two members are fed the same partition at once.
pub struct Monitor {
    updates: mpsc::UnboundedReceiver<(MemberId, View)>,
    sender: mpsc::UnboundedSender<(MemberId, View)>,
    pub views: BTreeMap<String, View>,
    /// Fetching intervals per partition: (member, from, until).
    intervals: BTreeMap<TopicPartition, Vec<(String, Instant, Option<Instant>)>>,
}

impl Default for Monitor {
    fn default() -> Monitor {
        Monitor::new()
    }
}

impl Monitor {
    pub fn new() -> Monitor {
        let (sender, updates) = mpsc::unbounded_channel();
        Monitor {
            updates,
            sender,
            views: BTreeMap::new(),
            intervals: BTreeMap::new(),
        }
    }

    /// Where members send every view they publish.
    pub fn log(&self) -> mpsc::UnboundedSender<(MemberId, View)> {
        self.sender.clone()
    }

    /// Records that `member` stopped without a last view (killed).
    pub fn gone(&mut self, member: &str, at: Instant) {
        self.apply(
            member.to_owned(),
            View {
                closed: true,
                at: Some(at),
                ..View::default()
            },
        );
    }

    fn apply(&mut self, name: String, view: View) {
        let at = view
            .at
            .unwrap_or_else(|| tokio::time::Instant::now().into_std());
        let before: BTreeSet<TopicPartition> = self
            .views
            .get(&name)
            .map(|v| v.fetching.clone())
            .unwrap_or_default();
        for partition in before.difference(&view.fetching) {
            if let Some(open) = self.intervals.get_mut(partition).and_then(|list| {
                list.iter_mut()
                    .rev()
                    .find(|(m, _, end)| *m == name && end.is_none())
            }) {
                open.2 = Some(at);
            }
        }
        for partition in view.fetching.difference(&before) {
            let list = self.intervals.entry(partition.clone()).or_default();
            list.push((name.clone(), at, None));
        }
        self.views.insert(name, view);
    }

    /// Waits until `done` holds over the views, or fails after `limit`.
    /// Views from different members arrive in any order; an interval that
    /// seems to overlap because the end of the previous one has not arrived
    /// yet is waited for, not judged.
    pub async fn until(
        &mut self,
        limit: Duration,
        what: &str,
        done: impl Fn(&BTreeMap<String, View>) -> bool,
    ) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            while let Ok((name, view)) = self.updates.try_recv() {
                self.apply(name.to_string(), view);
            }
            let (overlaps, pending) = self.overlaps();
            assert!(
                overlaps.is_empty(),
                "exclusive ownership broken: {overlaps:?}"
            );
            if done(&self.views) && pending.is_empty() {
                return;
            }
            match tokio::time::timeout_at(deadline, self.updates.recv()).await {
                Ok(Some((name, view))) => self.apply(name.to_string(), view),
                Ok(None) => panic!("monitor closed while waiting for {what}"),
                Err(_) => panic!(
                    "timed out after {limit:?} waiting for {what} (unresolved: {pending:?}); views: {:#?}",
                    self.summary()
                ),
            }
        }
    }

    /// Partitions fed to two members at once (an interval that ended after
    /// the next one started), and pairs not yet decided (an interval still
    /// open while another member's has started).
    fn overlaps(&self) -> (Vec<String>, Vec<String>) {
        let mut overlaps = Vec::new();
        let mut pending = Vec::new();
        for (partition, list) in &self.intervals {
            let mut sorted = list.clone();
            sorted.sort_by_key(|(_, start, _)| *start);
            for pair in sorted.windows(2) {
                let ((a, _, a_end), (b, b_start, _)) = (&pair[0], &pair[1]);
                if a == b {
                    continue;
                }
                match a_end {
                    Some(end) if end > b_start => overlaps.push(format!(
                        "{partition} fed to {a} until {end:?} and to {b} from {b_start:?}"
                    )),
                    Some(_) => {}
                    None => pending.push(format!("{partition}: {a} still, {b} since {b_start:?}")),
                }
            }
        }
        (overlaps, pending)
    }

    /// Applies every view published so far.
    pub fn catch_up(&mut self) {
        while let Ok((name, view)) = self.updates.try_recv() {
            self.apply(name.to_string(), view);
        }
    }

    /// Who was fed `partition`, from when, until when.
    pub fn intervals_of(
        &self,
        partition: &TopicPartition,
    ) -> Vec<(String, Instant, Option<Instant>)> {
        self.intervals.get(partition).cloned().unwrap_or_default()
    }

    /// How many times `partition` started being fed to some member.
    pub fn starts(&self, partition: &TopicPartition) -> usize {
        self.intervals.get(partition).map_or(0, Vec::len)
    }

    pub fn assert_no_overlap(&self) {
        let (overlaps, _) = self.overlaps();
        assert!(
            overlaps.is_empty(),
            "exclusive ownership broken: {overlaps:?}"
        );
    }

    /// Who is fed what, per member.
    pub fn summary(&self) -> BTreeMap<String, Vec<String>> {
        self.views
            .iter()
            .map(|(m, v)| {
                (
                    m.clone(),
                    v.fetching.iter().map(|p| p.to_string()).collect(),
                )
            })
            .collect()
    }

    /// The member fed each partition.
    pub fn fetchers(&self) -> BTreeMap<TopicPartition, String> {
        let mut out = BTreeMap::new();
        for (member, view) in &self.views {
            for partition in &view.fetching {
                out.insert(partition.clone(), member.clone());
            }
        }
        out
    }

    /// The token each member holds for each partition it owns.
    pub fn tokens(&self) -> BTreeMap<TopicPartition, (String, FencingToken)> {
        let mut out = BTreeMap::new();
        for (member, view) in &self.views {
            for (partition, token) in &view.owned {
                out.insert(partition.clone(), (member.clone(), *token));
            }
        }
        out
    }
}

/// Whether `members` (by name) are all settled, together fetch every one of
/// `partitions` partitions, each fetches its balanced share (so none is
/// still working from an older member list), and no one else fetches.
pub fn settled(views: &BTreeMap<String, View>, members: &[&str], partitions: u32) -> bool {
    let n = members.len().max(1);
    let (low, high) = (partitions as usize / n, (partitions as usize).div_ceil(n));
    let mut fetched = BTreeSet::new();
    for name in members {
        match views.get(*name) {
            Some(view)
                if view.settled
                    && view.registered
                    && (low..=high).contains(&view.fetching.len()) =>
            {
                fetched.extend(view.fetching.iter().cloned())
            }
            _ => return false,
        }
    }
    let others_idle = views
        .iter()
        .filter(|(name, _)| !members.contains(&name.as_str()))
        .all(|(_, view)| view.fetching.is_empty());
    others_idle && fetched.len() == partitions as usize
}

pub async fn join(
    stores: &dyn Stores,
    monitor: &Monitor,
    group: &str,
    name: &str,
    partitions: u32,
) -> GroupMember {
    GroupMember::builder(config(group, name))
        .partitions([(TOPIC.to_owned(), partitions)].into())
        .auto_drain(true)
        .view_log(monitor.log())
        .seed(7)
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("{name} cannot join: {e}"))
}

/// The store agrees with the members' views: every fetched partition's
/// owner record names the member fed it.
pub async fn store_agrees(stores: &dyn Stores, group: &str, monitor: &Monitor) {
    for (partition, member) in monitor.fetchers() {
        assert_eq!(
            stores.owner(group, &partition).await.as_deref(),
            Some(member.as_str()),
            "the store's owner of {partition}"
        );
    }
}

const SETTLE: Duration = Duration::from_secs(20);

/// A fresh group of 3 members (m1, m2, m3) sharing 12 partitions, settled.
pub async fn three_settled(stores: &dyn Stores, name: &str) -> (String, Monitor, Vec<GroupMember>) {
    let group = group(name);
    let mut monitor = Monitor::new();
    let mut members = Vec::new();
    for member in ["m1", "m2", "m3"] {
        members.push(join(stores, &monitor, &group, member, 12).await);
    }
    monitor
        .until(SETTLE, "3 members owning 12 partitions", |v| {
            settled(v, &["m1", "m2", "m3"], 12)
        })
        .await;
    (group, monitor, members)
}

/// 3 members, 12 partitions: balanced, every partition owned.
pub async fn three_members_share_twelve_partitions(stores: &dyn Stores) {
    let (group, monitor, members) = three_settled(stores, "balanced").await;
    for (name, view) in &monitor.views {
        assert_eq!(view.fetching.len(), 4, "{name} fetches {:?}", view.fetching);
    }
    store_agrees(stores, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// A 4th member joins: only the partitions that move change hands, never
/// two members at once, all owned at the end.
pub async fn a_fourth_member_moves_only_what_it_takes(stores: &dyn Stores) {
    let (group, mut monitor, mut members) = three_settled(stores, "join").await;
    let before = monitor.tokens();
    // Drop the events so far: what follows is the join's doing.
    for member in &mut members {
        while member.try_next_event().is_some() {}
    }
    let fourth = join(stores, &monitor, &group, "m4", 12).await;
    members.push(fourth);
    monitor
        .until(SETTLE, "4 members settled", |v| {
            settled(v, &["m1", "m2", "m3", "m4"], 12)
        })
        .await;
    let after = monitor.tokens();
    let moved: BTreeSet<&TopicPartition> = after
        .iter()
        .filter(|(p, owner)| before.get(*p) != Some(*owner))
        .map(|(p, _)| p)
        .collect();
    // The newcomer takes its 3 of 12; the sticky strategy may move one
    // more to keep the others within one of each other.
    assert_eq!(after.iter().filter(|(_, (m, _))| m == "m4").count(), 3);
    assert!((3..=4).contains(&moved.len()), "moved {moved:?}");
    // The members that kept a partition were never told to stop it.
    for member in &mut members {
        while let Some(event) = member.try_next_event() {
            if let tenure::tokio::AssignmentEvent::Revoking { partition, .. } = &event {
                assert!(
                    moved.contains(partition),
                    "{} paused {partition}, which did not move",
                    member.id()
                );
            }
        }
    }
    monitor.assert_no_overlap();
    store_agrees(stores, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// A member closes: its partitions are taken over, starting from the
/// offsets it committed on the way out.
pub async fn a_closing_member_hands_over_with_its_final_offsets(stores: &dyn Stores) {
    let (group, mut monitor, mut members) = three_settled(stores, "close").await;
    let leaving = members.pop().expect("three members");
    let theirs: BTreeMap<TopicPartition, FencingToken> = monitor.views["m3"].owned.clone();
    assert_eq!(theirs.len(), 4);
    // Processed up to 40 + partition number; committed on the way out.
    for (partition, token) in &theirs {
        leaving.processed(
            partition.clone(),
            *token,
            40 + Offset::from(partition.partition),
        );
    }
    for member in &mut members {
        while member.try_next_event().is_some() {}
    }
    let _ = leaving.close().await.expect("close");
    for partition in theirs.keys() {
        assert_eq!(
            stores.committed(&group, partition).await,
            Some(41 + Offset::from(partition.partition)),
            "final offset of {partition} committed before the handover"
        );
    }
    monitor
        .until(SETTLE, "2 members own all 12", |v| {
            settled(v, &["m1", "m2"], 12)
        })
        .await;
    // The new owners start where the leaver stopped.
    let mut starts = BTreeMap::new();
    for member in &mut members {
        while let Some(event) = member.try_next_event() {
            if let tenure::tokio::AssignmentEvent::Assigned {
                partition, from, ..
            } = event
            {
                starts.insert(partition, from);
            }
        }
    }
    for partition in theirs.keys() {
        assert_eq!(
            starts.get(partition),
            Some(&tenure::core::FetchFrom::Offset(
                41 + Offset::from(partition.partition)
            )),
            "{partition} resumes after the committed offset"
        );
    }
    store_agrees(stores, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// A member dies without closing: the others take over within the session
/// timeout and a small margin.
pub async fn a_dead_member_is_replaced_within_the_session_timeout(stores: &dyn Stores) {
    let group = group("kill");
    let mut monitor = Monitor::new();
    let mut members = Vec::new();
    for name in ["m1", "m2"] {
        let member = join(stores, &monitor, &group, name, 12).await;
        members.push(member);
    }
    let (backend, crash) = stores.doomed().await;
    let dead = GroupMember::builder(config(&group, "m3"))
        .partitions([(TOPIC.to_owned(), 12)].into())
        .auto_drain(true)
        .seed(7)
        .view_log(monitor.log())
        .join(backend)
        .await
        .expect("m3 joins");
    monitor
        .until(SETTLE, "3 members settled", |v| {
            settled(v, &["m1", "m2", "m3"], 12)
        })
        .await;
    let killed_at = tokio::time::Instant::now();
    crash();
    dead.kill();
    monitor.gone("m3", killed_at.into_std());
    monitor
        .until(
            SESSION + Duration::from_secs(3),
            "the survivors own all 12",
            |v| settled(v, &["m1", "m2"], 12),
        )
        .await;
    let took = killed_at.elapsed();
    // The session lives a timeout past its last keep-alive, which comes
    // every third of the timeout — later on a loaded machine — so the
    // floor is two thirds of the timeout at best; a third still tells an
    // expiry from a takeover that did not wait for one.
    assert!(
        took >= SESSION / 3,
        "taken over after {took:?}: the dead member's session cannot have expired yet"
    );
    store_agrees(stores, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// One member joins with only its config's session timeout set (to a value
/// that is no default anywhere): the store must grant exactly that.
pub async fn the_store_grants_the_configs_session_timeout(stores: &dyn Stores) {
    let group = group("session");
    let timeout = Duration::from_secs(7);
    let config = config(&group, "m1").with_session_timeout(timeout);
    let member = GroupMember::builder(config)
        .partitions([(TOPIC.to_owned(), 2)].into())
        .auto_drain(true)
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("m1 cannot join: {e}"));
    let mut view = member.watch_view();
    tokio::time::timeout(Duration::from_secs(10), view.wait_for(|v| v.registered))
        .await
        .expect("m1 registers within 10 s")
        .expect("m1's view is published");
    let granted = stores
        .granted_session_timeout(&group, "m1")
        .await
        .expect("the server tells the session's timeout");
    assert_eq!(granted, timeout, "the store's session is not the member's");
    let _ = member.close().await.expect("closes");
}
