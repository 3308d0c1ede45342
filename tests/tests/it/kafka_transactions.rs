//! A topic written by Kafka's own transactional producer, with committed
//! and aborted transactions, on a real Kafka 4.x and a real ZooKeeper:
//! every committed record is handed out once, no aborted record is, and the
//! committed offsets reach the log's end past the last transaction marker.
//! Read uncommitted, every record is handed out, aborted ones included.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::core::TopicPartition;
use tenure::tokio::{GroupMember, IsolationLevel, KafkaConfig};

/// Records of each of the two inputs.
const EACH: usize = 1_500;
const RECORDS: usize = 2 * EACH;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_topic_is_consumed_committed_only_and_to_its_end() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let inputs = [kafka::topic("txn-in-a"), kafka::topic("txn-in-b")];
    let output = kafka::topic("txn-out");
    kafka::create_topic(&client, &output, 1).await;
    // Records with distinct values: a value seen twice is a record handed
    // out twice (an aborted copy and its committed one).
    for input in &inputs {
        kafka::create_topic(&client, input, 1).await;
        kafka::produce(&client, input, 0, EACH).await;
    }
    // Two transactional producers at once into one partition: their
    // transactions interleave, so an aborted transaction's records lie
    // between another producer's committed ones.
    let copiers: Vec<_> = inputs
        .iter()
        .map(|input| kafka::copy_transactionally(input, &output, 50))
        .collect();
    for copier in copiers {
        kafka::finished(copier, "Kafka's TransactionalMessageCopier");
    }

    // The log holds aborted records, as Kafka's own consumer sees.
    let committed_records = kafka::count_with_kafkas_consumer(&output, "read_committed");
    let all_records = kafka::count_with_kafkas_consumer(&output, "read_uncommitted");
    assert_eq!(
        committed_records, RECORDS,
        "Kafka's consumer, read_committed"
    );
    assert!(
        all_records > RECORDS,
        "no transaction was aborted ({all_records} records in all): the test proves nothing"
    );
    let ends = kafka::end_offsets(&client, &output, 1).await;
    // Every transaction ends in a marker: the log's end lies past records.
    assert!(ends.iter().sum::<i64>() > all_records as i64, "{ends:?}");

    let stores = ZooKeeper::new("txn").await;
    let group = common::group("txn");
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &output))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(stores.backend())
        .await
        .expect("join");
    let expected: BTreeSet<String> = inputs
        .iter()
        .flat_map(|input| (0..EACH).map(move |i| format!("{input}/0#{i}")))
        .collect();
    let mut seen = BTreeSet::new();
    let partitions = [TopicPartition {
        topic: output.as_str().into(),
        partition: 0,
    }];
    // Consumes until the committed offsets reach the log's end, every
    // message checked as it comes: it must be a committed record (an input
    // value) not seen before. The committed offsets are the store's, read
    // from outside (no event says a commit landed there): asked every 100 ms.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut check = tokio::time::interval(Duration::from_millis(100));
    let mut committed = Vec::new();
    loop {
        tokio::select! {
            message = member.next_message() => {
                let message = message.expect("the member is open");
                let value = message
                    .payload_str()
                    .unwrap_or(Ok(""))
                    .expect("a UTF-8 value")
                    .to_owned();
                assert!(expected.contains(&value), "not a record of the input: {value:?}");
                assert!(
                    seen.insert(value.clone()),
                    "{value} handed out twice (offset {}): an aborted copy was handed out",
                    message.offset()
                );
                message.ack();
            }
            _ = check.tick() => {
                committed.clear();
                for partition in &partitions {
                    committed.push(stores.committed(&group, partition).await.unwrap_or(0));
                }
                if committed == ends {
                    break;
                }
            }
            () = tokio::time::sleep_until(deadline) => panic!(
                "after 60 s: committed {committed:?}, log ends {ends:?}, {} of {RECORDS} records",
                seen.len()
            ),
        }
    }
    assert_eq!(seen.len(), RECORDS, "every committed record, once");
    let _ = member.close().await.expect("close");
    // The lag stays 0 once the group is closed.
    for (partition, end) in partitions.iter().zip(&ends) {
        assert_eq!(stores.committed(&group, partition).await, Some(*end));
    }

    // Read uncommitted, a group of its own is handed every record, those of
    // aborted transactions too: as many as Kafka's own consumer reads so,
    // the aborted ones copies of committed values.
    let group = common::group("txn-uncommitted");
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.isolation_level = IsolationLevel::ReadUncommitted;
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &output))
        .kafka(kafka_config)
        .join(stores.backend())
        .await
        .expect("join");
    let mut offsets = BTreeSet::new();
    let mut values = BTreeSet::new();
    let mut repeated = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut committed = Vec::new();
    loop {
        tokio::select! {
            message = member.next_message() => {
                let message = message.expect("the member is open");
                assert!(offsets.insert(message.offset()), "offset {} twice", message.offset());
                let value = message.payload_str().unwrap_or(Ok("")).expect("a UTF-8 value");
                assert!(expected.contains(value), "not a record of the input: {value:?}");
                if !values.insert(value.to_owned()) {
                    repeated += 1;
                }
                message.ack();
            }
            _ = check.tick() => {
                committed.clear();
                for partition in &partitions {
                    committed.push(stores.committed(&group, partition).await.unwrap_or(0));
                }
                if committed == ends {
                    break;
                }
            }
            () = tokio::time::sleep_until(deadline) => panic!(
                "read uncommitted, after 60 s: committed {committed:?}, log ends {ends:?}, \
                 {} of {all_records} records",
                offsets.len()
            ),
        }
    }
    assert_eq!(offsets.len(), all_records, "every record, aborted ones too");
    assert_eq!(values, expected, "every committed value");
    assert_eq!(repeated, all_records - RECORDS, "the aborted copies");
    let _ = member.close().await.expect("close");
}
