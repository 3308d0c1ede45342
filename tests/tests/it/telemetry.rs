//! The metrics members report, on the embedded in-memory store, read back
//! through a recorder that keeps every value. Tests run in parallel in one
//! process and share the recorder: each reads only its own group's series.

use tenure_tests as common;
use tenure_tests::recorder;

use std::collections::BTreeSet;
use std::time::Duration;

use common::memory::Memory;
use common::{Monitor, TOPIC};
use metrics::Unit;
use recorder::Captured;
use tenure::core::TopicPartition;
use tenure::tokio::GroupMember;

const CLAIMS: &str = "tenure_claims_total";
const HANDOFFS: &str = "tenure_handoffs_total";
const CLAIM_WAIT: &str = "tenure_claim_wait_seconds";
const REBALANCE: &str = "tenure_rebalance_seconds";
const DRAIN: &str = "tenure_drain_seconds";
const COMMIT_FAILURES: &str = "tenure_commit_failures_total";
const COMMITS_FENCED: &str = "tenure_commits_fenced_total";
const PARTITIONS_OWNED: &str = "tenure_partitions_owned";
const PARTITION_OWNED: &str = "tenure_partition_owned";
const COMMITTED_OFFSET: &str = "tenure_committed_offset";
const PARTITION_LAG: &str = "tenure_partition_lag";

const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];

/// The recorder, installed before any member registers its metrics.
fn recorder() -> &'static Captured {
    recorder::installed()
}

/// The labels of one member's series.
fn of<'a>(group: &'a str, member: &'a str) -> [(&'a str, &'a str); 2] {
    [("group", group), ("member", member)]
}

/// Waits until `done` holds, polling the recorder; fails after a bound
/// with `what` and the last look.
async fn eventually(what: &str, done: impl Fn() -> Result<(), String>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let last = match done() {
            Ok(()) => return,
            Err(last) => last,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The partitions whose `tenure_partition_owned` gauge of `member` is 1.
fn owned_by_gauge(recorder: &Captured, group: &str, member: &str) -> BTreeSet<TopicPartition> {
    recorder
        .gauges(PARTITION_OWNED, &of(group, member))
        .into_iter()
        .filter(|(_, value)| *value == 1.0)
        .map(|(labels, _)| {
            let number = labels["partition"].parse().expect("a partition number");
            TopicPartition::new(&labels["topic"], number)
        })
        .collect()
}

/// Every member's owned gauges match its view, and the members' counts add
/// up to `total`.
fn gauges_match_views(
    recorder: &Captured,
    group: &str,
    monitor: &Monitor,
    members: &[&str],
    total: usize,
) -> Result<(), String> {
    for member in members {
        let view: BTreeSet<TopicPartition> = monitor.views[*member].owned.keys().cloned().collect();
        let gauges = owned_by_gauge(recorder, group, member);
        if gauges != view {
            return Err(format!("{member} owns {view:?}, its gauges say {gauges:?}"));
        }
        let count = recorder.gauge_sum(PARTITIONS_OWNED, &of(group, member));
        if count != view.len() as f64 {
            return Err(format!("{member} owns {} but reports {count}", view.len()));
        }
    }
    let sum = recorder.gauge_sum(PARTITIONS_OWNED, &[("group", group)]);
    if sum != total as f64 {
        return Err(format!("partitions owned add up to {sum}, not {total}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_report_what_they_own_and_how_they_got_it() {
    let _turn = crate::turns::shared().await;
    let recorder = recorder();
    let stores = Memory::new();
    let (group, monitor, members) = common::three_settled(&stores, "telemetry-own").await;
    eventually("the gauges to match the views", || {
        gauges_match_views(recorder, &group, &monitor, &MEMBERS, 12)
    })
    .await;
    let group_only = [("group", group.as_str())];
    // Members joining one after another may hand partitions on before
    // settling: every claim that took effect is still owned or was handed
    // over, and each has its wait.
    let claims = recorder.counter_sum(CLAIMS, &group_only);
    let handoffs = recorder.counter_sum(HANDOFFS, &group_only);
    assert_eq!(
        claims - handoffs,
        12,
        "{claims} claims, {handoffs} handoffs"
    );
    for member in MEMBERS {
        let claims = recorder.counter_sum(CLAIMS, &of(&group, member));
        let waits = recorder.samples(CLAIM_WAIT, &of(&group, member));
        assert_eq!(waits.len() as u64, claims, "{member}: a wait per claim");
        assert!(waits.iter().all(|w| *w >= 0.0 && *w < 20.0), "{waits:?}");
        assert!(
            !recorder.samples(REBALANCE, &of(&group, member)).is_empty(),
            "{member} settled after its assignment changed"
        );
    }
    assert_eq!(recorder.counter_sum(COMMITS_FENCED, &group_only), 0);
    assert_eq!(recorder.counter_sum(COMMIT_FAILURES, &group_only), 0);
    for (name, unit) in [
        (CLAIMS, Unit::Count),
        (HANDOFFS, Unit::Count),
        (CLAIM_WAIT, Unit::Seconds),
        (REBALANCE, Unit::Seconds),
        (DRAIN, Unit::Seconds),
        (COMMIT_FAILURES, Unit::Count),
        (COMMITS_FENCED, Unit::Count),
        (PARTITIONS_OWNED, Unit::Count),
        (PARTITION_OWNED, Unit::Count),
        (COMMITTED_OFFSET, Unit::Count),
        (PARTITION_LAG, Unit::Count),
    ] {
        let described = recorder.description(name);
        assert_eq!(
            described.as_ref().map(|(u, _)| *u),
            Some(Some(unit)),
            "{name} described"
        );
    }
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_shows_as_the_committed_offset() {
    let _turn = crate::turns::shared().await;
    let recorder = recorder();
    let stores = Memory::new();
    let group = common::group("telemetry-commit");
    let mut monitor = Monitor::new();
    // The common config commits every 200 ms.
    let member: GroupMember = common::join(&stores, &monitor, &group, "m1", 4).await;
    monitor
        .until(Duration::from_secs(20), "m1 owns 4", |v| {
            common::settled(v, &["m1"], 4)
        })
        .await;
    let (partition, token) = monitor.views["m1"]
        .owned
        .iter()
        .next()
        .map(|(p, t)| (p.clone(), *t))
        .expect("m1 owns a partition");
    member.processed(partition.clone(), token, 41);
    let number = partition.partition.to_string();
    let labels = [
        ("group", group.as_str()),
        ("member", "m1"),
        ("topic", TOPIC),
        ("partition", number.as_str()),
    ];
    eventually("the committed offset gauge", || {
        match recorder.gauges(COMMITTED_OFFSET, &labels).as_slice() {
            [(_, value)] if *value == 42.0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(stores.0.committed(&group, &partition), Some(42));
    // Only the partition committed has a committed offset; without Kafka
    // there is no log end, so no lag.
    assert_eq!(
        recorder
            .gauges(COMMITTED_OFFSET, &[("group", group.as_str())])
            .len(),
        1
    );
    assert!(recorder
        .gauges(PARTITION_LAG, &[("group", group.as_str())])
        .is_empty());
    assert_eq!(
        recorder.counter_sum(COMMIT_FAILURES, &[("group", group.as_str())]),
        0
    );
    let _ = member.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_counts_its_handoffs_and_the_others_rebalance() {
    let _turn = crate::turns::shared().await;
    let recorder = recorder();
    let stores = Memory::new();
    let (group, mut monitor, mut members) = common::three_settled(&stores, "telemetry-close").await;
    let theirs: BTreeSet<TopicPartition> = monitor.views["m3"].owned.keys().cloned().collect();
    assert_eq!(theirs.len(), 4);
    eventually("m3's gauges to match its view", || {
        let gauges = owned_by_gauge(recorder, &group, "m3");
        (gauges == theirs)
            .then_some(())
            .ok_or(format!("{gauges:?}"))
    })
    .await;
    let handoffs_before = recorder.counter_sum(HANDOFFS, &of(&group, "m3"));
    let drains_before = recorder.samples(DRAIN, &of(&group, "m3")).len();
    let claims_before = recorder.counter_sum(CLAIMS, &[("group", group.as_str())]);
    let rebalances_before: Vec<usize> = ["m1", "m2"]
        .iter()
        .map(|m| recorder.samples(REBALANCE, &of(&group, m)).len())
        .collect();

    let leaving = members.pop().expect("three members");
    let _ = leaving.close().await.expect("close");

    // The member's task published its last state before it finished
    // closing.
    assert_eq!(
        recorder.counter_sum(HANDOFFS, &of(&group, "m3")),
        handoffs_before + 4,
        "m3 handed over its 4 partitions"
    );
    assert_eq!(
        recorder.samples(DRAIN, &of(&group, "m3")).len(),
        drains_before + 4,
        "a drain per partition"
    );
    assert!(owned_by_gauge(recorder, &group, "m3").is_empty());
    for (labels, value) in recorder.gauges(PARTITION_OWNED, &of(&group, "m3")) {
        let number: u32 = labels["partition"].parse().expect("a partition number");
        if theirs.contains(&TopicPartition::new(TOPIC, number)) {
            assert_eq!(value, 0.0, "{labels:?} after the close");
        }
    }
    assert_eq!(recorder.gauge_sum(PARTITIONS_OWNED, &of(&group, "m3")), 0.0);

    monitor
        .until(Duration::from_secs(20), "2 members own all 12", |v| {
            common::settled(v, &["m1", "m2"], 12)
        })
        .await;
    eventually("the survivors' gauges and rebalances", || {
        gauges_match_views(recorder, &group, &monitor, &["m1", "m2"], 12)?;
        for (member, before) in ["m1", "m2"].iter().zip(&rebalances_before) {
            let now = recorder.samples(REBALANCE, &of(&group, member)).len();
            if now <= *before {
                return Err(format!("{member} has {now} rebalance samples"));
            }
        }
        Ok(())
    })
    .await;
    // m3's 4 partitions were claimed again; the sticky strategy may move
    // one more between the survivors, a handoff and a claim of its own.
    let group_only = [("group", group.as_str())];
    let claims = recorder.counter_sum(CLAIMS, &group_only);
    let handoffs = recorder.counter_sum(HANDOFFS, &group_only);
    assert!(
        claims >= claims_before + 4,
        "{claims} claims after {claims_before}"
    );
    assert_eq!(
        claims - handoffs,
        12,
        "{claims} claims, {handoffs} handoffs"
    );
    for member in members {
        let _ = member.close().await.expect("close");
    }
}
