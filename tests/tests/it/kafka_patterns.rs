//! Subscriptions over the cluster's topics, on a real Kafka 4.x and a real
//! ZooKeeper: a pattern takes topics as they are created and lets go of
//! them as they are deleted while the others keep flowing; a named topic
//! that does not exist yet is waited for; members that disagree on a
//! pattern say so.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::core::{Error, Subscription};
use tenure::tokio::{AssignmentEvent, GroupMember, KafkaConfig, KafkaError, Messages, Problem};

/// How long anything here may take: a few metadata refreshes and a claim.
const WITHIN: Duration = Duration::from_secs(30);

fn kafka_config() -> KafkaConfig {
    let mut config = KafkaConfig::new(&kafka::bootstrap());
    config.metadata_refresh = Duration::from_millis(300);
    config
}

async fn join(
    stores: &ZooKeeper,
    group: &str,
    member: &str,
    subscription: Subscription,
) -> GroupMember {
    let mut config = common::config_for(group, member, "unused");
    config = config.with_subscription(subscription);
    GroupMember::builder(config)
        .kafka(kafka_config())
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("{member} cannot join: {e}"))
}

/// Takes messages, acknowledging each, until one of `topic` arrives.
async fn consume_until(messages: &mut Messages, topic: &str) {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let message = tokio::time::timeout_at(deadline, messages.next())
            .await
            .unwrap_or_else(|_| panic!("no message of {topic} within {WITHIN:?}"))
            .expect("the member is open");
        message.ack();
        if *message.topic() == *topic {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_takes_topics_as_they_are_created_and_lets_deleted_ones_go() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let prefix = kafka::topic("pattern");
    let (first, second) = (format!("{prefix}-a"), format!("{prefix}-b"));
    // Matches no whole name of the pattern below: not taken.
    let beside = format!("{prefix}_c");
    kafka::create_topic(&client, &first, 2).await;
    kafka::create_topic(&client, &beside, 1).await;
    kafka::produce(&client, &first, 0, 5).await;
    kafka::produce(&client, &beside, 0, 5).await;
    let stores = ZooKeeper::new("pattern").await;
    let group = common::group("pattern");
    let pattern = Subscription::matching(&format!("{prefix}-.*")).expect("a pattern");
    let (member, streams) = join(&stores, &group, "m1", pattern).await.split();
    let (mut events, mut errors) = (streams.events, streams.errors);
    let mut messages = streams.messages.expect("a member with Kafka");

    consume_until(&mut messages, &first).await;
    // It has registered (it consumes), and its registration says so, in Kafka 0.8's form.
    let path = format!("/consumers/{group}/ids/m1");
    let (data, _) = stores
        .raw()
        .get_data(&path)
        .await
        .expect("the registration");
    let record: serde_json::Value = serde_json::from_slice(&data).expect("JSON");
    assert_eq!(record["pattern"], "white_list", "{record}");
    assert_eq!(
        record["subscription"],
        serde_json::json!({ format!("{prefix}-.*"): 1 })
    );

    // A topic created after the join is taken at a metadata refresh.
    kafka::create_topic(&client, &second, 1).await;
    kafka::produce(&client, &second, 0, 5).await;
    consume_until(&mut messages, &second).await;
    let assigned: BTreeSet<String> = member
        .view()
        .assigned
        .iter()
        .map(|p| p.topic.to_string())
        .collect();
    assert_eq!(assigned, BTreeSet::from([first.clone(), second.clone()]));

    // The first topic is deleted: its partitions are let go of, said so...
    client
        .controller_client()
        .expect("controller client")
        .delete_topic(&first, 10_000)
        .await
        .unwrap_or_else(|e| panic!("delete topic {first}: {e}"));
    let mut revoked = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WITHIN;
    while revoked.len() < 2 {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| {
                panic!("{first}'s partitions not revoked within {WITHIN:?}: {revoked:?}")
            })
            .expect("the member is open");
        if let AssignmentEvent::Revoked { partition, .. } = event {
            assert_eq!(*partition.topic, *first, "only the deleted topic leaves");
            revoked.insert(partition.partition);
        }
    }
    // ...and the other topic keeps flowing.
    kafka::produce(&client, &second, 0, 5).await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    let mut taken = 0;
    while taken < 5 {
        let message = tokio::time::timeout_at(deadline, messages.next())
            .await
            .expect("the other topic's messages after the delete")
            .expect("the member is open");
        message.ack();
        if *message.topic() == *second && message.offset() >= 5 {
            taken += 1;
        }
    }

    // A member that subscribes otherwise is reported, naming it.
    let other = join(
        &stores,
        &group,
        "m2",
        Subscription::matching(&second).expect("a pattern"),
    )
    .await;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let problem = tokio::time::timeout_at(deadline, errors.next())
            .await
            .expect("the mismatch reported")
            .expect("the member is open");
        if let Problem::Coordination(Error::SubscriptionMismatch { member: named, .. }) = &problem {
            assert_eq!(named.as_str(), "m2");
            assert!(!problem.is_transient());
            break;
        }
    }
    let _ = other.close().await.expect("close m2");
    let _ = member.close().await.expect("close m1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_topic_that_does_not_exist_yet_is_waited_for() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("later");
    let stores = ZooKeeper::new("later").await;
    let group = common::group("later");
    let member = join(
        &stores,
        &group,
        "m1",
        Subscription::topics([&topic]).expect("a topic"),
    )
    .await;
    let (member, streams) = member.split();
    let mut errors = streams.errors;
    let mut messages = streams.messages.expect("a member with Kafka");
    let problem = tokio::time::timeout(WITHIN, errors.next())
        .await
        .expect("the missing topic reported")
        .expect("the member is open");
    match &problem {
        Problem::Kafka(KafkaError::UnknownTopic { topic: named, .. }) => assert_eq!(*named, topic),
        other => panic!("expected the missing topic, got {other}"),
    }
    assert!(problem.is_transient(), "it is waited for");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 5).await;
    consume_until(&mut messages, &topic).await;
    let _ = member.close().await.expect("close");
}
