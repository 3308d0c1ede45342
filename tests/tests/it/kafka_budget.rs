//! The member-wide buffer budget (`KafkaConfig::max_buffered_bytes`) on a
//! real Kafka 4.x: a member over many partitions whose application is slow
//! buffers no more than the budget, whatever the number of partitions, and
//! still hands out every message once, in order.

use tenure_tests as common;
use tenure_tests::recorder;

use std::time::Duration;

use common::kafka;
use tenure::core::Config;
use tenure::tokio::{GroupMember, KafkaConfig, MemoryStore};

const PARTITIONS: u32 = 16;
const PER_PARTITION: usize = 2_000;
const BUDGET: usize = 256 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_buffers_no_more_than_its_budget() {
    let _turn = crate::turns::shared().await;
    let recorder = recorder::installed();
    let client = kafka::client().await;
    let topic = kafka::topic("budget");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    for partition in 0..PARTITIONS {
        kafka::produce(&client, &topic, partition, PER_PARTITION).await;
    }
    let group = common::group("budget");
    let config = Config::new(&group, "m1", [&topic]).expect("valid config");
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.max_buffered_bytes = BUDGET;
    let store = MemoryStore::new();
    let mut member = GroupMember::builder(config)
        .kafka(kafka_config)
        .join(store.backend())
        .await
        .expect("joins");

    // Every message's bytes buffered at once would be several times the
    // budget (about 1.4 MB of keys, values and headers, three batches a
    // partition allowed): only the budget keeps them out. The producer's
    // batches (500 messages, about 22 KB) are larger than a fetch's share
    // of the budget (16 KiB), so that every answer is larger than its
    // fetch asked for, as Kafka returns a batch whole: the budget holds
    // for those too, since each batch is smaller than the budget.
    let mine = [("group", group.as_str())];
    let buffered = || recorder.gauge_sum("tenure_buffered_bytes", &mine);
    let mut most = 0f64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while buffered() < (BUDGET / 4) as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fetchers buffered only {} bytes in 30 s",
            buffered()
        );
        most = most.max(buffered());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The application takes its time; the fetchers refill what it frees.
    let mut next = vec![0i64; PARTITIONS as usize];
    let total = PARTITIONS as usize * PER_PARTITION;
    for taken in 0..total {
        let message = tokio::time::timeout(Duration::from_secs(30), member.next_message())
            .await
            .unwrap_or_else(|_| panic!("{taken} of {total} messages, then none for 30 s"))
            .expect("the member is alive");
        let p = message.partition() as usize;
        assert_eq!(message.offset(), next[p], "partition {p}: out of order");
        next[p] += 1;
        message.ack();
        if taken % 100 == 0 {
            most = most.max(buffered());
            assert!(
                most <= BUDGET as f64,
                "{most} bytes buffered against a budget of {BUDGET}, after {taken} messages"
            );
        }
    }
    assert_eq!(next, vec![PER_PARTITION as i64; PARTITIONS as usize]);
    let _ = member.close().await.expect("close");
}
