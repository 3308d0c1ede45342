//! The two races of the original system, reproduced against a real
//! ZooKeeper and a real etcd (the core's simulation replays them step by
//! step; here the real server decides the interleaving, widened by the
//! backends' test hooks). Each test runs in its own chroot or key prefix.
//! On etcd a claim is one transaction, so the NodeExists → NoNode race
//! cannot happen at all; the scenario still has to converge there.

use tenure_tests as common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Monitor, SESSION, TOPIC};
use tenure::core::assignment::Range;
use tenure::core::{Config, Error};
use tenure::tokio::{Backend, GroupMember, Problem};
use tenure::zookeeper::{Hooks, ZooKeeperBackend};

async fn chroot(test: &str) -> String {
    common::zookeeper::ZooKeeper::new(test)
        .await
        .connect_string()
        .to_owned()
}

fn config(member: &str, processing: Duration) -> Config {
    let mut config = Config::new("race", member, [TOPIC])
        .expect("valid config")
        .with_session_timeout(SESSION)
        .with_processing_timeout(processing);
    // The legacy strategy: 2 partitions over [a, b] move partition 1 to b.
    config = config.with_strategy(Arc::new(Range));
    config = config.with_commit_interval(Duration::from_millis(200));
    config
}

async fn join(
    backend: Box<dyn Backend>,
    monitor: &Monitor,
    member: &str,
    processing: Duration,
    auto_drain: bool,
) -> GroupMember {
    GroupMember::builder(config(member, processing))
        .partitions([(TOPIC.to_owned(), 2)].into())
        .auto_drain(auto_drain)
        .view_log(monitor.log())
        .join(backend)
        .await
        .unwrap_or_else(|e| panic!("{member} cannot join: {e}"))
}

fn zookeeper(connect: &str, hooks: Hooks) -> Box<dyn Backend> {
    Box::new(ZooKeeperBackend::new(connect).hooks(hooks))
}

fn etcd(prefix: &str, slow_claim: Duration) -> Box<dyn Backend> {
    let endpoint = std::env::var("TENURE_ETCD").unwrap_or_else(|_| {
        panic!("TENURE_ETCD is not set: start etcd with `eval \"$(scripts/services start)\"`, or run scripts/test")
    });
    let hooks = tenure::etcd::Hooks {
        delay_owner_read: slow_claim,
        ..tenure::etcd::Hooks::default()
    };
    Box::new(
        tenure::etcd::EtcdBackend::new(endpoint)
            .prefix(prefix)
            .hooks(hooks),
    )
}

fn prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("/tenure-race-{test}-{nanos}")
}

fn owns(
    views: &std::collections::BTreeMap<String, tenure::tokio::View>,
    member: &str,
    partitions: &[u32],
) -> bool {
    views.get(member).is_some_and(|v| {
        v.settled
            && v.fetching.len() == partitions.len()
            && partitions
                .iter()
                .all(|p| v.fetching.contains(&common::tp(*p)))
    })
}

/// The backends of one scenario: `a`'s, then `b`'s (whose claim is slow).
type Pair = (Box<dyn Backend>, Box<dyn Backend>);

/// NodeExists, then the owner releases, then the claimant's read of the
/// owner finds nothing (NoNode): the claim goes on and succeeds.
async fn owner_vanishing(backends: Pair) {
    let (for_a, for_b) = backends;
    let mut monitor = Monitor::new();
    let a = join(for_a, &monitor, "a", Duration::from_secs(2), true).await;
    monitor
        .until(Duration::from_secs(10), "a owns both", |v| {
            owns(v, "a", &[0, 1])
        })
        .await;
    let b = join(for_b, &monitor, "b", Duration::from_secs(2), true).await;
    monitor
        .until(Duration::from_secs(10), "b owns partition 1", |v| {
            owns(v, "a", &[0]) && owns(v, "b", &[1])
        })
        .await;
    monitor.assert_no_overlap();
    let _ = a.close().await.expect("close a");
    let _ = b.close().await.expect("close b");
}

/// The old owner's application never drains: the release waits out the
/// whole processing timeout, and the claimant — which never gives up —
/// takes the partition right after.
async fn release_after_the_processing_timeout(backends: Pair) {
    let (for_a, for_b) = backends;
    let processing = Duration::from_secs(3);
    let mut monitor = Monitor::new();
    let mut a = join(for_a, &monitor, "a", processing, false).await;
    monitor
        .until(Duration::from_secs(10), "a owns both", |v| {
            owns(v, "a", &[0, 1])
        })
        .await;
    let joined = tokio::time::Instant::now();
    let b = join(for_b, &monitor, "b", processing, true).await;
    monitor
        .until(
            processing + Duration::from_secs(5),
            "b owns partition 1",
            |v| owns(v, "b", &[1]),
        )
        .await;
    let took = joined.elapsed();
    assert!(
        took >= processing,
        "b took partition 1 after {took:?}, before a's drain could time out"
    );
    let mut timed_out = false;
    while let Some(error) = a.try_next_error() {
        timed_out |= matches!(error, Problem::Coordination(Error::DrainTimeout { .. }));
    }
    assert!(timed_out, "a reports the drain that timed out");
    monitor.assert_no_overlap();
    let _ = b.close().await.expect("close b");
    a.kill();
}

// b's follow-up read of the owner waits long enough for a to release in
// between.
const SLOW_READ: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_vanishing_between_create_and_read_still_converges_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let connect = chroot("vanishes").await;
    let slow = Hooks {
        delay_owner_read: SLOW_READ,
        ..Hooks::default()
    };
    owner_vanishing((
        zookeeper(&connect, Hooks::default()),
        zookeeper(&connect, slow),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_vanishing_between_create_and_read_still_converges_on_etcd() {
    let _turn = crate::turns::shared().await;
    let prefix = prefix("vanishes");
    owner_vanishing((etcd(&prefix, Duration::ZERO), etcd(&prefix, SLOW_READ))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_full_processing_timeout_still_hands_over_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let connect = chroot("timeout").await;
    release_after_the_processing_timeout((
        zookeeper(&connect, Hooks::default()),
        zookeeper(&connect, Hooks::default()),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_full_processing_timeout_still_hands_over_on_etcd() {
    let _turn = crate::turns::shared().await;
    let prefix = prefix("timeout");
    release_after_the_processing_timeout((
        etcd(&prefix, Duration::ZERO),
        etcd(&prefix, Duration::ZERO),
    ))
    .await;
}
