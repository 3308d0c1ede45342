//! Partitions take turns on the member's one message stream, on a real
//! Kafka 4.x and a real ZooKeeper: a partition with a backlog does not keep
//! another partition's messages waiting behind it.

use tenure_tests as common;

use std::time::{Duration, Instant};

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::tokio::{GroupMember, KafkaConfig};

const IN_A_ROW: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlogged_partition_takes_turns_with_the_others() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("fairness");
    kafka::create_topic(&client, &topic, 2).await;
    // Partition 0 far behind; partition 1's fewer messages fit one fetch.
    let (backlog, few) = (40_000usize, 3_000usize);
    kafka::produce(&client, &topic, 0, backlog).await;

    let stores = ZooKeeper::new("fairness").await;
    let group = common::group("fairness");
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.max_messages_in_a_row = IN_A_ROW;
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(kafka_config)
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("m1 cannot join: {e}"));

    // The application spends 20 µs on each message, so that the backlog
    // takes about a second.
    let mut order = Vec::with_capacity(backlog + few);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut next = [0i64, 0];
    while order.len() < backlog + few {
        let message = tokio::time::timeout_at(deadline, member.next_message())
            .await
            .unwrap_or_else(|_| panic!("{} of {} messages within 60 s", order.len(), backlog + few))
            .expect("the member is open");
        let p = message.partition() as usize;
        assert_eq!(message.offset(), next[p], "partition {p} out of order");
        next[p] += 1;
        let begun = Instant::now();
        while begun.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        message.ack();
        order.push(message.partition());
        if order.len() == 1 {
            // Partition 0 is flowing: now partition 1 gets messages, all
            // in one batch, which its fetcher's waiting fetch brings back
            // at once.
            produce_at_once(&client, &topic, 1, few).await;
        }
    }
    let _ = member.close().await.expect("a clean close");

    // Partition 1 did not wait for the backlog.
    let first = order.iter().position(|p| *p == 1).unwrap_or(order.len());
    let last_of_backlog = order.iter().rposition(|p| *p == 0).unwrap_or(0);
    assert!(
        first < last_of_backlog,
        "partition 1 waited for all of partition 0's backlog (first at {first} of {})",
        order.len()
    );
    // From then on, while both have messages, neither has more than its
    // turn in a row.
    let last = order.iter().rposition(|p| *p == 1).unwrap_or(first);
    let both = &order[first..=last];
    let mut longest = 0;
    let mut run = 0;
    for (i, p) in both.iter().enumerate() {
        run = if i > 0 && both[i - 1] == *p {
            run + 1
        } else {
            1
        };
        longest = longest.max(run);
    }
    assert!(
        longest <= IN_A_ROW,
        "a run of {longest} messages of one partition while the other had some waiting"
    );
    // Turn and turn about: as many of partition 0's as of partition 1's.
    let ones = both.iter().filter(|p| **p == 1).count();
    let zeros = both.len() - ones;
    assert!(
        zeros + IN_A_ROW >= ones && ones + IN_A_ROW >= zeros,
        "{zeros} of partition 0's messages beside {ones} of partition 1's"
    );
}

/// `count` messages into `partition` in one produce request.
async fn produce_at_once(
    client: &rskafka::client::Client,
    topic: &str,
    partition: u32,
    count: usize,
) {
    let target = client
        .partition_client(
            topic,
            partition as i32,
            rskafka::client::partition::UnknownTopicHandling::Retry,
        )
        .await
        .expect("partition client");
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(0).expect("a valid time");
    let batch = (0..count)
        .map(|i| rskafka::record::Record {
            key: None,
            value: Some(format!("{topic}/{partition}#{i}").into_bytes().into()),
            headers: Default::default(),
            timestamp,
        })
        .collect();
    target
        .produce(
            batch,
            rskafka::client::partition::Compression::NoCompression,
        )
        .await
        .unwrap_or_else(|e| panic!("produce to {topic}/{partition}: {e}"));
}
