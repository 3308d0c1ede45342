//! A group on a ZooKeeper that speaks only TLS and asks for client
//! certificates — as `scripts/services` starts it beside the plaintext one
//! — consuming a real Kafka; and the refusals a misconfigured member or tool
//! gets, each saying what to fix, none of them a hang.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use tenure::admin::{self, AdminError};
use tenure::tokio::{BackendError, GroupMember, JoinError, KafkaConfig};
use tenure::zookeeper::{Digest, ZooKeeperAdmin, ZooKeeperBackend, ZooKeeperSecurity};

const MESSAGES: usize = 40;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the TLS ZooKeeper of scripts/services; start it \
             with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

/// TLS trusting `ca`, presenting the client certificate the server's CA
/// signed.
fn tls(ca: &str) -> ZooKeeperSecurity {
    ZooKeeperSecurity::new()
        .ca_file(ca)
        .expect("the CA file")
        .client_identity_files(
            var("TENURE_ZOOKEEPER_TLS_CERT"),
            var("TENURE_ZOOKEEPER_TLS_KEY"),
        )
        .expect("the client certificate")
}

fn accepted() -> ZooKeeperSecurity {
    tls(&var("TENURE_ZOOKEEPER_TLS_CA"))
        .digest(Digest::new("billing", "s3cret").expect("valid credentials"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consumes_through_a_zookeeper_over_tls() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("zk-tls");
    kafka::create_topic(&client, &topic, 2).await;
    for partition in 0..2 {
        kafka::produce(&client, &topic, partition, MESSAGES / 2).await;
    }
    let group = common::group("zk-tls");
    let join = |member: &'static str| {
        GroupMember::builder(common::config_for(&group, member, &topic))
            .kafka(KafkaConfig::new(&kafka::bootstrap()))
            .join(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER_TLS")).security(accepted()))
    };
    let mut a = join("a").await.expect("a joins");
    let mut b = join("b").await.expect("b joins");
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < MESSAGES {
        let message = tokio::select! {
            Some(message) = a.next_message() => message,
            Some(message) = b.next_message() => message,
            () = tokio::time::sleep_until(deadline) => panic!("consumed {} of {MESSAGES} in 30 s", seen.len()),
        };
        assert!(
            seen.insert((message.partition(), message.offset())),
            "handed out twice"
        );
        message.ack();
    }

    // The admin side reaches it with the same settings.
    let admin = ZooKeeperAdmin::connect_with(
        &var("TENURE_ZOOKEEPER_TLS"),
        accepted(),
        Duration::from_secs(10),
    )
    .await
    .expect("an admin session");
    let described = admin::describe(&admin, &group, None)
        .await
        .expect("described");
    let members: Vec<&str> = described.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(members, ["a", "b"]);
    let _ = a.close().await.expect("close a");
    let _ = b.close().await.expect("close b");
}

/// Joins with `security` and expects a refusal whose detail says `says`,
/// within the connect timeout and the handshake that finds out why.
async fn refused(security: ZooKeeperSecurity, says: &str) {
    let group = common::group("zk-tls-refused");
    let started = tokio::time::Instant::now();
    let joined = GroupMember::builder(common::config_for(&group, "m1", common::TOPIC))
        .partitions([(common::TOPIC.to_owned(), 2)].into_iter().collect())
        .join(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER_TLS")).security(security))
        .await;
    match joined {
        Err(JoinError::Backend(BackendError::Denied { detail, .. })) => {
            assert!(detail.contains(says), "{detail}");
        }
        Err(other) => panic!("expected Denied naming {says:?}, got {other}"),
        Ok(_) => panic!("joined although it should be refused ({says})"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "refused only after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_and_a_missing_client_certificate_are_refused_saying_what_to_fix() {
    let _turn = crate::turns::shared().await;
    refused(
        tls(&var("TENURE_ZOOKEEPER_TLS_OTHER_CA")),
        "ZooKeeperSecurity::ca_file",
    )
    .await;
    let without_certificate = ZooKeeperSecurity::new()
        .ca_file(var("TENURE_ZOOKEEPER_TLS_CA"))
        .expect("the CA file");
    refused(
        without_certificate.clone(),
        "ZooKeeperSecurity::client_identity_files",
    )
    .await;

    // The tool, likewise.
    match ZooKeeperAdmin::connect_with(
        &var("TENURE_ZOOKEEPER_TLS"),
        without_certificate,
        Duration::from_secs(5),
    )
    .await
    {
        Err(AdminError::Denied { detail, .. }) => {
            assert!(detail.contains("client_identity_files"), "{detail}")
        }
        other => panic!("expected Denied, got {other:?}"),
    }
}

#[test]
fn tls_settings_that_cannot_work_are_said_before_connecting() {
    let _turn = crate::turns::shared_blocking();
    // A client certificate without the CA to check the server with.
    let no_ca = ZooKeeperSecurity::new()
        .client_identity_files(
            var("TENURE_ZOOKEEPER_TLS_CERT"),
            var("TENURE_ZOOKEEPER_TLS_KEY"),
        )
        .expect("the client certificate");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let joined = runtime.block_on(
        GroupMember::builder(common::config_for("g", "m1", common::TOPIC))
            .join(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER_TLS")).security(no_ca)),
    );
    match joined {
        Err(JoinError::Backend(BackendError::Config(detail))) => {
            assert!(detail.contains("ca_file"), "{detail}")
        }
        other => panic!("expected Config, got {:?}", other.err()),
    }
    // Files that are not what they are said to be.
    let key_as_ca = ZooKeeperSecurity::new().ca_file(var("TENURE_ZOOKEEPER_TLS_KEY"));
    assert!(
        matches!(
            key_as_ca,
            Err(BackendError::Config(_) | BackendError::InvalidSetting { .. })
        ),
        "{key_as_ca:?}"
    );
    let missing = ZooKeeperSecurity::new().ca_file("/nonexistent/ca.pem");
    match missing {
        Err(BackendError::InvalidSetting { what, source }) => {
            assert!(what.contains("/nonexistent/ca.pem"), "{what}");
            // The reader's own error is kept as the cause.
            let io = source.get_ref().downcast_ref::<std::io::Error>();
            assert_eq!(
                io.map(std::io::Error::kind),
                Some(std::io::ErrorKind::NotFound)
            );
        }
        other => panic!("expected InvalidSetting, got {other:?}"),
    }
}
