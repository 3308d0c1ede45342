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
    let _turn = crate::turns::shared().await;
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
    assert_eq!((message.partition(), message.offset()), (0, 100));
    message.ack();
    lag.agrees([29.0, 0.0]).await;

    // The rest is dropped unprocessed on close; the final commit stands.
    let _ = member.close().await.expect("close");
    assert_eq!(lag.of(0), Some(0.0), "not owned any more");
}

/// The data plane's metrics: after N messages, N messages and their bytes
/// consumed, fetches counted and timed, nothing left buffered and no
/// records lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_plane_counts_messages_bytes_fetches_and_lag() {
    let _turn = crate::turns::shared().await;
    let recorder = recorder::installed();
    let client = kafka::client().await;
    let topic = kafka::topic("telemetry-data");
    kafka::create_topic(&client, &topic, 2).await;
    kafka::produce(&client, &topic, 0, 120).await;
    kafka::produce(&client, &topic, 1, 80).await;
    let group = common::group("telemetry-data");
    let config = Config::new(&group, "m1", [&topic]).expect("valid config");
    let store = MemoryStore::new();
    let mut member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(store.backend())
        .await
        .expect("joins");

    let mut bytes = 0u64;
    for _ in 0..200 {
        let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
            .await
            .expect("a message in time")
            .expect("the member is alive");
        bytes += (message.key().map_or(0, <[u8]>::len)
            + message.payload().map_or(0, <[u8]>::len)
            + message
                .headers()
                .iter()
                .map(|h| h.key.len() + h.value.len())
                .sum::<usize>()) as u64;
        message.ack();
    }

    let mine = [("group", group.as_str()), ("member", "m1")];
    let per_partition = |p: &'static str| {
        [
            ("group", group.as_str()),
            ("topic", topic.as_str()),
            ("partition", p),
        ]
    };
    // Counted as each batch is done with, the lag as each fetch is answered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let consumed = (
            recorder.counter_sum("tenure_messages_consumed_total", &mine),
            recorder.counter_sum("tenure_bytes_consumed_total", &mine),
        );
        let lags: Vec<f64> = ["0", "1"]
            .iter()
            .map(|p| recorder.gauge_sum("tenure_records_lag", &per_partition(p)))
            .collect();
        let lag_known = ["0", "1"].iter().all(|p| {
            recorder
                .gauges("tenure_records_lag", &per_partition(p))
                .len()
                == 1
        });
        let buffered = recorder.gauge_sum("tenure_buffered_bytes", &mine);
        if consumed == (200, bytes) && lag_known && lags == [0.0, 0.0] && buffered == 0.0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "consumed (messages, bytes) {consumed:?}, expected (200, {bytes}); \
             records lag {lags:?}, buffered bytes {buffered}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for p in ["0", "1"] {
        let consumed = recorder.counter_sum("tenure_messages_consumed_total", &per_partition(p));
        assert_eq!(consumed, if p == "0" { 120 } else { 80 }, "partition {p}");
    }
    let fetches = recorder.counter_sum("tenure_fetch_requests_total", &mine);
    let latencies = recorder.samples("tenure_fetch_latency_seconds", &mine);
    assert!(fetches >= 2, "a fetch per partition at least: {fetches}");
    assert!(latencies.len() as u64 >= fetches, "every fetch timed");
    assert!(
        latencies.iter().all(|s| *s >= 0.0 && *s < 60.0),
        "{latencies:?}"
    );

    // More messages raise the lag until they are handed out.
    kafka::produce(&client, &topic, 0, 30).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while recorder.gauge_sum("tenure_records_lag", &per_partition("0")) != 30.0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "records lag {}, expected 30",
            recorder.gauge_sum("tenure_records_lag", &per_partition("0"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..30 {
        let message = tokio::time::timeout(Duration::from_secs(20), member.next_message())
            .await
            .expect("a message in time")
            .expect("the member is alive");
        message.ack();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while recorder.gauge_sum("tenure_records_lag", &per_partition("0")) != 0.0
        || recorder.counter_sum("tenure_messages_consumed_total", &mine) != 230
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "lag back to 0, 230 consumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = member.close().await.expect("close");
}
