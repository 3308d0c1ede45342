//! The `tenure` command end to end, on the real ZooKeeper, etcd and Kafka of
//! `scripts/services`: `describe` after a known consumption gives the known
//! owners, tokens, offsets and lag; `reset-offsets` refuses on a live group,
//! plans without writing on `--dry-run`, and moves offsets where a new
//! member then starts; the member's metrics agree with `describe`; corrupt
//! records are named with their path.

use tenure_tests as common;
use tenure_tests::recorder;

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::kafka;
use serde_json::Value;
use tenure::core::{Config, TopicPartition};
use tenure::tokio::{Backend, GroupMember, KafkaConfig};

/// Messages produced to partition p before the member starts.
const FIRST: [i64; 3] = [10, 20, 30];
/// Messages produced to every partition while the member is live.
const SECOND: i64 = 5;

/// Runs the `tenure` binary with exactly `args`: the environment's
/// TENURE_* variables are removed so only the flags count.
fn run_tenure(args: &[&str]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tenure-under-test"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENURE_") {
            command.env_remove(name);
        }
    }
    command.args(args).output().expect("run the tenure binary")
}

/// Runs the `tenure` binary with `store` flags and Kafka's.
fn tenure(store: &[String], args: &[&str]) -> Output {
    let bootstrap = kafka::bootstrap();
    let mut all: Vec<&str> = store.iter().map(String::as_str).collect();
    all.extend(["--bootstrap", &bootstrap, "--timeout", "10"]);
    all.extend_from_slice(args);
    run_tenure(&all)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `tenure describe <group> --json`, which must succeed.
fn describe(store: &[String], group: &str) -> Value {
    let output = tenure(store, &["describe", group, "--json"]);
    assert!(
        output.status.success(),
        "describe failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("describe --json prints JSON")
}

/// One column of the partitions of a description, in partition order.
fn column(description: &Value, field: &str) -> Vec<Value> {
    description["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| p[field].clone())
        .collect()
}

fn numbers(values: &[i64]) -> Vec<Value> {
    values.iter().map(|&v| Value::from(v)).collect()
}

/// Describes until `done` holds, for at most 20 s (commits and fetches
/// happen on their own schedules).
async fn describe_until(store: &[String], group: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let description = describe(store, group);
        if done(&description) {
            return description;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "describe never showed what was expected; last: {description:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reset(store: &[String], group: &str, topic: &str, to: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "reset-offsets",
        group,
        "--topic",
        topic,
        "--to",
        to,
        "--json",
    ];
    args.extend_from_slice(extra);
    tenure(store, &args)
}

fn reset_ok(store: &[String], group: &str, topic: &str, to: &str) -> Value {
    let output = reset(store, group, topic, to, &[]);
    assert!(
        output.status.success(),
        "reset to {to} failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("reset-offsets --json prints JSON")
}

async fn join(backend: Box<dyn Backend>, group: &str, member: &str, topic: &str) -> GroupMember {
    GroupMember::builder(common::config_for(group, member, topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(backend)
        .await
        .unwrap_or_else(|e| panic!("{member} cannot join: {e}"))
}

/// Takes `count` messages and acknowledges each; returns the first offset
/// seen per partition.
async fn consume(member: &mut GroupMember, count: usize) -> BTreeMap<u32, i64> {
    let mut first = BTreeMap::new();
    for _ in 0..count {
        let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
            .await
            .expect("a message within 20 s")
            .expect("the member is running");
        first.entry(message.partition).or_insert(message.offset);
        message.ack();
    }
    first
}

/// The member's metrics and `describe` agree: owners, committed offsets
/// and lag, partition by partition. The member publishes on its own
/// schedule (a fetch brings the new log end), so this waits for agreement
/// and then checks it against what was expected.
async fn metrics_agree(
    store: &[String],
    group: &str,
    topic: &str,
    member: &str,
    lag: i64,
) -> Value {
    let recorder = recorder::installed();
    let gauge = |name: &str, partition: u32| {
        let number = partition.to_string();
        let labels = [
            ("group", group),
            ("member", member),
            ("topic", topic),
            ("partition", number.as_str()),
        ];
        match recorder.gauges(name, &labels).as_slice() {
            [(_, value)] => Value::from(*value as i64),
            _ => Value::Null,
        }
    };
    let from_metrics = |name: &str| -> Vec<Value> { (0..3).map(|p| gauge(name, p)).collect() };
    let description = describe_until(store, group, |d| {
        column(d, "lag") == from_metrics("tenure_partition_lag")
            && column(d, "committed") == from_metrics("tenure_committed_offset")
    })
    .await;
    assert_eq!(
        column(&description, "lag"),
        numbers(&[lag; 3]),
        "{description:#}"
    );
    let owned: Vec<Value> = column(&description, "owner")
        .iter()
        .map(|owner| Value::from(i64::from(owner == member)))
        .collect();
    assert_eq!(from_metrics("tenure_partition_owned"), owned);
    let labels = [("group", group), ("member", member)];
    assert_eq!(recorder.gauge_sum("tenure_partitions_owned", &labels), 3.0);
    // Every claim that took effect and was not handed off is still held.
    let claims = recorder.counter_sum("tenure_claims_total", &labels);
    let handoffs = recorder.counter_sum("tenure_handoffs_total", &labels);
    assert_eq!(claims - handoffs, 3, "claims {claims}, handoffs {handoffs}");
    assert_eq!(
        recorder.counter_sum("tenure_commit_failures_total", &labels)
            + recorder.counter_sum("tenure_commits_fenced_total", &labels),
        0
    );
    description
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The whole operator's story on one store.
async fn describe_and_reset(
    store: Vec<String>,
    backend: impl Fn() -> Box<dyn Backend>,
    name: &str,
) {
    let client = kafka::client().await;
    let topic = kafka::topic(name);
    kafka::create_topic(&client, &topic, 3).await;
    for (p, &count) in FIRST.iter().enumerate() {
        kafka::produce(&client, &topic, p as u32, count as usize).await;
    }
    let group = common::group(name);
    // Before any member exists: handles registered earlier go nowhere.
    recorder::installed();

    // An unknown group is an error that says where to look.
    let output = tenure(&store, &["describe", &group]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("has no records"),
        "{}",
        stderr(&output)
    );

    // A member consumes everything there is.
    let mut member = join(backend(), &group, "a", &topic).await;
    consume(&mut member, FIRST.iter().sum::<i64>() as usize).await;
    let live = describe_until(&store, &group, |d| {
        column(d, "committed") == numbers(&FIRST)
    })
    .await;
    let members = live["members"].as_array().expect("members");
    assert_eq!(members.len(), 1, "{live:#}");
    assert_eq!(members[0]["id"], "a");
    assert_eq!(members[0]["strategy"], "sticky");
    assert_eq!(members[0]["topics"], serde_json::json!([topic]));
    assert_eq!(
        members[0]["host"].as_str(),
        tenure::tokio::hostname().as_deref()
    );
    assert!(members[0]["since_ms"].as_i64().is_some(), "{live:#}");
    assert_eq!(column(&live, "owner"), vec![Value::from("a"); 3]);
    let view = member.view();
    let tokens: Vec<Value> = (0..3)
        .map(|p| {
            let token = view.owned[&TopicPartition::new(&topic, p)];
            Value::from(token.0)
        })
        .collect();
    assert_eq!(column(&live, "token"), tokens, "the member's own tokens");
    assert_eq!(column(&live, "log_end"), numbers(&FIRST));
    metrics_agree(&store, &group, &topic, "a", 0).await;

    // More arrives that the member does not take: lag = what is not committed.
    let between = now_ms();
    while now_ms() <= between {
        tokio::task::yield_now().await;
    }
    for p in 0..3 {
        kafka::produce(&client, &topic, p, SECOND as usize).await;
    }
    let ends: Vec<i64> = FIRST.iter().map(|c| c + SECOND).collect();
    let lagging = metrics_agree(&store, &group, &topic, "a", SECOND).await;
    assert_eq!(column(&lagging, "log_end"), numbers(&ends));
    assert_eq!(column(&lagging, "committed"), numbers(&FIRST));

    // A live group is not reset; a dry run shows the plan and writes nothing.
    let refused = reset(&store, &group, &topic, "earliest", &[]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("live member") && stderr(&refused).contains("--force"),
        "{}",
        stderr(&refused)
    );
    let dry = reset(&store, &group, &topic, "earliest", &["--dry-run"]);
    assert!(dry.status.success(), "{}", stderr(&dry));
    let plan: Value = serde_json::from_slice(&dry.stdout).expect("JSON plan");
    assert_eq!(plan["applied"], false);
    assert_eq!(plan["live_members"], serde_json::json!(["a"]));
    let news: Vec<Value> = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["new"].clone())
        .collect();
    assert_eq!(news, numbers(&[0, 0, 0]));
    let unchanged = describe(&store, &group);
    assert_eq!(column(&unchanged, "committed"), numbers(&FIRST));

    // The member leaves: no members, no owners, offsets and lag stay.
    member.close().await.expect("clean close");
    let idle = describe(&store, &group);
    assert_eq!(idle["members"], serde_json::json!([]));
    assert_eq!(column(&idle, "owner"), vec![Value::Null; 3]);
    assert_eq!(column(&idle, "committed"), numbers(&FIRST));
    assert_eq!(column(&idle, "lag"), numbers(&[SECOND; 3]));

    // To an offset: the next member starts exactly there.
    let moved = reset_ok(&store, &group, &topic, "3");
    assert_eq!(moved["applied"], true);
    let after = describe(&store, &group);
    assert_eq!(column(&after, "committed"), numbers(&[3, 3, 3]));
    let lags: Vec<i64> = ends.iter().map(|e| e - 3).collect();
    assert_eq!(column(&after, "lag"), numbers(&lags));
    let mut next = join(backend(), &group, "b", &topic).await;
    let total: i64 = lags.iter().sum();
    let first = consume(&mut next, total as usize).await;
    assert_eq!(first, [(0, 3), (1, 3), (2, 3)].into(), "where b started");
    next.close().await.expect("clean close");

    // To a time: the first message produced after it.
    reset_ok(&store, &group, &topic, &format!("@{}", between + 1));
    assert_eq!(
        column(&describe(&store, &group), "committed"),
        numbers(&FIRST)
    );
    // To the end, and past it (clamped to the end).
    reset_ok(&store, &group, &topic, "latest");
    let latest = describe(&store, &group);
    assert_eq!(column(&latest, "committed"), numbers(&ends));
    assert_eq!(column(&latest, "lag"), numbers(&[0, 0, 0]));
    reset_ok(&store, &group, &topic, "earliest");
    assert_eq!(
        column(&describe(&store, &group), "committed"),
        numbers(&[0, 0, 0])
    );
    let clamped = reset_ok(&store, &group, &topic, "1000000");
    assert_eq!(
        clamped["changes"][2]["new"],
        Value::from(ends[2]),
        "an offset past the end is clamped to it"
    );

    // The group is listed; the table names its columns.
    let groups = tenure(&store, &["groups"]);
    assert!(groups.status.success(), "{}", stderr(&groups));
    assert!(
        stdout(&groups).lines().any(|l| l == group),
        "{}",
        stdout(&groups)
    );
    let table = tenure(&store, &["describe", &group]);
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(
        stdout(&table).contains("TOPIC") && stdout(&table).contains("LAG"),
        "{}",
        stdout(&table)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_reset_on_zookeeper() {
    let zookeeper = common::zookeeper::ZooKeeper::new("cli").await;
    let connect = zookeeper.connect_string().to_owned();
    let store = vec!["--zookeeper".to_owned(), connect.clone()];
    describe_and_reset(
        store,
        || Box::new(tenure::zookeeper::ZooKeeperBackend::new(connect.clone())),
        "cli-zk",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_reset_on_etcd() {
    let etcd = common::etcd::Etcd::new("cli").await;
    let store = vec![
        "--etcd".to_owned(),
        etcd.endpoint().to_owned(),
        "--etcd-prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    let (endpoint, prefix) = (etcd.endpoint().to_owned(), etcd.prefix().to_owned());
    describe_and_reset(
        store,
        || Box::new(tenure::etcd::EtcdBackend::new(endpoint.clone()).prefix(prefix.clone())),
        "cli-etcd",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_records_are_named_with_their_path() {
    let zookeeper = common::zookeeper::ZooKeeper::new("cli-corrupt").await;
    let group = common::group("cli-corrupt");
    let options =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let raw = zookeeper.raw();
    for path in [
        "/consumers".to_owned(),
        format!("/consumers/{group}"),
        format!("/consumers/{group}/offsets"),
        format!("/consumers/{group}/offsets/t"),
    ] {
        raw.create(&path, b"", &options)
            .await
            .expect("create parents");
    }
    raw.create(&format!("/consumers/{group}/offsets/t/0"), b"12", &options)
        .await
        .expect("a good offset");
    let bad = format!("/consumers/{group}/offsets/t/1");
    raw.create(&bad, b"twelve", &options)
        .await
        .expect("a corrupt offset");

    // Without Kafka: the store's records alone.
    let output = run_tenure(&[
        "--zookeeper",
        zookeeper.connect_string(),
        "describe",
        &group,
        "--json",
    ]);
    assert_eq!(
        output.status.code(),
        Some(1),
        "corrupt records fail the run"
    );
    assert!(stderr(&output).contains(&bad), "{}", stderr(&output));
    let description: Value = serde_json::from_slice(&output.stdout).expect("JSON still printed");
    assert_eq!(description["corrupt"][0]["path"], Value::from(bad.as_str()));
    assert_eq!(column(&description, "committed"), vec![Value::from(12)]);
}

/// A store that does not answer is named, with the bound waited, and fails
/// the run; so does an address that cannot be one.
#[tokio::test]
async fn unreachable_stores_are_named() {
    let run = run_tenure;
    // Port 1 on the loopback: nothing listens there.
    let zookeeper = run(&["--zookeeper", "127.0.0.1:1", "--timeout", "1", "groups"]);
    assert_eq!(zookeeper.status.code(), Some(1));
    assert!(
        stderr(&zookeeper).contains("cannot reach ZooKeeper at 127.0.0.1:1"),
        "{}",
        stderr(&zookeeper)
    );
    let etcd = run(&["--etcd", "http://127.0.0.1:1", "--timeout", "1", "groups"]);
    assert_eq!(etcd.status.code(), Some(1));
    assert!(
        stderr(&etcd).contains("cannot reach etcd at http://127.0.0.1:1"),
        "{}",
        stderr(&etcd)
    );
    let neither = run(&["groups"]);
    assert_eq!(neither.status.code(), Some(1));
    assert!(
        stderr(&neither).contains("--zookeeper"),
        "{}",
        stderr(&neither)
    );
    let bad_target = run(&[
        "--zookeeper",
        "127.0.0.1:1",
        "reset-offsets",
        "g",
        "--topic",
        "t",
        "--to",
        "yesterday",
    ]);
    assert_eq!(bad_target.status.code(), Some(2), "bad usage");
    assert!(
        stderr(&bad_target).contains("earliest, latest"),
        "{}",
        stderr(&bad_target)
    );
}

/// The guard of an offset write is checked by the store at the write (etcd:
/// in the same transaction), not only by the tool's look beforehand.
async fn guarded_writes(admin: &dyn tenure::tokio::admin::GroupAdmin, backend: Box<dyn Backend>) {
    use tenure::tokio::admin::{AdminError, WriteGuard};
    let group = common::group("cli-guard");
    let partition = TopicPartition::new("t", 0);
    let mut config = Config::new(&group, "a", ["t"]).expect("valid config");
    config = config.with_session_timeout(common::SESSION);
    let member = GroupMember::builder(config)
        .partitions([("t".to_owned(), 1)].into())
        .auto_drain(true)
        .join(backend)
        .await
        .expect("join");
    let mut view = member.watch_view();
    tokio::time::timeout(
        Duration::from_secs(20),
        view.wait_for(|v| v.registered && v.settled),
    )
    .await
    .expect("settled within 20 s")
    .expect("member running");

    let offsets = [(partition.clone(), 7)].into();
    match admin
        .write_offsets(&group, &offsets, WriteGuard::NoLiveMembers)
        .await
    {
        Err(AdminError::GroupActive { members, .. }) => assert_eq!(members, ["a"]),
        other => panic!("a guarded write under a live member: {other:?}"),
    }
    let records = admin.records(&group).await.expect("records");
    assert_ne!(records.offsets.get(&partition), Some(&7), "nothing written");

    member.close().await.expect("clean close");
    admin
        .write_offsets(&group, &offsets, WriteGuard::NoLiveMembers)
        .await
        .expect("a guarded write with no member");
    let records = admin.records(&group).await.expect("records");
    assert_eq!(records.offsets.get(&partition), Some(&7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_on_zookeeper() {
    let zookeeper = common::zookeeper::ZooKeeper::new("cli-guard").await;
    let connect = zookeeper.connect_string().to_owned();
    let admin = tenure::zookeeper::ZooKeeperAdmin::connect(&connect, Duration::from_secs(5))
        .await
        .expect("admin session");
    let backend = tenure::zookeeper::ZooKeeperBackend::new(connect);
    guarded_writes(&admin, Box::new(backend)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_on_etcd() {
    let etcd = common::etcd::Etcd::new("cli-guard").await;
    let admin =
        tenure::etcd::EtcdAdmin::connect(etcd.endpoint(), etcd.prefix(), Duration::from_secs(5))
            .await
            .expect("admin connection");
    let backend = tenure::etcd::EtcdBackend::new(etcd.endpoint()).prefix(etcd.prefix());
    guarded_writes(&admin, Box::new(backend)).await;
}
