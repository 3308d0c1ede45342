//! `tenure_partition_lag` on a real Kafka (started by `scripts/services`),
//! coordinated on the embedded store: it must agree with what a tool
//! computes from outside, the log end minus the committed offset.

use tenure_tests as common;
use tenure_tests::recorder;

use std::time::Duration;

use common::kafka;
use tenure::core::{Config, TopicPartition};
use tenure::tokio::{GroupMember, KafkaConfig, MemoryStore};

const PARTITION_LAG: &str = "tenure_partition_lag";

/// The lag of one member's topic, from inside and from outside.
struct Lag<'a> {
    recorder: &'a recorder::Captured,
    client: &'a rskafka::client::Client,
    topic: &'a str,
    group: &'a str,
    store: &'a MemoryStore,
}

impl Lag<'_> {
    /// What the member reports for `partition`.
    fn of(&self, partition: u32) -> Option<f64> {
        let number = partition.to_string();
        let labels = [
            ("group", self.group),
            ("topic", self.topic),
            ("partition", number.as_str()),
        ];
        match self.recorder.gauges(PARTITION_LAG, &labels).as_slice() {
            [(_, lag)] => Some(*lag),
            _ => None,
        }
    }

    /// Waits until the member's lags, the log ends minus the committed
    /// offsets in the store, and `expected` all agree.
    async fn agrees(&self, expected: [f64; 2]) {
        let expected: Vec<Option<f64>> = expected.iter().copied().map(Some).collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ends = kafka::end_offsets(self.client, self.topic, 2).await;
            let outside: Vec<Option<f64>> = (0..2u32)
                .map(|p| {
                    let partition = TopicPartition::new(self.topic, p);
                    let committed = self.store.committed(self.group, &partition)?;
                    Some((ends[p as usize] - committed) as f64)
                })
                .collect();
            let inside: Vec<Option<f64>> = (0..2).map(|p| self.of(p)).collect();
            if inside == outside && inside == expected {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "lag {inside:?}, from outside {outside:?}, expected {expected:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_is_the_log_end_minus_the_committed_offset() {
    let recorder = recorder::installed();
    let client = kafka::client().await;
    let topic = kafka::topic("telemetry-lag");
    kafka::create_topic(&client, &topic, 2).await;
    kafka::produce(&client, &topic, 0, 100).await;
    kafka::produce(&client, &topic, 1, 40).await;
    let group = common::group("telemetry-lag");
    let mut config = Config::new(&group, "m1", [&topic]).expect("valid config");
    config = config.with_commit_interval(Duration::from_millis(100));
    let store = MemoryStore::new();
    let mut member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(store.backend())
        .await
        .expect("joins");

    // Everything consumed: once committed, no lag.
    for _ in 0..140 {
        let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
            .await
            .expect("a message in time")
            .expect("the member is alive");
        message.ack();
    }
    let lag = Lag {
        recorder,
        client: &client,
        topic: &topic,
        group: &group,
        store: &store,
    };
    lag.agrees([0.0, 0.0]).await;

    // New messages fetched but not processed: the lag counts them, as a
    // tool reading the store and Kafka does.
    kafka::produce(&client, &topic, 0, 30).await;
    lag.agrees([30.0, 0.0]).await;

    let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
        .await
        .expect("a message in time")
        .expect("the member is alive");
    assert_eq!((message.partition, message.offset), (0, 100));
    message.ack();
    lag.agrees([29.0, 0.0]).await;

    // The rest is dropped unprocessed on close; the final commit stands.
    let _ = member.close().await.expect("close");
    assert_eq!(lag.of(0), Some(0.0), "not owned any more");
}
