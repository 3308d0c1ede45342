//! `tenure serve` across real restarts of Kafka and ZooKeeper
//! (`scripts/services restart`, which keeps their data): each outage is
//! reported as ERROR while it lasts — Kafka's in `kafka_error`, the
//! store's in `store_error` and `/healthz` — and the group is OK again
//! after it. Its test takes its turn alone (`crate::turns`), since it
//! restarts the servers the other tests use.

use tenure_tests as common;

use std::process::Command;

use common::kafka;
use common::serve::{group_of, Consumer, Serve};
use tenure::admin::health::Status;
use tenure::admin::overview::Overview;

/// Restarts `service` with the workspace's script while `during` is
/// awaited; the restart must succeed.
async fn restart_while<T>(service: &str, during: impl std::future::Future<Output = T>) -> T {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let service = service.to_owned();
    let restart = tokio::task::spawn_blocking(move || {
        Command::new(script)
            .args(["restart", &service])
            .stdout(std::process::Stdio::null())
            .status()
    });
    let seen = during.await;
    let status = restart
        .await
        .expect("the restart's thread")
        .expect("run scripts/services");
    assert!(status.success(), "scripts/services restart failed");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_of_kafka_and_zookeeper_are_errors_and_pass() {
    let _turn = crate::turns::alone().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("serve-restart").await;
    let connect = zookeeper.connect_string().to_owned();
    let client = kafka::client().await;
    let name = "serve-restart";
    let topic = kafka::topic(name);
    kafka::create_topic_with_messages(&client, &topic, 2, 5).await;
    let group = common::group(name);
    let member = Consumer::join(
        Box::new(tenure::zookeeper::ZooKeeperBackend::new(connect.clone())),
        &group,
        "a",
        &topic,
    )
    .await;
    let store = vec!["--zookeeper".to_owned(), connect.clone()];
    let serve = Serve::start(
        env!("CARGO_BIN_EXE_tenure-under-test"),
        &store,
        &kafka::bootstrap(),
        &[],
    );
    let ok = |o: &Overview| {
        o.store_error.is_none()
            && o.kafka_error.is_none()
            && group_of(o, &group).is_some_and(|g| g.status == Status::Ok && g.total_lag == Some(0))
    };
    serve.until("the group OK", ok).await;

    let seen = restart_while(
        "kafka",
        serve.until("Kafka's restart an ERROR", |o| {
            o.kafka_error.is_some()
                && group_of(o, &group).is_some_and(|g| g.status == Status::Error)
        }),
    )
    .await;
    assert!(seen.store_error.is_none(), "{seen:?}");
    serve.until("OK after Kafka's restart", ok).await;

    let seen = restart_while(
        "zookeeper",
        serve.until("ZooKeeper's restart an ERROR", |o| {
            o.store_error.is_some()
                && group_of(o, &group).is_some_and(|g| g.status == Status::Error)
        }),
    )
    .await;
    assert!(
        seen.store_error
            .as_deref()
            .is_some_and(|e| e.contains("ZooKeeper")),
        "the store is named: {seen:?}"
    );
    serve.until("OK after ZooKeeper's restart", ok).await;
    assert_eq!(serve.get("/healthz").await.0, 200);
    member.handle.kill();
}
