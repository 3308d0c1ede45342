//! Topics written by Kafka's own producer with each compression codec, on
//! a real Kafka 4.x and a real ZooKeeper: every record of each is consumed.

use tenure_tests as common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::core::Subscription;
use tenure::tokio::{GroupMember, KafkaConfig, KafkaError, Problem};

const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];
const RECORDS: usize = 2_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_in_every_codec_are_consumed_fully() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let prefix = kafka::topic("codec");
    for codec in CODECS {
        kafka::create_topic(&client, &format!("{prefix}-{codec}"), 1).await;
    }
    // Kafka's producer, batching so that batches hold many records.
    let producers: Vec<_> = CODECS
        .iter()
        .map(|codec| {
            let compression = format!("compression.type={codec}");
            kafka::produce_with_kafkas_producer(
                &format!("{prefix}-{codec}"),
                RECORDS,
                &[&compression, "linger.ms=20", "batch.size=65536", "acks=all"],
            )
        })
        .collect();
    for (producer, codec) in producers.into_iter().zip(CODECS) {
        kafka::finished(producer, &format!("Kafka's producer ({codec})"));
    }

    let stores = ZooKeeper::new("codec").await;
    let group = common::group("codec");
    let mut config = common::config_for(&group, "m1", "unused");
    config = config
        .with_subscription(Subscription::matching(&format!("{prefix}-.*")).expect("a pattern"));
    let (member, streams) = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(stores.backend())
        .await
        .expect("join")
        .split();
    let mut errors = streams.errors;
    let mut messages = streams.messages.expect("a member with Kafka");
    let mut next: BTreeMap<String, i64> = BTreeMap::new();
    let mut problems = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while next.values().sum::<i64>() < (RECORDS * CODECS.len()) as i64 {
        let message = tokio::select! {
            message = messages.next() => message.expect("the member is open"),
            Some(problem) = errors.next() => {
                // A codec this build cannot read is said at once, and is a
                // failure here: every codec must be built in.
                if let Problem::Kafka(KafkaError::Codec { .. }) = problem {
                    panic!("{problem}");
                }
                problems.push(problem.to_string());
                continue;
            }
            () = tokio::time::sleep_until(deadline) => {
                panic!("consumed within 60 s only up to {next:?}; problems: {problems:?}")
            }
        };
        // In order, each once, from the start.
        let expected = next.entry(message.topic().to_string()).or_insert(0);
        assert_eq!(message.offset(), *expected, "{}", message.topic());
        assert_eq!(message.payload().map(<[u8]>::len), Some(64));
        *expected += 1;
        message.ack();
    }
    for codec in CODECS {
        assert_eq!(
            next.get(&format!("{prefix}-{codec}")),
            Some(&(RECORDS as i64)),
            "{codec}"
        );
    }
    let _ = member.close().await.expect("close");
}
