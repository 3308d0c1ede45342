//! A group on a real ZooKeeper whose members authenticate with the digest
//! scheme, consuming a real Kafka: its znodes are under an ACL that keeps
//! other identities out, wrong credentials are refused at the join with an
//! error that says what to fix, and the admin side needs the credentials
//! too.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use tenure::admin::{self, AdminError};
use tenure::tokio::{BackendError, GroupMember, JoinError, KafkaConfig};
use tenure::zookeeper::{Digest, ZooKeeperAdmin, ZooKeeperBackend, ZooKeeperSecurity};
use zookeeper_client as zk;

const MESSAGES: usize = 40;

fn digest(user: &str, password: &str) -> Digest {
    Digest::new(user, password).expect("valid credentials")
}

async fn join(
    zookeeper: &ZooKeeper,
    group: &str,
    member: &str,
    topic: &str,
    as_who: Digest,
) -> Result<GroupMember, JoinError> {
    GroupMember::builder(common::config_for(group, member, topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(
            ZooKeeperBackend::new(zookeeper.connect_string())
                .security(ZooKeeperSecurity::new().digest(as_who)),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_digest_credentials_keeps_other_identities_out() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("digest");
    kafka::create_topic(&client, &topic, 2).await;
    for partition in 0..2 {
        kafka::produce(&client, &topic, partition, MESSAGES / 2).await;
    }
    let zookeeper = ZooKeeper::new("digest").await;
    let group = common::group("digest");

    // Two members share the credentials and the topic between them.
    let mut a = join(&zookeeper, &group, "a", &topic, digest("billing", "s3cret"))
        .await
        .expect("a joins");
    let mut b = join(&zookeeper, &group, "b", &topic, digest("billing", "s3cret"))
        .await
        .expect("b joins");
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < MESSAGES {
        let message = tokio::select! {
            Some(message) = a.next_message() => message,
            Some(message) = b.next_message() => message,
            () = tokio::time::sleep_until(deadline) => panic!("consumed {} of {MESSAGES} in 30 s", seen.len()),
        };
        seen.insert((message.partition(), message.offset()));
        message.ack();
    }
    // Both partitions' offsets are written (under the group's ACL too).
    let _ = a.commit().await.expect("a commits");
    let _ = b.commit().await.expect("b commits");

    // A client without the credentials can neither change nor read them.
    let raw = zookeeper.raw();
    let layout = tenure::core::records::Layout::new("", &group);
    let registration = layout.member(&tenure::core::MemberId::new("a").expect("an id"));
    assert!(matches!(
        raw.set_data(&registration, b"{}", None).await,
        Err(zk::Error::NoAuth)
    ));
    assert!(matches!(
        raw.delete(&registration, None).await,
        Err(zk::Error::NoAuth)
    ));
    assert!(matches!(
        raw.get_data(&registration).await,
        Err(zk::Error::NoAuth)
    ));
    let intruder = format!("{}/intruder", layout.ids());
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    assert!(matches!(
        raw.create(&intruder, b"{}", &ephemeral).await,
        Err(zk::Error::NoAuth)
    ));
    let offset = layout.offset(&tenure::core::TopicPartition::new(&topic, 0));
    assert!(matches!(
        raw.set_data(&offset, b"0", None).await,
        Err(zk::Error::NoAuth)
    ));

    // Other credentials are refused at the join, saying what to fix, at once.
    let started = tokio::time::Instant::now();
    match join(&zookeeper, &group, "c", &topic, digest("billing", "wrong")).await {
        Err(JoinError::Backend(BackendError::Denied { detail, .. })) => {
            assert!(detail.contains("digest"), "{detail}");
        }
        Err(other) => panic!("expected Denied, got {other}"),
        Ok(_) => panic!("joined with the wrong credentials"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // The admin side: without the credentials, refused with the same advice;
    // with them, the group is described.
    let plain = ZooKeeperAdmin::connect(zookeeper.connect_string(), Duration::from_secs(10))
        .await
        .expect("an admin session");
    match admin::describe(&plain, &group, None).await {
        Err(AdminError::Denied { .. }) => {}
        other => panic!("expected Denied, got {other:?}"),
    }
    let authed = ZooKeeperAdmin::connect_with(
        zookeeper.connect_string(),
        ZooKeeperSecurity::new().digest(digest("billing", "s3cret")),
        Duration::from_secs(10),
    )
    .await
    .expect("an admin session");
    let described = admin::describe(&authed, &group, None)
        .await
        .expect("described");
    let members: Vec<&str> = described.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(members, ["a", "b"]);

    let _ = a.close().await.expect("close a");
    let _ = b.close().await.expect("close b");
}

#[test]
fn a_digest_user_is_checked() {
    let _turn = crate::turns::shared_blocking();
    assert!(matches!(Digest::new("", "p"), Err(BackendError::Config(_))));
    assert!(matches!(
        Digest::new("a:b", "p"),
        Err(BackendError::Config(_))
    ));
    let shown = format!("{:?}", digest("billing", "s3cret"));
    assert!(!shown.contains("s3cret"), "{shown}");
}
