//! The store restarted under a running group: the members see the
//! connection drop, stop consuming in time, then resume or register again,
//! and converge with every partition owned. In a test binary of its own,
//! since it restarts the servers the other tests use.

use tenure_tests as common;

use std::process::Command;
use std::time::Duration;

use common::Stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_after_zookeeper_restarts() {
    let stores = common::zookeeper::ZooKeeper::new("restart").await;
    // ZooKeeper takes a few seconds to come back (a JVM starting): when
    // that is longer than a session, every member must have stopped
    // meanwhile.
    converge_after_restart(&stores, "zookeeper", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_after_etcd_restarts() {
    let stores = common::etcd::Etcd::new("restart").await;
    // etcd may be back within the lease, so a pause is allowed, not required.
    converge_after_restart(&stores, "etcd", false).await;
}

async fn converge_after_restart(stores: &dyn Stores, service: &str, must_pause: bool) {
    let (group, mut monitor, members) = common::three_settled(stores, "restart").await;

    // The workspace's scripts, one level above this crate.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let restarting = std::time::Instant::now();
    let status = Command::new(script)
        .args(["restart", service])
        .status()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        status.success(),
        "scripts/services restart {service} failed"
    );

    // The server was away at most this long; a member's lease ends a
    // session after its last answer at the latest.
    let away = restarting.elapsed();
    let must_pause = must_pause && away > common::SESSION;
    let before: Vec<usize> = (0..12).map(|p| monitor.starts(&common::tp(p))).collect();
    monitor
        .until(Duration::from_secs(30), "all members converge again", |v| {
            common::settled(v, &["m1", "m2", "m3"], 12)
        })
        .await;
    // The server was away longer than a session's lease: every partition
    // was stopped and started again (resumed or claimed anew).
    for p in 0..12 {
        assert!(
            !must_pause || monitor.starts(&common::tp(p)) > before[p as usize],
            "partition {p} was never stopped while the server was down for {away:?}"
        );
    }
    monitor.assert_no_overlap();
    common::store_agrees(stores, &group, &monitor).await;
    for member in members {
        member.close().await.expect("close");
    }
}
