//! A broker outage, on a real Kafka 4.x reached through a real proxy that
//! the test cuts (the broker's second listener advertises the proxy, so the
//! member's metadata and fetches all cross it; the other tests, on the
//! broker's first listener, go on), with a real ZooKeeper.

use tenure_tests as common;
use tenure_tests::recorder;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::tokio::{
    AssignmentEvent, GroupMember, KafkaConfig, Messages, Problem, ERRORS_CAPACITY,
};

const PARTITIONS: u32 = 4;
const WITHIN: Duration = Duration::from_secs(30);

/// Takes messages, acknowledging each, until every partition has handed
/// out one at `offset` or later.
async fn consume_every_partition_from(messages: &mut Messages, offset: i64) {
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + WITHIN;
    while seen.len() < PARTITIONS as usize {
        let message = tokio::time::timeout_at(deadline, messages.next())
            .await
            .unwrap_or_else(|_| {
                panic!("partitions {seen:?} of {PARTITIONS} consumed within {WITHIN:?}")
            })
            .expect("the member is open");
        message.ack();
        if message.offset() >= offset {
            seen.insert(message.partition());
        }
    }
}

/// An application that reads neither its problems nor its assignment
/// changes through a broker outage: what waits for it stays within the
/// documented bounds (problems beyond [`ERRORS_CAPACITY`] are dropped and
/// counted, and the count arrives), the outage revokes nothing, and
/// consumption goes on once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_costs_an_application_that_reads_nothing_bounded_memory() {
    let _turn = crate::turns::shared().await;
    let metrics = recorder::installed();
    let client = kafka::client().await;
    let topic = kafka::topic("outage");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    for partition in 0..PARTITIONS {
        kafka::produce(&client, &topic, partition, 10).await;
    }
    let proxy = kafka::cuttable().await;
    let stores = ZooKeeper::new("outage").await;
    let group = common::group("outage");
    let mut kafka_config = KafkaConfig::new(&proxy.address.to_string());
    // Problems come fast while the broker is away: a metadata refresh that
    // times out is one.
    kafka_config.metadata_refresh = Duration::from_millis(50);
    kafka_config.connect_timeout = Duration::from_millis(100);
    let member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(kafka_config)
        .join(stores.backend())
        .await
        .expect("join through the proxy");
    let (member, streams) = member.split();
    let (mut events, mut errors) = (streams.events, streams.errors);
    let mut messages = streams.messages.expect("a member with Kafka");
    consume_every_partition_from(&mut messages, 0).await;

    proxy.down();
    // Until the member has reported more than the error stream holds (it
    // has no notification to wait on: the counter is asked again, bounded).
    let beyond = ERRORS_CAPACITY as u64 + 16;
    let mine = [("group", group.as_str()), ("member", "m1")];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let reported = metrics.counter_sum("tenure_problems_total", &mine);
        if reported >= beyond {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {reported} problems reported in 120 s of outage"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let dropped = metrics.counter_sum("tenure_problems_dropped_total", &mine);
    assert!(
        dropped >= 16,
        "{dropped} problems dropped of {beyond} and more, where the stream holds {ERRORS_CAPACITY}"
    );

    // The broker is back: consumption goes on where it stood.
    proxy.up();
    for partition in 0..PARTITIONS {
        kafka::produce(&client, &topic, partition, 1).await;
    }
    consume_every_partition_from(&mut messages, 10).await;

    // What waited for the application: at most what the stream holds, and
    // then the count of what it could not hold.
    let mut waiting = 0;
    let dropped_told = loop {
        let problem = tokio::time::timeout(WITHIN, errors.next())
            .await
            .expect("the count of dropped problems")
            .expect("the member is open");
        match problem {
            Problem::Dropped { count } => break count,
            _ => waiting += 1,
        }
    };
    assert!(
        waiting <= ERRORS_CAPACITY,
        "{waiting} problems waited, more than the {ERRORS_CAPACITY} the stream holds"
    );
    assert!(
        dropped_told >= 1,
        "a count of dropped problems is at least one"
    );
    // Every problem dropped is counted in what the application is told (no
    // drop can follow: the stream has had room since it was first read).
    let dropped = metrics.counter_sum("tenure_problems_dropped_total", &mine);
    assert_eq!(dropped_told, dropped, "the count told is the count dropped");
    eprintln!(
        "outage: {} problems reported, {dropped} dropped; {waiting} waited, then Dropped {{ count: {dropped_told} }}",
        metrics.counter_sum("tenure_problems_total", &mine),
    );
    // The outage revoked nothing: the changes that waited are the
    // assignment, one per partition.
    let mut told = Vec::new();
    while let Some(event) = events.try_next() {
        told.push(event);
    }
    assert_eq!(told.len(), PARTITIONS as usize, "{told:?}");
    assert!(
        told.iter()
            .all(|e| matches!(e, AssignmentEvent::Assigned { .. })),
        "{told:?}"
    );
    let _ = member.close().await.expect("close");
}
