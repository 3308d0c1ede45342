//! The `tenure` command end to end, on the real ZooKeeper, etcd and Kafka of
//! `scripts/services`: `describe` after a known consumption gives the known
//! owners, tokens, offsets and lag; `reset-offsets` plans without writing by
//! default (and on `--dry-run`), refuses `--execute` on a live group, and
//! moves offsets where a new member then starts; shifts, durations,
//! partition selections and CSV export and re-import give the offsets they
//! should, and a bad CSV line is named; `delete-offsets` and `delete` are
//! refused on a live group and work on a dead one; the member's metrics
//! agree with `describe`; corrupt records are named with their path.

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
    run_tenure_with(args, &[])
}

/// Runs the `tenure` binary as [`run_tenure`] does, with the variables
/// `env` set (and those it gives an empty value removed).
fn run_tenure_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tenure-under-test"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENURE_") {
            command.env_remove(name);
        }
    }
    for (name, value) in env {
        if value.is_empty() {
            command.env_remove(name);
        } else {
            command.env(name, value);
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

/// `reset-offsets --execute`, which must succeed.
fn reset_ok(store: &[String], group: &str, topic: &str, to: &str) -> Value {
    let output = reset(store, group, topic, to, &["--execute"]);
    assert!(
        output.status.success(),
        "reset to {to} failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("reset-offsets --json prints JSON")
}

/// The new offsets of a `reset-offsets --json` plan, in partition order.
fn news(plan: &Value) -> Vec<Value> {
    plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| c["new"].clone())
        .collect()
}

/// `tenure reset-offsets <group> <args> --json`, which must succeed.
fn reset_json(store: &[String], group: &str, args: &[&str]) -> Value {
    let mut all = vec!["reset-offsets", group];
    all.extend_from_slice(args);
    all.push("--json");
    let output = tenure(store, &all);
    assert!(
        output.status.success(),
        "reset-offsets {args:?} failed: {}{}",
        stdout(&output),
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout).expect("reset-offsets --json prints JSON")
}

/// `tenure <args>`, which must fail (exit status 1) with all of `words` in
/// its error.
fn refused(store: &[String], args: &[&str], words: &[&str]) -> Output {
    let output = tenure(store, args);
    assert_eq!(
        output.status.code(),
        Some(1),
        "{args:?} was not refused: {}{}",
        stdout(&output),
        stderr(&output)
    );
    for word in words {
        assert!(
            stderr(&output).contains(word),
            "{args:?}: no {word:?} in {}",
            stderr(&output)
        );
    }
    output
}

/// The committed offsets `describe` shows, in topic and partition order.
fn committed(store: &[String], group: &str) -> Vec<Value> {
    column(&describe(store, group), "committed")
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
        first.entry(message.partition()).or_insert(message.offset());
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

    // A live group is not reset; a plan (the default, or said with
    // --dry-run) shows what would move and writes nothing.
    let refused = reset(&store, &group, &topic, "earliest", &["--execute"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("live member") && stderr(&refused).contains("--force"),
        "{}",
        stderr(&refused)
    );
    for extra in [&[][..], &["--dry-run"]] {
        let dry = reset(&store, &group, &topic, "earliest", extra);
        assert!(dry.status.success(), "{}", stderr(&dry));
        assert!(stderr(&dry).contains("--execute"), "{}", stderr(&dry));
        let plan: Value = serde_json::from_slice(&dry.stdout).expect("JSON plan");
        assert_eq!(plan["applied"], false);
        assert_eq!(plan["live_members"], serde_json::json!(["a"]));
        assert_eq!(news(&plan), numbers(&[0, 0, 0]));
    }
    let unchanged = describe(&store, &group);
    assert_eq!(column(&unchanged, "committed"), numbers(&FIRST));

    // The member leaves: no members, no owners, offsets and lag stay.
    let _ = member.close().await.expect("clean close");
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
    let _ = next.close().await.expect("clean close");

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
    let _turn = crate::turns::shared().await;
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
    let _turn = crate::turns::shared().await;
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
    let _turn = crate::turns::shared().await;
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
    let _turn = crate::turns::shared().await;
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

/// The guard of an offset write, an offset delete and a group delete is
/// checked by the store at the write (etcd: in the same transaction), not
/// only by the tool's look beforehand.
async fn guarded_writes(admin: &dyn tenure::admin::GroupAdmin, backend: Box<dyn Backend>) {
    use tenure::admin::{AdminError, WriteGuard};
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
    let partitions = [partition.clone()].into();
    match admin
        .delete_offsets(&group, &partitions, WriteGuard::NoLiveMembers)
        .await
    {
        Err(AdminError::GroupActive { members, .. }) => assert_eq!(members, ["a"]),
        other => panic!("a guarded delete of offsets under a live member: {other:?}"),
    }
    match admin.delete_group(&group, WriteGuard::NoLiveMembers).await {
        Err(AdminError::GroupActive { members, .. }) => assert_eq!(members, ["a"]),
        other => panic!("a guarded delete of the group under a live member: {other:?}"),
    }
    assert_eq!(
        admin.records(&group).await.expect("records").members.len(),
        1
    );

    let _ = member.close().await.expect("clean close");
    // Two offsets, so that one is left when the other is deleted (etcd
    // knows no group without keys).
    let offsets = [(partition.clone(), 7), (TopicPartition::new("t", 1), 8)].into();
    admin
        .write_offsets(&group, &offsets, WriteGuard::NoLiveMembers)
        .await
        .expect("a guarded write with no member");
    let records = admin.records(&group).await.expect("records");
    assert_eq!(records.offsets.get(&partition), Some(&7));
    admin
        .delete_offsets(&group, &partitions, WriteGuard::NoLiveMembers)
        .await
        .expect("a guarded delete of offsets with no member");
    let records = admin.records(&group).await.expect("records");
    assert_eq!(records.offsets.get(&partition), None);
    admin
        .write_offsets(&group, &offsets, WriteGuard::NoLiveMembers)
        .await
        .expect("written again");
    let deletion = admin
        .delete_group(&group, WriteGuard::NoLiveMembers)
        .await
        .expect("a guarded delete of the group with no member");
    assert!(
        deletion.removed > 0 && deletion.kept.is_empty(),
        "{deletion:?}"
    );
    match admin.records(&group).await {
        Err(AdminError::UnknownGroup { .. }) => {}
        other => panic!("records of a deleted group: {other:?}"),
    }
}

/// An offset the operator writes or deletes takes the partition's progress
/// record with it: even when it writes the offset the record was written
/// with, what the record says of the work above it no longer counts.
async fn offset_writes_take_the_progress_record(
    admin: &dyn tenure::admin::GroupAdmin,
    store: &'static str,
    backend: Box<dyn Backend>,
) {
    use tenure::admin::WriteGuard;
    use tenure::core::{ClaimOutcome, Committed, Event, MemberInfo, Progress, Subscription};
    use tenure_testkit::driver::{self, Driver, GROUP};

    let info = MemberInfo {
        id: tenure::core::MemberId::new("p").expect("a valid id"),
        subscription: Subscription::topics([driver::TOPIC]).expect("a valid topic"),
        strategy: "range".to_owned(),
    };
    let mut member = Driver::start(store, backend, info, Duration::from_secs(10)).await;
    let token = match member.claim(0).await {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { token, .. }),
            ..
        } => token,
        other => panic!("{store}: a claim of a free partition answered {other:?}"),
    };
    let mut progress = Progress::new();
    progress.mark_done(12);
    let read = |event: Event| match event {
        Event::OffsetResult { result, .. } => result,
        other => panic!("{store}: an offset read answered {other:?}"),
    };
    for deleting in [false, true] {
        let committed = member.commit_progress(0, 10, token, progress.clone()).await;
        assert!(
            matches!(committed, Event::CommitResult { result: Ok(()), .. }),
            "{store}: {committed:?}"
        );
        assert_eq!(
            read(member.read_offset(0).await),
            Ok(Some(Committed {
                offset: 10,
                progress: progress.clone()
            })),
            "{store}"
        );
        let partition = driver::partition(0);
        if deleting {
            let partitions = [partition].into();
            admin
                .delete_offsets(GROUP, &partitions, WriteGuard::None)
                .await
                .expect("offsets deleted");
            assert_eq!(read(member.read_offset(0).await), Ok(None), "{store}");
            // Written again by the tool, the offset comes alone.
            let offsets = [(driver::partition(0), 10)].into();
            admin
                .write_offsets(GROUP, &offsets, WriteGuard::None)
                .await
                .expect("offsets written");
        } else {
            let offsets = [(partition, 10)].into();
            admin
                .write_offsets(GROUP, &offsets, WriteGuard::None)
                .await
                .expect("offsets written");
        }
        assert_eq!(
            read(member.read_offset(0).await),
            Ok(Some(Committed::at(10))),
            "{store}: the progress record outlived the tool's write"
        );
    }
    member.backend.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_writes_take_the_progress_record_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("cli-progress").await;
    let connect = zookeeper.connect_string().to_owned();
    let admin = tenure::zookeeper::ZooKeeperAdmin::connect(&connect, Duration::from_secs(5))
        .await
        .expect("admin session");
    let backend = tenure::zookeeper::ZooKeeperBackend::new(connect);
    offset_writes_take_the_progress_record(&admin, "zookeeper", Box::new(backend)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_writes_take_the_progress_record_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("cli-progress").await;
    let admin =
        tenure::etcd::EtcdAdmin::connect(etcd.endpoint(), etcd.prefix(), Duration::from_secs(5))
            .await
            .expect("admin connection");
    let backend = tenure::etcd::EtcdBackend::new(etcd.endpoint()).prefix(etcd.prefix());
    offset_writes_take_the_progress_record(&admin, "etcd", Box::new(backend)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_writes_on_zookeeper() {
    let _turn = crate::turns::shared().await;
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
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("cli-guard").await;
    let admin =
        tenure::etcd::EtcdAdmin::connect(etcd.endpoint(), etcd.prefix(), Duration::from_secs(5))
            .await
            .expect("admin connection");
    let backend = tenure::etcd::EtcdBackend::new(etcd.endpoint()).prefix(etcd.prefix());
    guarded_writes(&admin, Box::new(backend)).await;
}

/// A file of this test's own, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!("tenure-cli-{name}.csv"));
        std::fs::write(&path, contents).expect("write a temporary file");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Planning by default, `--execute`, shifts, durations, partition
/// selections, and CSV export and re-import, on a group without members.
async fn plans_shifts_and_files(store: Vec<String>, name: &str) {
    let client = kafka::client().await;
    let a = kafka::topic(&format!("{name}-a"));
    let b = kafka::topic(&format!("{name}-b"));
    kafka::create_topic(&client, &a, 3).await;
    kafka::create_topic(&client, &b, 2).await;
    for (p, &count) in FIRST.iter().enumerate() {
        kafka::produce(&client, &a, p as u32, count as usize).await;
    }
    // b gets 5 messages per partition now and 5 more later, for the
    // durations.
    for p in 0..2 {
        kafka::produce(&client, &b, p, 5).await;
    }
    let first_batch_done = now_ms();
    let group = common::group(name);

    // A plan is the default: printed, and nothing written — not even the
    // group. Seeding a group with no records needs --force.
    refused(
        &store,
        &["reset-offsets", &group, "--topic", &a, "--to", "3"],
        &["has no records", "--force"],
    );
    for extra in [&[][..], &["--dry-run"]] {
        let mut args = vec!["--topic", &a, "--to", "3", "--force"];
        args.extend_from_slice(extra);
        let plan = reset_json(&store, &group, &args);
        assert_eq!(plan["applied"], false);
        assert_eq!(news(&plan), numbers(&[3, 3, 3]));
        refused(&store, &["describe", &group], &["has no records"]);
    }
    let table = tenure(
        &store,
        &[
            "reset-offsets",
            &group,
            "--topic",
            &a,
            "--to",
            "3",
            "--force",
        ],
    );
    assert!(table.status.success(), "{}", stderr(&table));
    assert!(
        stdout(&table).contains("nothing written") && stdout(&table).contains("--execute"),
        "{}",
        stdout(&table)
    );
    // --execute writes it.
    let written = reset_json(
        &store,
        &group,
        &["--topic", &a, "--to", "3", "--force", "--execute"],
    );
    assert_eq!(written["applied"], true);
    assert_eq!(committed(&store, &group), numbers(&[3, 3, 3]));

    // Shifts: from the committed offset, on the partitions named, clamped
    // to the log.
    let a02 = format!("{a}:0,2");
    reset_json(
        &store,
        &group,
        &["--topic", &a02, "--shift-by", "-2", "--execute"],
    );
    assert_eq!(committed(&store, &group), numbers(&[1, 3, 1]));
    let a0 = format!("{a}:0");
    let past = reset_json(
        &store,
        &group,
        &["--topic", &a0, "--shift-by", "100", "--execute"],
    );
    assert_eq!(past["changes"][0]["new"], 10, "{past:#}");
    assert_eq!(past["changes"][0]["clamped_from"], 101, "{past:#}");
    let before = reset_json(&store, &group, &["--topic", &a0, "--shift-by=-1000"]);
    assert_eq!(news(&before), numbers(&[0]), "clamped to the log start");
    assert_eq!(committed(&store, &group), numbers(&[10, 3, 1]));
    refused(
        &store,
        &["reset-offsets", &group, "--topic", &b, "--shift-by", "1"],
        &["no committed offset", &format!("{b}:0")],
    );

    // Selections: some partitions of one topic, all of another; every topic
    // of the group; a partition Kafka does not have.
    let a1 = format!("{a}:1");
    let both = reset_json(
        &store,
        &group,
        &[
            "--topic",
            &a1,
            "--topic",
            &b,
            "--to",
            "earliest",
            "--execute",
        ],
    );
    assert_eq!(both["topics"], serde_json::json!([a, b]));
    assert_eq!(committed(&store, &group), numbers(&[10, 0, 1, 0, 0]));
    let all = reset_json(&store, &group, &["--all-topics", "--to", "latest"]);
    assert_eq!(all["applied"], false);
    assert_eq!(news(&all), numbers(&[10, 20, 30, 5, 5]));
    refused(
        &store,
        &[
            "reset-offsets",
            &group,
            "--topic",
            &format!("{a}:3"),
            "--to",
            "0",
        ],
        &["partition 3", "does not exist"],
    );

    // Export: the committed offsets as kafka-consumer-groups.sh writes
    // them; re-imported, the same plan, and written back exactly.
    let export = tenure(
        &store,
        &[
            "reset-offsets",
            &group,
            "--all-topics",
            "--to-current",
            "--export",
        ],
    );
    assert!(export.status.success(), "{}", stderr(&export));
    let csv = stdout(&export);
    assert_eq!(
        csv,
        format!("{a},0,10\n{a},1,0\n{a},2,1\n{b},0,0\n{b},1,0\n"),
        "the export"
    );
    let file = TempFile::new(&group, &csv);
    reset_json(
        &store,
        &group,
        &["--all-topics", "--to", "latest", "--execute"],
    );
    assert_eq!(committed(&store, &group), numbers(&[10, 20, 30, 5, 5]));
    let again = tenure(
        &store,
        &[
            "reset-offsets",
            &group,
            "--from-file",
            file.path(),
            "--export",
        ],
    );
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again), csv, "export, import, export round-trips");
    let imported = reset_json(&store, &group, &["--from-file", file.path(), "--execute"]);
    assert_eq!(imported["applied"], true);
    assert_eq!(committed(&store, &group), numbers(&[10, 0, 1, 0, 0]));

    // Bad files: the line is named, partitions Kafka lacks are refused, and
    // nothing is written.
    let bad = |contents: &str, words: &[&str]| {
        let file = TempFile::new(&format!("{group}-bad"), contents);
        let args = [
            "reset-offsets",
            &group,
            "--from-file",
            file.path(),
            "--execute",
        ];
        let output = refused(&store, &args, words);
        assert!(stderr(&output).contains(file.path()), "{}", stderr(&output));
    };
    bad(&format!("{a},0,1\n{a},zero,2\n"), &["line 2", "\"zero\""]);
    bad(&format!("{a},0,1\n\n{a},0,2\n"), &["line 3", "line 1"]);
    bad(
        &format!("{a},0,1\n{a},1\n"),
        &["line 2", "found 2 field(s)"],
    );
    bad(&format!("{a},0,-5\n"), &["line 1", "offset"]);
    bad(
        &format!("other-group,{a},0,5\n"),
        &["line 1", "other-group"],
    );
    bad("\n\n", &["no offsets"]);
    bad(
        &format!("{a},0,1\n{a},9,1\n"),
        &["line 2", "partition 9", "does not exist"],
    );
    bad(
        &format!("{a},0,1\n{a}-missing,0,1\n"),
        &["line 2", "does not exist in Kafka"],
    );
    assert_eq!(committed(&store, &group), numbers(&[10, 0, 1, 0, 0]));

    // Durations: b's second batch comes at least 6 s after its first, so a
    // time between the two finds the second batch's first offset.
    while now_ms() < first_batch_done + 6_000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let between = now_ms();
    for p in 0..2 {
        kafka::produce(&client, &b, p, 5).await;
    }
    for (duration, expected) in [("P1D", [0, 0]), ("1d", [0, 0]), ("PT0S", [10, 10])] {
        let plan = reset_json(&store, &group, &["--topic", &b, "--by-duration", duration]);
        assert_eq!(news(&plan), numbers(&expected), "--by-duration {duration}");
    }
    let ago = now_ms() - (between - 3_000);
    let duration = format!("PT{}.{:03}S", ago / 1000, ago % 1000);
    let moved = reset_json(
        &store,
        &group,
        &["--topic", &b, "--by-duration", &duration, "--execute"],
    );
    assert_eq!(news(&moved), numbers(&[5, 5]), "--by-duration {duration}");
    assert_eq!(committed(&store, &group), numbers(&[10, 0, 1, 5, 5]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_shifts_and_files_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("cli-plans").await;
    let store = vec![
        "--zookeeper".to_owned(),
        zookeeper.connect_string().to_owned(),
    ];
    plans_shifts_and_files(store, "cli-plans-zk").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_shifts_and_files_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("cli-plans").await;
    let store = vec![
        "--etcd".to_owned(),
        etcd.endpoint().to_owned(),
        "--etcd-prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    plans_shifts_and_files(store, "cli-plans-etcd").await;
}

/// `delete-offsets` and `delete`: refused while a member is live, forced
/// `delete` takes the offsets but not what the member's session holds, and
/// on a dead group both do their work.
async fn deletes_are_guarded(store: Vec<String>, backend: Box<dyn Backend>, name: &str) {
    let client = kafka::client().await;
    let topic = kafka::topic(name);
    kafka::create_topic(&client, &topic, 3).await;
    for (p, &count) in FIRST.iter().enumerate() {
        kafka::produce(&client, &topic, p as u32, count as usize).await;
    }
    let group = common::group(name);
    reset_json(
        &store,
        &group,
        &["--topic", &topic, "--to", "latest", "--force", "--execute"],
    );
    assert_eq!(committed(&store, &group), numbers(&FIRST));

    let config = Config::new(&group, "a", [topic.as_str()])
        .expect("valid config")
        .with_session_timeout(common::SESSION);
    let member = GroupMember::builder(config)
        .partitions([(topic.clone(), 3)].into())
        .auto_drain(true)
        .join(backend)
        .await
        .expect("join");
    let mut view = member.watch_view();
    tokio::time::timeout(
        Duration::from_secs(20),
        view.wait_for(|v| v.registered && v.settled && v.owned.len() == 3),
    )
    .await
    .expect("settled within 20 s")
    .expect("member running");

    // Live: both refused, a dry run shows and deletes nothing.
    let p1 = format!("{topic}:1");
    refused(
        &store,
        &["delete-offsets", &group, "--topic", &p1],
        &["live member", "(a)", "--force"],
    );
    refused(
        &store,
        &["delete", &group],
        &["live member", "(a)", "--force"],
    );
    for args in [
        &["delete-offsets", &group, "--topic", &p1, "--dry-run"][..],
        &["delete", &group, "--dry-run"],
    ] {
        let dry = tenure(&store, args);
        assert!(dry.status.success(), "{args:?}: {}", stderr(&dry));
        assert!(stdout(&dry).contains("nothing deleted"), "{}", stdout(&dry));
    }
    assert_eq!(committed(&store, &group), numbers(&FIRST));

    // Forced on a live group: the offsets go, the member's registration and
    // owner records stay.
    let forced = tenure(&store, &["delete", &group, "--force", "--json"]);
    assert!(forced.status.success(), "{}", stderr(&forced));
    let forced: Value = serde_json::from_slice(&forced.stdout).expect("JSON");
    assert!(
        !forced["kept"].as_array().expect("kept").is_empty(),
        "{forced:#}"
    );
    let kept = describe(&store, &group);
    assert_eq!(kept["members"][0]["id"], "a", "{kept:#}");
    assert_eq!(column(&kept, "owner"), vec![Value::from("a"); 3]);
    assert_eq!(column(&kept, "committed"), vec![Value::Null; 3]);
    let _ = member.close().await.expect("clean close");

    // Dead: offsets of one partition, then the whole group.
    reset_json(
        &store,
        &group,
        &["--topic", &topic, "--to", "latest", "--force", "--execute"],
    );
    let deleted = tenure(
        &store,
        &["delete-offsets", &group, "--topic", &p1, "--json"],
    );
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let deleted: Value = serde_json::from_slice(&deleted.stdout).expect("JSON");
    assert_eq!(deleted["applied"], true);
    assert_eq!(deleted["offsets"][0]["offset"], FIRST[1]);
    assert_eq!(
        committed(&store, &group),
        vec![Value::from(FIRST[0]), Value::Null, Value::from(FIRST[2])]
    );
    refused(
        &store,
        &["delete-offsets", &group, "--topic", &p1],
        &["nothing to delete"],
    );
    let gone = tenure(&store, &["delete", &group]);
    assert!(gone.status.success(), "{}", stderr(&gone));
    assert!(stdout(&gone).contains("deleted"), "{}", stdout(&gone));
    refused(&store, &["describe", &group], &["has no records"]);
    let groups = tenure(&store, &["groups"]);
    assert!(
        !stdout(&groups).lines().any(|l| l == group),
        "{}",
        stdout(&groups)
    );
    refused(&store, &["delete", &group], &["has no records"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_guarded_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("cli-delete").await;
    let connect = zookeeper.connect_string().to_owned();
    let store = vec!["--zookeeper".to_owned(), connect.clone()];
    let backend = tenure::zookeeper::ZooKeeperBackend::new(connect);
    deletes_are_guarded(store, Box::new(backend), "cli-delete-zk").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_are_guarded_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("cli-delete").await;
    let store = vec![
        "--etcd".to_owned(),
        etcd.endpoint().to_owned(),
        "--etcd-prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    let backend = tenure::etcd::EtcdBackend::new(etcd.endpoint()).prefix(etcd.prefix());
    deletes_are_guarded(store, Box::new(backend), "cli-delete-etcd").await;
}

fn secured_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the secured servers of scripts/services; start \
             them with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

/// Waits until `member` has registered: a join returns once the session
/// is open, and a `describe` before the registration finds no member.
async fn registered(member: &GroupMember) {
    let mut view = member.watch_view();
    tokio::time::timeout(Duration::from_secs(20), view.wait_for(|v| v.registered))
        .await
        .expect("registered within 20 s")
        .expect("the view is published");
}

/// `tenure describe <group> --json` with exactly `args` before it; asserts
/// that it succeeds and that `member` is the group's one member.
fn described_by(args: &[&str], group: &str, member: &str) {
    described_by_with(args, &[], group, member);
}

/// [`described_by`], with the variables `env` (see [`run_tenure_with`]).
fn described_by_with(args: &[&str], env: &[(&str, &str)], group: &str, member: &str) {
    let mut all = args.to_vec();
    all.extend(["--timeout", "10", "describe", group, "--json"]);
    let output = run_tenure_with(&all, env);
    assert!(output.status.success(), "{}", stderr(&output));
    let description: Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(description["members"][0]["id"], member, "{description:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secured_stores_and_brokers_are_reached_with_the_commands_flags() {
    let _turn = crate::turns::shared().await;
    use tenure::etcd::{EtcdBackend, EtcdSecurity};
    use tenure::zookeeper::{Digest, ZooKeeperBackend, ZooKeeperSecurity};

    let client = kafka::client().await;
    let topic = kafka::topic("cli-secured");
    kafka::create_topic(&client, &topic, 1).await;

    // ZooKeeper over TLS, with a client certificate and a digest.
    let (zk, zk_ca, zk_cert, zk_key) = (
        secured_var("TENURE_ZOOKEEPER_TLS"),
        secured_var("TENURE_ZOOKEEPER_TLS_CA"),
        secured_var("TENURE_ZOOKEEPER_TLS_CERT"),
        secured_var("TENURE_ZOOKEEPER_TLS_KEY"),
    );
    let security = ZooKeeperSecurity::new()
        .digest(Digest::new("billing", "s3cret").expect("valid credentials"))
        .ca_file(&zk_ca)
        .expect("the CA")
        .client_identity_files(&zk_cert, &zk_key)
        .expect("the certificate");
    let group = common::group("cli-zk-tls");
    let member = join(
        Box::new(ZooKeeperBackend::new(zk.as_str()).security(security)),
        &group,
        "m1",
        &topic,
    )
    .await;
    registered(&member).await;
    let zk_flags = [
        "--zookeeper",
        &zk,
        "--zookeeper-ca",
        &zk_ca,
        "--zookeeper-cert",
        &zk_cert,
        "--zookeeper-key",
        &zk_key,
        "--zookeeper-digest",
        "billing:s3cret",
    ];
    described_by(&zk_flags, &group, "m1");
    // Without the client certificate: refused, saying so.
    let output = run_tenure(&[
        "--zookeeper",
        &zk,
        "--zookeeper-ca",
        &zk_ca,
        "--timeout",
        "5",
        "groups",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("client's certificate"),
        "{}",
        stderr(&output)
    );
    let _ = member.close().await.expect("close");

    // etcd over TLS with a user, and Kafka over SASL_SSL, at once.
    let (etcd, etcd_ca, etcd_cert, etcd_key, etcd_user, etcd_password) = (
        secured_var("TENURE_ETCD_TLS"),
        secured_var("TENURE_ETCD_TLS_CA"),
        secured_var("TENURE_ETCD_TLS_CERT"),
        secured_var("TENURE_ETCD_TLS_KEY"),
        secured_var("TENURE_ETCD_TLS_USER"),
        secured_var("TENURE_ETCD_TLS_PASSWORD"),
    );
    let group = common::group("cli-etcd-tls");
    let prefix = format!("/tenure-cli/{group}");
    let security = EtcdSecurity::new()
        .user(&etcd_user, &etcd_password)
        .ca_file(&etcd_ca)
        .expect("the CA")
        .client_identity_files(&etcd_cert, &etcd_key)
        .expect("the certificate");
    let member = join(
        Box::new(
            EtcdBackend::new(etcd.as_str())
                .prefix(&prefix)
                .security(security),
        ),
        &group,
        "m1",
        &topic,
    )
    .await;
    registered(&member).await;
    let (kafka_secured, kafka_ca, kafka_user, kafka_password) = (
        secured_var("TENURE_KAFKA_SECURED"),
        secured_var("TENURE_KAFKA_SECURED_CA"),
        secured_var("TENURE_KAFKA_SECURED_USER"),
        secured_var("TENURE_KAFKA_SECURED_PASSWORD"),
    );
    described_by(
        &[
            "--etcd",
            &etcd,
            "--etcd-prefix",
            &prefix,
            "--etcd-user",
            &etcd_user,
            "--etcd-password",
            &etcd_password,
            "--etcd-ca",
            &etcd_ca,
            "--etcd-cert",
            &etcd_cert,
            "--etcd-key",
            &etcd_key,
            "--bootstrap",
            &kafka_secured,
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-512",
            "--kafka-user",
            &kafka_user,
            "--kafka-password",
            &kafka_password,
            "--kafka-ca",
            &kafka_ca,
        ],
        &group,
        "m1",
    );
    // `system` for the CAs: the system's trust store, here pointed at the
    // test CAs (and only them) by SSL_CERT_FILE.
    let bundle = std::env::temp_dir().join(format!("tenure-cli-roots-{}.pem", std::process::id()));
    let mut pem = std::fs::read(&etcd_ca).expect("the etcd CA");
    pem.extend(std::fs::read(&kafka_ca).expect("the Kafka CA"));
    std::fs::write(&bundle, pem).expect("write the bundle");
    let bundle_path = bundle.display().to_string();
    described_by_with(
        &[
            "--etcd",
            &etcd,
            "--etcd-prefix",
            &prefix,
            "--etcd-user",
            &etcd_user,
            "--etcd-password",
            &etcd_password,
            "--etcd-ca",
            "system",
            "--etcd-cert",
            &etcd_cert,
            "--etcd-key",
            &etcd_key,
            "--bootstrap",
            &kafka_secured,
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-512",
            "--kafka-user",
            &kafka_user,
            "--kafka-password",
            &kafka_password,
            "--kafka-ca",
            "system",
        ],
        &[("SSL_CERT_FILE", &bundle_path), ("SSL_CERT_DIR", "")],
        &group,
        "m1",
    );
    let _ = std::fs::remove_file(&bundle);
    let _ = member.close().await.expect("close");
}

/// Every `TENURE_*` variable `command` (and its subcommands) reads.
fn variables_read(command: &clap::Command, names: &mut std::collections::BTreeSet<String>) {
    for arg in command.get_arguments() {
        if let Some(name) = arg.get_env().and_then(|name| name.to_str()) {
            names.insert(name.to_owned());
        }
    }
    for sub in command.get_subcommands() {
        variables_read(sub, names);
    }
}

/// A shell that evaluated scripts/services' exports (as scripts/test does,
/// and a developer does to run the tests by hand) also runs the `tenure`
/// command: the test servers' CA files and credentials must not become the
/// command's settings. Only the plain addresses are shared on purpose.
#[test]
fn the_services_exports_are_not_the_commands_settings() {
    let _turn = crate::turns::shared_blocking();
    let mut read = std::collections::BTreeSet::new();
    variables_read(&tenure_cli::command(), &mut read);
    assert!(
        read.contains("TENURE_KAFKA_CA") && read.contains("TENURE_ZOOKEEPER"),
        "the command's variables: {read:?}"
    );
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/services");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .arg("env")
        .output()
        .expect("run scripts/services env");
    assert!(output.status.success(), "{}", stderr(&output));
    let exported: std::collections::BTreeSet<String> = stdout(&output)
        .lines()
        .filter_map(|line| line.strip_prefix("export "))
        .filter_map(|line| line.split_once('='))
        .map(|(name, _)| name.to_owned())
        .collect();
    assert!(
        exported.contains("TENURE_KAFKA_SECURED_CA"),
        "scripts/services env: {exported:?}"
    );
    let shared = ["TENURE_ZOOKEEPER", "TENURE_ETCD", "TENURE_KAFKA"];
    let clashes: Vec<&String> = exported
        .intersection(&read)
        .filter(|name| !shared.contains(&name.as_str()))
        .collect();
    assert!(
        clashes.is_empty(),
        "scripts/services exports variables the tenure command reads as its settings: \
         {clashes:?}"
    );
}
