//! End to end on a real Kafka 4.x and a real ZooKeeper (both started by
//! `scripts/services start`): members consume a topic while others join,
//! leave and die; nothing is lost, offsets end where the log ends, claims
//! never overlap, and duplicates stay within the partitions that moved.

use tenure_tests as common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cluster::{Cluster, Node};
use common::kafka;
use common::zookeeper::ZooKeeper;
use common::{Monitor, Stores};
use tenure::core::{Config, TopicPartition};
use tenure::tokio::{Backend, GroupMember, JoinError, KafkaConfig, KafkaError};
use tokio::sync::mpsc;

/// What every member processed: (partition, offset) → (member, token) for
/// every time it was processed.
type Processed = Arc<Mutex<BTreeMap<(u32, i64), Vec<(String, u64)>>>>;

enum Control {
    Close,
    Kill(Box<dyn FnOnce() + Send>),
}

async fn join(
    backend: Box<dyn Backend>,
    monitor: &Monitor,
    group: &str,
    name: &str,
    topic: &str,
) -> GroupMember {
    GroupMember::builder(common::config_for(group, name, topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .view_log(monitor.log())
        .seed(11)
        .join(backend)
        .await
        .unwrap_or_else(|e| panic!("{name} cannot join: {e}"))
}

/// The application: processes and acknowledges every message, until told
/// to close or to die.
fn consume(
    mut member: GroupMember,
    processed: Processed,
    mut control: mpsc::UnboundedReceiver<Control>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let name = member.id().to_string();
        loop {
            tokio::select! {
                message = member.next_message() => match message {
                    Some(message) => {
                        if let Ok(mut seen) = processed.lock() {
                            seen.entry((message.partition(), message.offset()))
                                .or_default()
                                .push((name.clone(), message.token().0));
                        }
                        message.ack();
                    }
                    None => return,
                },
                order = control.recv() => match order {
                    Some(Control::Close) => {
                        let _ = member.close().await.expect("close");
                        return;
                    }
                    Some(Control::Kill(crash)) => {
                        crash();
                        member.kill();
                        return;
                    }
                    None => return,
                },
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_through_joins_leaves_and_deaths_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    a_hundred_thousand_messages(&ZooKeeper::new("e2e").await, "zookeeper", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_through_joins_leaves_and_deaths_on_etcd() {
    let _turn = crate::turns::shared().await;
    a_hundred_thousand_messages(&common::etcd::Etcd::new("e2e").await, "etcd", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_on_a_zookeeper_ensemble_losing_its_leader() {
    let _turn = crate::turns::alone().await;
    let cluster = Cluster::ZooKeeper;
    let stores = ZooKeeper::on_cluster("e2e-leader", 1).await;
    a_hundred_thousand_messages(
        &stores,
        "a zookeeper ensemble losing its leader",
        Some((cluster, Node::Leader)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_on_a_zookeeper_ensemble_losing_the_members_server() {
    let _turn = crate::turns::alone().await;
    let cluster = Cluster::ZooKeeper;
    // Node 2 dies. The client picks each member's server at random, so it
    // serves about a third of them, who move to another node within their
    // session; the doomed members' proxies stand in front of it too.
    let stores = ZooKeeper::on_cluster("e2e-server", 2).await;
    a_hundred_thousand_messages(
        &stores,
        "a zookeeper ensemble losing the members' server",
        Some((cluster, Node::Number(2))),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_on_an_etcd_cluster_losing_its_leader() {
    let _turn = crate::turns::alone().await;
    let cluster = Cluster::Etcd;
    let stores = common::etcd::Etcd::on_cluster("e2e-leader").await;
    a_hundred_thousand_messages(
        &stores,
        "an etcd cluster losing its leader",
        Some((cluster, Node::Leader)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_messages_on_an_etcd_cluster_losing_a_follower() {
    let _turn = crate::turns::alone().await;
    let cluster = Cluster::Etcd;
    let stores = common::etcd::Etcd::on_cluster("e2e-follower").await;
    // Members speak to every node (the client balances over them); this
    // one is a follower when it dies.
    let follower = Cluster::follower_of(cluster.leader());
    a_hundred_thousand_messages(
        &stores,
        "an etcd cluster losing a follower",
        Some((cluster, Node::Number(follower))),
    )
    .await;
}

/// 100,000 messages consumed while members join, close and die; with
/// `fault`, that node of a 3-node store dies too (SIGKILL) just after the
/// fourth member joins, and comes back after the kill of a member.
async fn a_hundred_thousand_messages(
    stores: &dyn Stores,
    store: &str,
    fault: Option<(Cluster, Node)>,
) {
    const PARTITIONS: u32 = 16;
    const PER_PARTITION: usize = 6250;
    let client = kafka::client().await;
    let topic = kafka::topic("e2e");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    let group = common::group("e2e");
    let mut monitor = Monitor::new();
    let processed: Processed = Arc::default();

    // The producer writes 100,000 messages over about 8 seconds.
    let producing = {
        let client = client.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            let rounds = 25;
            for _ in 0..rounds {
                for p in 0..PARTITIONS {
                    kafka::produce(&client, &topic, p, PER_PARTITION / rounds).await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };

    let mut controls = BTreeMap::new();
    let mut tasks = Vec::new();
    for name in ["m1", "m2", "m3"] {
        let backend = if name == "m2" {
            let (backend, crash) = stores.doomed().await;
            let (tx, rx) = mpsc::unbounded_channel();
            let member = join(backend, &monitor, &group, name, &topic).await;
            tasks.push(consume(member, processed.clone(), rx));
            controls.insert(name, (tx, Some(crash)));
            continue;
        } else {
            stores.backend()
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let member = join(backend, &monitor, &group, name, &topic).await;
        tasks.push(consume(member, processed.clone(), rx));
        controls.insert(name, (tx, None));
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let fourth = join(stores.backend(), &monitor, &group, "m4", &topic).await;
    tasks.push(consume(fourth, processed.clone(), rx));
    controls.insert("m4", (tx, None));

    let killed = match fault {
        Some((cluster, node)) => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let number = tokio::task::spawn_blocking(move || cluster.kill(node))
                .await
                .expect("kill a node");
            Some((cluster, number))
        }
        None => None,
    };

    tokio::time::sleep(Duration::from_secs(2)).await;
    controls["m1"].0.send(Control::Close).expect("m1 listens");

    tokio::time::sleep(Duration::from_secs(2)).await;
    let (tx, crash) = controls.get_mut("m2").expect("m2");
    tx.send(Control::Kill(crash.take().expect("m2's plug")))
        .expect("m2 listens");

    if let Some((cluster, number)) = killed {
        tokio::time::sleep(Duration::from_secs(2)).await;
        tokio::task::spawn_blocking(move || cluster.start(number))
            .await
            .expect("start the node again");
    }

    producing.await.expect("producer");
    let ends = kafka::end_offsets(&client, &topic, PARTITIONS).await;
    assert_eq!(ends.iter().sum::<i64>(), 100_000);

    // Everything committed up to the end of every partition.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut behind = Vec::new();
        for p in 0..PARTITIONS {
            let committed = stores
                .committed(&group, &TopicPartition::new(&topic, p))
                .await;
            if committed != Some(ends[p as usize]) {
                behind.push((p, committed, ends[p as usize]));
            }
        }
        if behind.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "committed offsets short of the end offsets after 60 s: {behind:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let seen = processed.lock().expect("processed").clone();
    for p in 0..PARTITIONS {
        for offset in 0..ends[p as usize] {
            assert!(
                seen.contains_key(&(p, offset)),
                "{topic}/{p} offset {offset} was never processed"
            );
        }
    }
    // Duplicates: processed again under another claim, only where the
    // partition moved; never twice under the same claim.
    let mut duplicates = 0;
    let mut moved_with_duplicates = BTreeSet::new();
    for ((p, offset), times) in &seen {
        let tokens: BTreeSet<u64> = times.iter().map(|(_, t)| *t).collect();
        assert_eq!(
            tokens.len(),
            times.len(),
            "{p}/{offset} processed twice under one claim: {times:?}"
        );
        if times.len() > 1 {
            duplicates += times.len() - 1;
            moved_with_duplicates.insert(*p);
        }
    }
    monitor.catch_up();
    monitor.assert_no_overlap();
    let moved: BTreeSet<u32> = (0..PARTITIONS)
        .filter(|p| monitor.starts(&TopicPartition::new(&topic, *p)) > 1)
        .collect();
    let unexplained: Vec<u32> = moved_with_duplicates.difference(&moved).copied().collect();
    let samples: Vec<_> = seen
        .iter()
        .filter(|((p, _), times)| unexplained.contains(p) && times.len() > 1)
        .take(3)
        .collect();
    assert!(
        unexplained.is_empty(),
        "duplicates in partitions that never moved: {unexplained:?}, e.g. {samples:?}; fetch intervals: {:?}",
        unexplained
            .iter()
            .map(|p| monitor.intervals_of(&TopicPartition::new(&topic, *p)))
            .collect::<Vec<_>>()
    );
    println!(
        "e2e on {store}: 100000 messages, {} processed, {duplicates} duplicates, in {} of the {} partitions that moved",
        seen.values().map(Vec::len).sum::<usize>(),
        moved_with_duplicates.len(),
        moved.len()
    );

    for name in ["m3", "m4"] {
        controls[name].0.send(Control::Close).expect("listens");
    }
    for task in tasks {
        task.await.expect("consumer task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_typed_errors() {
    let _turn = crate::turns::shared().await;
    let stores = ZooKeeper::new("bad-input").await;
    // (A topic that does not exist yet is no error: it is reported and
    // waited for; see kafka_patterns.rs.)
    // A group name that is not a path element.
    let refused = Config::new("a/b", "m1", ["t"]);
    assert!(
        matches!(refused, Err(tenure::core::ConfigError::Name(ref e)) if e.kind == "group"),
        "{refused:?}"
    );
    // A broker that does not answer.
    let mut silent = KafkaConfig::new("127.0.0.1:1");
    silent.connect_timeout = Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    let joined = GroupMember::builder(common::config_for("bad", "m2", "t"))
        .kafka(silent)
        .join(stores.backend())
        .await;
    assert!(
        matches!(
            joined,
            Err(JoinError::Kafka(KafkaError::Unreachable { .. }))
        ),
        "expected Unreachable"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the error took {:?}",
        started.elapsed()
    );
}

/// What the paused-member test needs to see of a store: a member behind a
/// proxy, and the store's own order of writes (ZooKeeper zxids, etcd
/// revisions) to tell when a record was created or last written.
#[async_trait::async_trait]
trait Revisions: Stores {
    async fn proxied(&self) -> (Box<dyn Backend>, common::proxy::Proxy);
    /// Whether `partition` has an owner record.
    async fn claimed(&self, group: &str, partition: &TopicPartition) -> bool;
    /// A write now, returning its position in the store's order.
    async fn mark(&self) -> i64;
    /// When the owner record of `partition` was created.
    async fn owner_created(&self, group: &str, partition: &TopicPartition) -> i64;
    /// When the offset record of `partition` was last written.
    async fn offset_written(&self, group: &str, partition: &TopicPartition) -> i64;
}

#[async_trait::async_trait]
impl Revisions for ZooKeeper {
    async fn proxied(&self) -> (Box<dyn Backend>, common::proxy::Proxy) {
        let (backend, proxy) = self.through_proxy().await;
        (Box::new(backend), proxy)
    }

    async fn claimed(&self, group: &str, partition: &TopicPartition) -> bool {
        let path = format!(
            "/consumers/{group}/owners/{}/{}",
            partition.topic, partition.partition
        );
        self.raw().check_stat(&path).await.expect("stat").is_some()
    }

    async fn mark(&self) -> i64 {
        let options = zookeeper_client::CreateMode::PersistentSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let (stat, _) = self
            .raw()
            .create("/marker-", b"", &options)
            .await
            .expect("marker");
        stat.czxid
    }

    async fn owner_created(&self, group: &str, partition: &TopicPartition) -> i64 {
        let path = format!(
            "/consumers/{group}/owners/{}/{}",
            partition.topic, partition.partition
        );
        self.raw().get_data(&path).await.expect("owner").1.czxid
    }

    async fn offset_written(&self, group: &str, partition: &TopicPartition) -> i64 {
        let path = format!(
            "/consumers/{group}/offsets/{}/{}",
            partition.topic, partition.partition
        );
        self.raw().get_data(&path).await.expect("offset").1.mzxid
    }
}

#[async_trait::async_trait]
impl Revisions for common::etcd::Etcd {
    async fn proxied(&self) -> (Box<dyn Backend>, common::proxy::Proxy) {
        let (backend, proxy) = self.through_proxy().await;
        (Box::new(backend), proxy)
    }

    async fn claimed(&self, group: &str, partition: &TopicPartition) -> bool {
        let key = self.key(group, "owners", partition);
        !self
            .raw()
            .get(key, None)
            .await
            .expect("get")
            .kvs()
            .is_empty()
    }

    async fn mark(&self) -> i64 {
        let response = self.raw().put("/marker", "", None).await.expect("marker");
        response.header().expect("a header").revision()
    }

    async fn owner_created(&self, group: &str, partition: &TopicPartition) -> i64 {
        let key = self.key(group, "owners", partition);
        self.raw().get(key, None).await.expect("get").kvs()[0].create_revision()
    }

    async fn offset_written(&self, group: &str, partition: &TopicPartition) -> i64 {
        let key = self.key(group, "offsets", partition);
        self.raw().get(key, None).await.expect("get").kvs()[0].mod_revision()
    }
}

/// A member frozen longer than its session timeout (its task and its
/// connection stopped, as under SIGSTOP) must, when it wakes, stop at once,
/// hand out nothing more under its old claims, and commit nothing before it
/// has registered and claimed again under a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_paused_past_its_session_commits_nothing_until_it_reclaims_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    paused_member(&ZooKeeper::new("paused").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_paused_past_its_session_commits_nothing_until_it_reclaims_on_etcd() {
    let _turn = crate::turns::shared().await;
    paused_member(&common::etcd::Etcd::new("paused").await).await;
}

async fn paused_member(stores: &dyn Revisions) {
    const PARTITIONS: u32 = 4;
    let client = kafka::client().await;
    let topic = kafka::topic("paused");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    for p in 0..PARTITIONS {
        kafka::produce(&client, &topic, p, 500).await;
    }
    let group = common::group("paused");
    let monitor = Monitor::new();
    let (backend, proxy) = stores.proxied().await;
    let mut member = join(backend, &monitor, &group, "m1", &topic).await;
    let tp = |p: u32| TopicPartition::new(&topic, p);

    let mut old_tokens = BTreeSet::new();
    // Consume the first 500 of each partition, all committed.
    let mut count = 0;
    while count < 500 * PARTITIONS {
        let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
            .await
            .expect("messages flow")
            .expect("a message");
        old_tokens.insert(message.token().0);
        message.ack();
        count += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for p in 0..PARTITIONS {
        while stores.committed(&group, &tp(p)).await != Some(500) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "first 500 of {p} never committed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for p in 0..PARTITIONS {
        kafka::produce(&client, &topic, p, 500).await;
    }

    // Freeze: the member's task, its connection to the store, and the
    // application (which stops reading).
    proxy.stall();
    member.freeze_for_test(common::SESSION * 3);
    tokio::time::sleep(common::SESSION * 3 + Duration::from_millis(500)).await;
    // The server expired the session meanwhile: its claims are gone.
    for p in 0..PARTITIONS {
        assert!(
            !stores.claimed(&group, &tp(p)).await,
            "the frozen member's claim of {p} outlived its session"
        );
    }
    let woke = stores.mark().await;
    proxy.up();

    // Awake: consume the rest. Nothing under an old claim is handed out.
    let mut rest = 0;
    while rest < 500 * PARTITIONS {
        let message = tokio::time::timeout(Duration::from_secs(30), member.next_message())
            .await
            .expect("messages flow again")
            .expect("a message");
        assert!(
            !old_tokens.contains(&message.token().0),
            "message {}/{} handed out under the old claim {} after waking",
            message.partition(),
            message.offset(),
            message.token().0
        );
        message.ack();
        rest += 1;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for p in 0..PARTITIONS {
        while stores.committed(&group, &tp(p)).await != Some(1000) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "offsets of {p} never reached 1000"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every commit since waking came after the new claim: the offset
        // record's last write is newer than the owner record's creation,
        // which is newer than the moment the member woke.
        let claimed = stores.owner_created(&group, &tp(p)).await;
        assert!(claimed > woke, "{p} re-claimed after waking");
        assert!(
            stores.offset_written(&group, &tp(p)).await > claimed,
            "the offset of {p} was last written before the re-claim"
        );
    }
    let mut expired = false;
    while let Some(problem) = member.try_next_error() {
        expired |= matches!(
            problem,
            tenure::tokio::Problem::Coordination(tenure::core::Error::SessionExpired { .. })
        );
    }
    assert!(expired, "the member reports its expired session");
    let _ = member.close().await.expect("close");
}

/// A committed offset beyond the end of the log is reset by the initial
/// offset policy (oldest) and reported; nothing is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_out_of_range_is_reset_and_reported() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("out-of-range");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 100).await;
    let stores = ZooKeeper::new("out-of-range").await;
    let group = common::group("out-of-range");
    // A committed offset far past the end (a recreated topic, say).
    let path = format!("/consumers/{group}/offsets/{topic}/0");
    let raw = stores.raw();
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let mut prefix = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        prefix.push('/');
        prefix.push_str(part);
        let data: &[u8] = if prefix == path { b"5000" } else { b"" };
        let _ = raw.create(&prefix, data, &persistent).await;
    }
    let monitor = Monitor::new();
    let mut member = join(stores.backend(), &monitor, &group, "m1", &topic).await;
    let first = tokio::time::timeout(Duration::from_secs(20), member.next_message())
        .await
        .expect("messages flow")
        .expect("a message");
    assert_eq!(first.offset(), 0, "reset to the oldest offset");
    first.ack();
    let problem = tokio::time::timeout(Duration::from_secs(5), member.next_error())
        .await
        .expect("the reset is reported")
        .expect("a problem");
    assert!(
        matches!(
            problem,
            tenure::tokio::Problem::Kafka(KafkaError::OffsetReset {
                offset: 5000,
                reset: 0,
                ..
            })
        ),
        "{problem}"
    );
    let _ = member.close().await.expect("close");
}

/// Partitions added to a topic are found in the metadata and assigned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_added_to_a_topic_get_consumed() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("grows");
    kafka::create_topic(&client, &topic, 2).await;
    let stores = ZooKeeper::new("grows").await;
    let group = common::group("grows");
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.metadata_refresh = Duration::from_millis(500);
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(kafka_config)
        .join(stores.backend())
        .await
        .expect("join");
    kafka::add_partitions(&topic, 4);
    kafka::await_partitions(&client, &topic, 4).await;
    kafka::produce(&client, &topic, 3, 10).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let message = tokio::time::timeout_at(deadline, member.next_message())
            .await
            .expect("a message of the new partition within 30 s")
            .expect("a message");
        message.ack();
        if message.partition() == 3 {
            break;
        }
    }
    assert_eq!(
        member.view().assigned.len(),
        4,
        "all four partitions assigned"
    );
    let _ = member.close().await.expect("close");
}

/// Per-partition streams: one per owned partition, carrying only its
/// messages, ending when the partition is revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_partition_streams_end_when_their_partition_is_revoked() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("streams");
    kafka::create_topic(&client, &topic, 2).await;
    for p in 0..2 {
        kafka::produce(&client, &topic, p, 50).await;
    }
    let stores = ZooKeeper::new("streams").await;
    let group = common::group("streams");
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .per_partition_streams(true)
        .join(stores.backend())
        .await
        .expect("join");
    let mut readers = Vec::new();
    for _ in 0..2 {
        let mut stream =
            tokio::time::timeout(Duration::from_secs(20), member.next_partition_stream())
                .await
                .expect("a stream per partition")
                .expect("a stream");
        readers.push(tokio::spawn(async move {
            let mut offsets = Vec::new();
            while let Some(message) = stream.next().await {
                assert_eq!(
                    message.partition(),
                    stream.partition.partition,
                    "only its own partition"
                );
                assert_eq!(message.token(), stream.token);
                offsets.push(message.offset());
                message.ack();
            }
            (stream.partition.partition, offsets)
        }));
    }
    // Wait until both streams delivered everything, then leave: the streams
    // end with the release.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for p in 0..2 {
        while stores
            .committed(&group, &TopicPartition::new(&topic, p))
            .await
            != Some(50)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "partition {p} never fully committed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let _ = member.close().await.expect("close");
    for reader in readers {
        let (partition, offsets) = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("the stream ended with the release")
            .expect("reader");
        assert_eq!(
            offsets,
            (0..50).collect::<Vec<i64>>(),
            "partition {partition} in order, once"
        );
    }
}

/// The member's streams live apart from it and from each other: one
/// `select!` waits on messages, assignment changes, problems and a shutdown
/// signal; after the signal the member closes with every acknowledged
/// message committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_events_and_errors_compose_in_one_select() {
    let _turn = crate::turns::shared().await;
    use tenure::tokio::AssignmentEvent;

    const PARTITIONS: u32 = 2;
    const EACH: usize = 100;
    let client = kafka::client().await;
    let topic = kafka::topic("select");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    for p in 0..PARTITIONS {
        kafka::produce(&client, &topic, p, EACH).await;
    }
    let zookeeper = ZooKeeper::new("select").await;
    let group = common::group("select");
    let monitor = Monitor::new();
    let member = join(zookeeper.backend(), &monitor, &group, "m1", &topic).await;
    let (member, streams) = member.split();
    let (mut messages, mut events, mut errors) = (
        streams.messages.expect("a member with Kafka"),
        streams.events,
        streams.errors,
    );
    let (shutdown, mut shutdown_signal) = tokio::sync::oneshot::channel::<()>();
    let mut shutdown = Some(shutdown);
    let mut consumed = BTreeSet::new();
    let mut assigned = BTreeSet::new();
    let selecting = async {
        loop {
            tokio::select! {
                Some(message) = messages.next() => {
                    assert!(consumed.insert((message.partition(), message.offset())), "twice");
                    message.ack();
                    if consumed.len() == EACH * PARTITIONS as usize {
                        if let Some(shutdown) = shutdown.take() {
                            let _ = shutdown.send(());
                        }
                    }
                }
                Some(event) = events.next() => {
                    if let AssignmentEvent::Assigned { partition, .. } = event {
                        assigned.insert(partition.partition);
                    }
                }
                // The same stream through the `futures::Stream` trait.
                Some(problem) = futures_util::StreamExt::next(&mut errors) => {
                    panic!("unexpected problem: {problem}");
                }
                _ = &mut shutdown_signal => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), selecting)
        .await
        .expect("every message within 60 s");
    assert_eq!(assigned, (0..PARTITIONS).collect::<BTreeSet<_>>());
    let _ = member.close().await.expect("closes");
    for p in 0..PARTITIONS {
        let committed = zookeeper
            .committed(&group, &TopicPartition::new(&topic, p))
            .await;
        assert_eq!(committed, Some(EACH as i64), "partition {p}");
    }
}

/// `commit()` writes what was acknowledged at once (the interval here is an
/// hour) and says what became of each partition's commit; `close()` says
/// the same of the final commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_now_and_close_report_what_the_store_wrote() {
    let _turn = crate::turns::shared().await;
    use tenure::tokio::CommitOutcome;

    let client = kafka::client().await;
    let topic = kafka::topic("commit-now");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 150).await;
    let zookeeper = ZooKeeper::new("commit-now").await;
    let group = common::group("commit-now");
    let mut config = common::config_for(&group, "m1", &topic);
    config = config.with_commit_interval(Duration::from_secs(3600));
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let tp = TopicPartition::new(&topic, 0);
    let (member, streams) = member.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    take(&mut messages, 100).await;
    let report = member.commit().await.expect("the member runs");
    assert_eq!(
        report.commits.get(&tp),
        Some(&CommitOutcome::Written { offset: 100 }),
        "{report:?}"
    );
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(100));
    // Nothing new acknowledged: nothing to commit.
    let report = member.commit().await.expect("the member runs");
    assert!(report.commits.is_empty(), "{report:?}");

    take(&mut messages, 50).await;
    let report = member.close().await.expect("closes");
    assert_eq!(
        report.commits.get(&tp),
        Some(&CommitOutcome::Written { offset: 150 }),
        "{report:?}"
    );
    assert!(report.all_written());
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(150));
}

/// Takes and acknowledges `count` messages.
async fn take(messages: &mut tenure::tokio::Messages, count: usize) {
    for _ in 0..count {
        next_message(messages).await.ack();
    }
}

/// A paused partition hands out nothing while the others flow, and on
/// resume goes on from the message after the last one handed out: every
/// offset once, none skipped, all committed at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_partition_waits_and_resumes_where_it_stood() {
    let _turn = crate::turns::shared().await;
    const EACH: usize = 100;
    let client = kafka::client().await;
    let topic = kafka::topic("pause");
    kafka::create_topic(&client, &topic, 2).await;
    for p in 0..2 {
        kafka::produce(&client, &topic, p, EACH).await;
    }
    let zookeeper = ZooKeeper::new("pause").await;
    let group = common::group("pause");
    let monitor = Monitor::new();
    let member = join(zookeeper.backend(), &monitor, &group, "m1", &topic).await;
    let (member, streams) = member.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    let mut seen: BTreeMap<u32, Vec<i64>> = BTreeMap::new();
    while seen.get(&0).is_none_or(Vec::is_empty) {
        let message = next_message(&mut messages).await;
        seen.entry(message.partition())
            .or_default()
            .push(message.offset());
        message.ack();
    }
    member
        .pause(TopicPartition::new(&topic, 0))
        .await
        .expect("the member runs");
    let paused_at = seen[&0].len();
    while seen.get(&1).map_or(0, Vec::len) < EACH {
        let message = next_message(&mut messages).await;
        assert_eq!(
            message.partition(),
            1,
            "partition 0 handed out offset {} while paused",
            message.offset()
        );
        seen.entry(1).or_default().push(message.offset());
        message.ack();
    }
    assert_eq!(seen[&0].len(), paused_at);
    member
        .resume(TopicPartition::new(&topic, 0))
        .await
        .expect("the member runs");
    while seen[&0].len() < EACH {
        let message = next_message(&mut messages).await;
        assert_eq!(message.partition(), 0, "partition 1 was done");
        seen.entry(0).or_default().push(message.offset());
        message.ack();
    }
    for p in 0..2 {
        assert_eq!(
            seen[&p],
            (0..EACH as i64).collect::<Vec<_>>(),
            "partition {p}: every offset once, in order"
        );
    }
    let report = member.close().await.expect("closes");
    assert!(report.all_written(), "{report:?}");
    for p in 0..2 {
        let committed = zookeeper
            .committed(&group, &TopicPartition::new(&topic, p))
            .await;
        assert_eq!(committed, Some(EACH as i64), "partition {p}");
    }
}

/// The next message, within 30 s.
async fn next_message(messages: &mut tenure::tokio::Messages) -> tenure::tokio::Message {
    tokio::time::timeout(Duration::from_secs(30), messages.next())
        .await
        .expect("a message within 30 s")
        .expect("a message")
}

/// The application picks where a claim starts (from a store of its own),
/// and moves a partition forward and back under its claim: forward skips
/// and commits past the skipped messages, back hands messages out again
/// without moving the committed offset back; a stale claim is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_picks_start_offsets_and_seeks() {
    let _turn = crate::turns::shared().await;
    use tenure::tokio::{CommitOutcome, SeekError};

    let client = kafka::client().await;
    let topic = kafka::topic("seek");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 100).await;
    let zookeeper = ZooKeeper::new("seek").await;
    let group = common::group("seek");
    let mut config = common::config_for(&group, "m1", &topic);
    config = config.with_commit_interval(Duration::from_secs(3600));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let asked_by_member = asked.clone();
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .start_offsets(move |partition, token| {
            if let Ok(mut asked) = asked_by_member.lock() {
                asked.push((partition, token));
            }
            async { Ok::<_, std::io::Error>(Some(40)) }
        })
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let tp = TopicPartition::new(&topic, 0);
    let (member, streams) = member.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    let first = next_message(&mut messages).await;
    assert_eq!(first.offset(), 40, "starts where the application said");
    let token = first.token();
    assert_eq!(
        *asked.lock().expect("not poisoned"),
        vec![(tp.clone(), token)]
    );
    first.ack();
    for expected in 41..50 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.offset(), expected);
        message.ack();
    }

    member
        .seek(tp.clone(), token, 80)
        .await
        .expect("seeks forward");
    for expected in 80..90 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.offset(), expected, "after the forward seek");
        message.ack();
    }
    let report = member.commit().await.expect("the member runs");
    assert_eq!(
        report.commits.get(&tp),
        Some(&CommitOutcome::Written { offset: 90 })
    );

    member
        .seek(tp.clone(), token, 85)
        .await
        .expect("seeks back");
    let again = next_message(&mut messages).await;
    assert_eq!(again.offset(), 85, "handed out again after the seek back");
    again.ack();
    let report = member.commit().await.expect("the member runs");
    assert!(
        report.commits.is_empty(),
        "the commit moved back: {report:?}"
    );
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(90));

    let stale = tenure::core::FencingToken(token.0 - 1);
    match member.seek(tp.clone(), stale, 10).await {
        Err(SeekError::NotOwned { partition, token }) => {
            assert_eq!((partition, token), (tp.clone(), Some(stale)));
        }
        other => panic!("a seek under a stale claim is refused: {other:?}"),
    }
    let _ = member.close().await.expect("closes");
}

/// With the offsets kept by the application, the store never holds one:
/// the claim starts where the application says and nothing is committed,
/// even when leaving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_kept_by_the_application_never_reach_the_store() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("own-offsets");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 50).await;
    let zookeeper = ZooKeeper::new("own-offsets").await;
    let group = common::group("own-offsets");
    let mut config = common::config_for(&group, "m1", &topic);
    config = config.with_store_offsets(false);
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .start_offsets(|_, _| async { Ok::<_, std::io::Error>(Some(30)) })
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let (member, streams) = member.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    for expected in 30..50 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.offset(), expected);
        message.ack();
    }
    let report = member.commit().await.expect("the member runs");
    assert!(report.commits.is_empty(), "{report:?}");
    let report = member.close().await.expect("closes");
    assert!(report.commits.is_empty(), "{report:?}");
    let tp = TopicPartition::new(&topic, 0);
    assert_eq!(zookeeper.committed(&group, &tp).await, None);
}

/// A member cut off from the store long enough that its session might
/// lapse, then back before it did: its partitions are suspended and
/// resumed, not revoked, and consumption goes on where it stood under the
/// same claim, with nothing handed out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspension_that_ends_alive_is_not_a_revocation() {
    let _turn = crate::turns::shared().await;
    use tenure::tokio::AssignmentEvent;

    let client = kafka::client().await;
    let topic = kafka::topic("suspend");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 200).await;
    let zookeeper = ZooKeeper::new("suspend").await;
    let group = common::group("suspend");
    // Long enough that the server keeps the session for a while after the
    // member stops handing out (the suspension margin, 1.2 s here).
    let config =
        common::config_for(&group, "m1", &topic).with_session_timeout(Duration::from_secs(6));
    let (backend, proxy) = zookeeper.through_proxy().await;
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(backend)
        .await
        .expect("joins");
    let (member, streams) = member.split();
    let (mut messages, mut events) = (
        streams.messages.expect("a member with Kafka"),
        streams.events,
    );
    let mut seen = BTreeSet::new();
    let mut token = None;
    for _ in 0..50 {
        let message = next_message(&mut messages).await;
        assert!(
            seen.insert(message.offset()),
            "offset {} twice",
            message.offset()
        );
        token = Some(message.token());
        message.ack();
    }
    let token = token.expect("a claim");

    proxy.stall();
    let mut changes = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("suspended within 20 s")
            .expect("the events go on");
        changes.push(event.clone());
        if matches!(event, AssignmentEvent::Suspended { .. }) {
            break;
        }
    }
    proxy.up();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("resumed within 20 s")
            .expect("the events go on");
        changes.push(event.clone());
        if matches!(event, AssignmentEvent::Resumed { .. }) {
            break;
        }
    }
    assert!(
        !changes.iter().any(|e| matches!(
            e,
            AssignmentEvent::Revoking { .. } | AssignmentEvent::Revoked { .. }
        )),
        "a pause looked like a loss: {changes:?}"
    );
    while seen.len() < 200 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.token(), token, "the same claim goes on");
        assert!(
            seen.insert(message.offset()),
            "offset {} twice",
            message.offset()
        );
        message.ack();
    }
    assert_eq!(seen, (0..200).collect::<BTreeSet<i64>>());
    let report = member.close().await.expect("closes");
    assert!(report.all_written(), "{report:?}");
}

/// A message arrives as it was produced: its key and value, every header
/// in the producer's order (a repeated key kept), its create time, in an
/// uncompressed batch as in a compressed one; a topic whose broker stamps
/// the records says so, with the broker's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_arrive_as_produced_with_every_header_and_their_timestamp_type() {
    let _turn = crate::turns::shared().await;
    use rskafka::bytes::Bytes;
    use rskafka::client::partition::{Compression, UnknownTopicHandling};
    use rskafka::record::Record;
    use tenure::tokio::Timestamp;

    let client = kafka::client().await;
    let topic = kafka::topic("faithful");
    let appended = kafka::topic("faithful-appended");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::create_topic_with_configs(
        &client,
        &appended,
        1,
        [("message.timestamp.type", "LogAppendTime")],
    )
    .await;

    let created_ms = 1_700_000_000_123;
    let created = rskafka::chrono::DateTime::from_timestamp_millis(created_ms).expect("a time");
    let headers = || {
        vec![
            ("trace".to_owned(), Bytes::from_static(b"t-1")),
            ("hop".to_owned(), Bytes::from_static(b"first")),
            ("hop".to_owned(), Bytes::from_static(b"second")),
        ]
    };
    // A key that is not UTF-8, a value that is (not ASCII).
    let record = |value: Option<&'static str>| Record {
        key: Some(Bytes::from_static(b"k\xff")),
        value: value.map(|v| Bytes::from_static(v.as_bytes())),
        headers: headers(),
        timestamp: created,
    };
    let produce = |topic: String, batch: Vec<Record>, compression: Compression| {
        let client = client.clone();
        async move {
            client
                .partition_client(topic.as_str(), 0, UnknownTopicHandling::Retry)
                .await
                .expect("partition client")
                .produce(batch, compression)
                .await
                .unwrap_or_else(|e| panic!("produce to {topic}: {e}"));
        }
    };
    // Offset 0 alone, uncompressed; 1 and 2 (a tombstone) in a gzip batch.
    produce(
        topic.clone(),
        vec![record(Some("v√"))],
        Compression::NoCompression,
    )
    .await;
    produce(
        topic.clone(),
        vec![record(Some("v√ again")), record(None)],
        Compression::Gzip,
    )
    .await;
    let before_ms = common::bench::wall_ms();
    produce(
        appended.clone(),
        vec![record(Some("v√"))],
        Compression::NoCompression,
    )
    .await;
    let after_ms = common::bench::wall_ms();

    let stores = ZooKeeper::new("faithful").await;
    let group = common::group("faithful");
    let mut config = Config::new(&group, "m1", [&topic, &appended]).expect("valid config");
    config = config.with_commit_interval(Duration::from_millis(200));
    let mut member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(stores.backend())
        .await
        .expect("join");
    let mut messages = BTreeMap::new();
    while messages.len() < 4 {
        let message = tokio::time::timeout(Duration::from_secs(30), member.next_message())
            .await
            .expect("a message within 30 s")
            .expect("the member is alive");
        message.ack();
        messages.insert((message.topic().to_string(), message.offset()), message);
    }

    for offset in 0..3 {
        let message = &messages[&(topic.clone(), offset)];
        assert_eq!(message.key(), Some(&b"k\xff"[..]));
        assert!(matches!(message.key_str(), Some(Err(_))), "not UTF-8");
        let headers: Vec<(&str, &[u8])> = message
            .headers()
            .iter()
            .map(|h| (h.key.as_str(), &h.value[..]))
            .collect();
        assert_eq!(
            headers,
            [
                ("trace", &b"t-1"[..]),
                ("hop", &b"first"[..]),
                ("hop", &b"second"[..])
            ],
            "offset {offset}: every header, in order"
        );
        let hops: Vec<&[u8]> = message.headers().get_all("hop").map(|v| &v[..]).collect();
        assert_eq!(hops, [&b"first"[..], &b"second"[..]]);
        assert_eq!(message.header("hop"), Some(&b"second"[..]), "the last");
        assert_eq!(
            message.headers().first("hop").map(|v| &v[..]),
            Some(&b"first"[..])
        );
        assert_eq!(message.header("absent"), None);
        assert_eq!(message.timestamp(), Timestamp::CreateTime(created_ms));
    }
    let payloads: Vec<Option<&str>> = (0..3)
        .map(|offset| {
            messages[&(topic.clone(), offset)]
                .payload_str()
                .map(|p| p.expect("UTF-8"))
        })
        .collect();
    assert_eq!(payloads, [Some("v√"), Some("v√ again"), None]);

    let stamped = &messages[&(appended.clone(), 0)];
    assert_eq!(stamped.payload_str(), Some(Ok("v√")));
    assert_eq!(stamped.headers().len(), 3);
    match stamped.timestamp() {
        // The broker's clock is this machine's.
        Timestamp::LogAppendTime(ms) => assert!(
            (before_ms - 1_000..=after_ms + 1_000).contains(&ms),
            "appended at {ms}, produced between {before_ms} and {after_ms}"
        ),
        other => panic!("{other:?}: the topic's broker stamps its records"),
    }
    let _ = member.close().await.expect("close");
}
