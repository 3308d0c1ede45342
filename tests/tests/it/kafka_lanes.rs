//! Key-ordered lanes (`ProcessingOrder::Key`) on a real Kafka 4.x: an
//! application that processes every message on a task of its own and
//! acknowledges in whatever order they finish gets each key's messages one
//! at a time, in offset order, across the whole group and through a
//! handoff, many keys at once, and a committed offset that reaches the end
//! of every partition without passing a message still being processed.
//! A nacked message comes back after its delay, ahead of its key's later
//! messages.

use tenure_tests as common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::kafka;
use rskafka::client::partition::UnknownTopicHandling;
use tenure::core::{Config, TopicPartition};
use tenure::tokio::kafka::dead_letter;
use tenure::tokio::{DeadLetters, GroupMember, KafkaConfig, MemoryStore, ProcessingOrder};

const PARTITIONS: u32 = 4;
const PER_PARTITION: usize = 1_500;
const KEYS: usize = 12;
const MAX_IN_FLIGHT: usize = 8;

/// What the group's application saw, for the checks at the end.
#[derive(Default)]
struct Seen {
    /// Per partition and key: the member processing a message of it now,
    /// and the last offset processed.
    keys: HashMap<(u32, String), (Option<&'static str>, i64)>,
    /// Per partition: messages being processed now, and the most at once.
    in_flight: HashMap<u32, usize>,
    most_in_flight: usize,
    /// (partition, offset) of every message processed.
    processed: BTreeSet<(u32, i64)>,
    /// (partition, offset) of the messages nacked (each once).
    nacked: BTreeSet<(u32, i64)>,
    /// What broke the promise, in words.
    violations: Vec<String>,
}

/// Consumes until `done`: every message on a task of its own,
/// finishing in an order of its own (a few milliseconds that depend on
/// the offset), then acknowledged; every eleventh message fails once
/// first and is nacked, to come back a few milliseconds later (or, once
/// its partition moved, from the next owner).
fn consume(
    mut member: GroupMember,
    name: &'static str,
    seen: Arc<Mutex<Seen>>,
    done: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<GroupMember> {
    tokio::spawn(async move {
        loop {
            if done.load(Ordering::SeqCst) {
                return member;
            }
            let next = tokio::time::timeout(Duration::from_millis(100), member.next_message());
            let message = match next.await {
                Ok(Some(message)) => message,
                Ok(None) => return member,
                Err(_) => continue,
            };
            let (p, offset) = (message.partition(), message.offset());
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            {
                let mut seen = seen.lock().expect("not poisoned");
                let (busy, last) = *seen.keys.entry((p, key.clone())).or_insert((None, -1));
                if let Some(other) = busy {
                    seen.violations.push(format!(
                        "{p}/{offset} ({key}) handed to {name} while {other} processes an earlier one"
                    ));
                }
                seen.keys.insert((p, key.clone()), (Some(name), last));
                let in_flight = seen.in_flight.entry(p).or_default();
                *in_flight += 1;
                let now = *in_flight;
                seen.most_in_flight = seen.most_in_flight.max(now);
                if now > MAX_IN_FLIGHT {
                    seen.violations
                        .push(format!("{now} of {p} in flight at {name}"));
                }
            }
            let seen = seen.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(200 + (offset as u64 * 7919) % 3_000))
                    .await;
                {
                    let mut seen = seen.lock().expect("not poisoned");
                    if offset % 11 == 0 && seen.nacked.insert((p, offset)) {
                        // Not processed: its key stays with it.
                        if let Some(entry) = seen.keys.get_mut(&(p, key.clone())) {
                            entry.0 = None;
                        }
                        if let Some(in_flight) = seen.in_flight.get_mut(&p) {
                            *in_flight -= 1;
                        }
                        drop(seen);
                        let retry = message.nack(Duration::from_millis(3));
                        assert!(retry.is_ok(), "a nack refused with lanes");
                        return;
                    }
                    let entry = seen.keys.entry((p, key.clone())).or_insert((None, -1));
                    let last = entry.1;
                    *entry = (None, offset.max(last));
                    if offset < last {
                        let repeat = seen.processed.contains(&(p, offset));
                        if !repeat {
                            seen.violations.push(format!(
                                "{p}/{offset} ({key}) processed after {last} of its key"
                            ));
                        }
                    }
                    seen.processed.insert((p, offset));
                    if let Some(in_flight) = seen.in_flight.get_mut(&p) {
                        *in_flight -= 1;
                    }
                }
                // Acknowledged once done with: the key's next message may
                // be handed out from here on.
                message.ack();
            });
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_go_one_at_a_time_in_order_through_a_handoff() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("lanes");
    kafka::create_topic(&client, &topic, PARTITIONS).await;
    for partition in 0..PARTITIONS {
        kafka::produce_keyed(&client, &topic, partition, PER_PARTITION, KEYS).await;
    }
    let group = common::group("lanes");
    let store = MemoryStore::new();
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.order = ProcessingOrder::key(MAX_IN_FLIGHT);
    // Small fetches, so that a handoff comes while much is still to read.
    kafka_config.fetch_max_bytes = 16 << 10;
    let join = |name: &str| {
        let config = Config::new(&group, name, [&topic]).expect("valid config");
        GroupMember::builder(config)
            .kafka(kafka_config.clone())
            .join(store.backend())
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let done = Arc::new(AtomicBool::new(false));
    let first = consume(
        join("m1").await.expect("m1 joins"),
        "m1",
        seen.clone(),
        done.clone(),
    );

    // The second member joins once the first is well under way.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.lock().expect("not poisoned").processed.len() < PER_PARTITION {
        assert!(
            tokio::time::Instant::now() < deadline,
            "m1 processed too little in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = consume(
        join("m2").await.expect("m2 joins"),
        "m2",
        seen.clone(),
        done.clone(),
    );

    // Everything processed and committed to the end.
    let total = PARTITIONS as usize * PER_PARTITION;
    let tp = |p| TopicPartition::new(&topic, p);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let done = seen.lock().expect("not poisoned").processed.len();
        let committed: Vec<Option<i64>> = (0..PARTITIONS)
            .map(|p| store.committed(&group, &tp(p)))
            .collect();
        if done == total && committed.iter().all(|c| *c == Some(PER_PARTITION as i64)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{done} of {total} processed, committed {committed:?} after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done.store(true, Ordering::SeqCst);
    let (first, second) = (
        first.await.expect("m1's task"),
        second.await.expect("m2's task"),
    );
    {
        let seen = seen.lock().expect("not poisoned");
        assert!(seen.violations.is_empty(), "{:#?}", seen.violations);
        assert!(!seen.nacked.is_empty(), "nothing nacked");
        assert!(
            seen.most_in_flight > 1,
            "keys never processed concurrently (at most {} at once)",
            seen.most_in_flight
        );
    }
    let _ = first.close().await.expect("m1 closes");
    let _ = second.close().await.expect("m2 closes");
}

/// Member m1 of `group` on `store`, consuming `topic` in key order with
/// `dead_letters`.
async fn one_member(
    store: &MemoryStore,
    group: &str,
    topic: &str,
    dead_letters: Option<DeadLetters>,
) -> GroupMember {
    let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
    kafka_config.order = ProcessingOrder::key(MAX_IN_FLIGHT);
    kafka_config.dead_letters = dead_letters;
    let config = Config::new(group, "m1", [topic]).expect("valid config");
    GroupMember::builder(config)
        .kafka(kafka_config)
        .join(store.backend())
        .await
        .expect("m1 joins")
}

/// A message nacked on its first hand-out comes back after its delay,
/// its key's later messages wait for it, and the committed offsets still
/// reach the end of every partition once everything is acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_message_comes_back_and_its_key_waits_for_it() {
    const PER: usize = 400;
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("lanes-nack");
    kafka::create_topic(&client, &topic, 2).await;
    for partition in 0..2 {
        kafka::produce_keyed(&client, &topic, partition, PER, KEYS).await;
    }
    let group = common::group("lanes-nack");
    let store = MemoryStore::new();
    let mut member = one_member(&store, &group, &topic, None).await;

    // Per (partition, offset): how often handed out. Per (partition,
    // key): the last offset acknowledged.
    let mut handed: HashMap<(u32, i64), u32> = HashMap::new();
    let mut last_acked: HashMap<(u32, String), i64> = HashMap::new();
    let mut violations = Vec::new();
    let retry_after = Duration::from_millis(20);
    let tp = |p| TopicPartition::new(&topic, p);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut acked = 0;
    while acked < 2 * PER {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{acked} of {} acknowledged after 60 s",
            2 * PER
        );
        let next = tokio::time::timeout(Duration::from_secs(10), member.next_message());
        let message = next
            .await
            .expect("a message within 10 s")
            .expect("the member goes on");
        let (p, offset) = (message.partition(), message.offset());
        let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
        let times = handed.entry((p, offset)).or_default();
        *times += 1;
        if let Some(last) = last_acked.get(&(p, key.clone())) {
            if *last > offset {
                violations.push(format!("{p}/{offset} ({key}) after {last} of its key"));
            }
        }
        if offset % 7 == 0 && *times == 1 {
            // Its key's next message must not come before it comes back.
            assert!(
                message.nack(retry_after).is_ok(),
                "a nack refused with lanes"
            );
            continue;
        }
        last_acked.insert((p, key), offset);
        message.ack();
        acked += 1;
    }
    assert!(violations.is_empty(), "{violations:#?}");
    for ((p, offset), times) in &handed {
        let expected = if offset % 7 == 0 { 2 } else { 1 };
        assert_eq!(*times, expected, "{p}/{offset} handed out {times} times");
    }
    let report = member.commit().await.expect("the member runs");
    assert!(report.all_written(), "{report:?}");
    for p in 0..2 {
        assert_eq!(store.committed(&group, &tp(p)), Some(PER as i64));
    }
    let _ = member.close().await.expect("m1 closes");
}

/// The dead letters of a topic with `partitions` partitions, once
/// `expected` are there (60 s at most): (origin partition, origin offset)
/// to its headers.
async fn letters_in(
    client: &rskafka::client::Client,
    topic: &str,
    partitions: u32,
    expected: usize,
) -> HashMap<(u32, i64), HashMap<String, String>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut letters = HashMap::new();
        for p in 0..partitions {
            let partition = client
                .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
                .await
                .expect("partition client");
            let (records, _) = partition
                .fetch_records(0, 1..(1 << 20), 100)
                .await
                .expect("the dead letters are read");
            for record in records {
                let headers: HashMap<String, String> = record
                    .record
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                    .collect();
                let number = |name: &str| -> i64 {
                    headers
                        .get(name)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| panic!("a dead letter without {name}: {headers:?}"))
                };
                let origin = (
                    number(dead_letter::ORIGIN_PARTITION) as u32,
                    number(dead_letter::ORIGIN_OFFSET),
                );
                letters.insert(origin, headers);
            }
        }
        if letters.len() >= expected || tokio::time::Instant::now() > deadline {
            return letters;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A message nacked `max_attempts` times, and one rejected, go to the
/// dead-letter topic with headers naming their origin, attempts and
/// reason, and count as processed: the commits reach the end, and each
/// key's later messages wait until its letter is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_keep_failing_go_to_the_dead_letter_topic() {
    const PER: usize = 300;
    const MAX_ATTEMPTS: u32 = 3;
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("lanes-poison");
    let letters_topic = kafka::topic("lanes-poison-dlt");
    kafka::create_topic(&client, &topic, 2).await;
    kafka::create_topic(&client, &letters_topic, 1).await;
    for partition in 0..2 {
        kafka::produce_keyed(&client, &topic, partition, PER, KEYS).await;
    }
    let poison = |offset: i64| offset % 50 == 7;
    let rejected = |offset: i64| offset % 50 == 31;
    let group = common::group("lanes-poison");
    let store = MemoryStore::new();
    let dead_letters = DeadLetters::new(&letters_topic, MAX_ATTEMPTS);
    let mut member = one_member(&store, &group, &topic, Some(dead_letters)).await;

    let mut handed: HashMap<(u32, i64), u32> = HashMap::new();
    // Per (partition, key): a message of it given up and not written yet.
    let mut giving_up: HashMap<(u32, String), i64> = HashMap::new();
    let mut violations = Vec::new();
    let mut settled = 0;
    let mut expected_letters = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let tp = |p| TopicPartition::new(&topic, p);
    loop {
        let committed: Vec<Option<i64>> = (0..2).map(|p| store.committed(&group, &tp(p))).collect();
        if settled == 2 * PER && committed.iter().all(|c| *c == Some(PER as i64)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{settled} of {} settled, committed {committed:?} after 60 s",
            2 * PER
        );
        let next = tokio::time::timeout(Duration::from_millis(100), member.next_message());
        let Ok(message) = next.await else {
            // Nothing to hand out: commit what the letters let through.
            let _ = member.commit().await.expect("the member runs");
            continue;
        };
        let message = message.expect("the member goes on");
        let (p, offset) = (message.partition(), message.offset());
        let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
        if let Some(earlier) = giving_up.get(&(p, key.clone())) {
            let written = letters_in(&client, &letters_topic, 1, 0).await;
            if !written.contains_key(&(p, *earlier)) {
                violations.push(format!("{p}/{offset} ({key}) before {earlier}'s letter"));
            }
            giving_up.remove(&(p, key.clone()));
        }
        let times = handed.entry((p, offset)).or_default();
        *times += 1;
        if poison(offset) {
            if *times == MAX_ATTEMPTS {
                giving_up.insert((p, key), offset);
                settled += 1;
                expected_letters += 1;
            }
            assert!(
                message.nack(Duration::from_millis(10)).is_ok(),
                "nack refused"
            );
        } else if rejected(offset) {
            giving_up.insert((p, key), offset);
            settled += 1;
            expected_letters += 1;
            assert!(message.reject("unreadable").is_ok(), "reject refused");
        } else {
            message.ack();
            settled += 1;
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
    let letters = letters_in(&client, &letters_topic, 1, expected_letters).await;
    assert_eq!(letters.len(), expected_letters, "{letters:?}");
    for ((p, offset), headers) in &letters {
        let (attempts, reason) = if poison(*offset) {
            (
                MAX_ATTEMPTS.to_string(),
                format!("nacked {MAX_ATTEMPTS} times"),
            )
        } else {
            assert!(rejected(*offset), "{p}/{offset} dead-lettered");
            ("1".to_owned(), "unreadable".to_owned())
        };
        assert_eq!(headers.get(dead_letter::ORIGIN_TOPIC), Some(&topic));
        assert_eq!(
            headers.get(dead_letter::ATTEMPTS),
            Some(&attempts),
            "{p}/{offset}"
        );
        assert_eq!(
            headers.get(dead_letter::REASON),
            Some(&reason),
            "{p}/{offset}"
        );
        assert_eq!(
            handed.get(&(*p, *offset)),
            Some(&attempts.parse().expect("a number"))
        );
    }
    let _ = member.close().await.expect("m1 closes");
}

/// What a member acknowledged above its committed offset goes into the
/// progress record beside it, in ZooKeeper, and the next owner skips it:
/// the first member holds offset 0 back (nacked once, to come back in an
/// hour) and acknowledges 1 to 100, then leaves; the next owner is handed
/// 0 and everything from 101 on, never 1 to 100, and 0's failure counts
/// on from the record's count: its next nack is its last attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_done_above_the_committed_offset_is_not_done_again_after_a_handoff() {
    use common::zookeeper::ZooKeeper;
    use common::Stores;
    use tenure::core::records::Layout;
    use tenure::core::Progress;

    const TOTAL: usize = 200;
    const DONE: i64 = 100;
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("lanes-progress");
    let letters_topic = kafka::topic("lanes-progress-dlt");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::create_topic(&client, &letters_topic, 1).await;
    // A key each: nothing waits for another message of its key.
    kafka::produce_keyed(&client, &topic, 0, TOTAL, TOTAL).await;
    let zookeeper = ZooKeeper::new("lanes-progress").await;
    let group = common::group("lanes-progress");
    let join = |name: &str| {
        let mut kafka_config = KafkaConfig::new(&kafka::bootstrap());
        kafka_config.order = ProcessingOrder::key(32);
        kafka_config.dead_letters = Some(DeadLetters::new(&letters_topic, 2));
        let config = Config::new(&group, name, [&topic]).expect("valid config");
        GroupMember::builder(config)
            .kafka(kafka_config)
            .join(zookeeper.backend())
    };
    let tp = TopicPartition::new(&topic, 0);

    let mut first = join("m1").await.expect("m1 joins");
    let mut acked = 0;
    while acked < DONE {
        let next = tokio::time::timeout(Duration::from_secs(30), first.next_message());
        let message = next
            .await
            .expect("a message within 30 s")
            .expect("m1 goes on");
        if message.offset() == 0 {
            assert!(
                message.nack(Duration::from_secs(3600)).is_ok(),
                "a nack refused with lanes"
            );
            continue;
        }
        assert!(message.offset() <= DONE, "{} handed out", message.offset());
        message.ack();
        acked += 1;
    }
    let report = first.commit().await.expect("m1 runs");
    assert!(report.all_written(), "{report:?}");
    let _ = first.close().await.expect("m1 closes");

    // The record, as the store holds it: nothing below 0 is done, 1 to
    // 100 are, and 0 failed once.
    let layout = Layout::new("", &group);
    let raw = zookeeper.raw().clone();
    let read = |path: String| {
        let raw = raw.clone();
        async move {
            let (data, _) = raw.get_data(&path).await.expect("the record");
            data
        }
    };
    assert_eq!(
        String::from_utf8_lossy(&read(layout.offset(&tp)).await),
        "0",
        "the offset record stays a plain number"
    );
    let path = layout.progress(&tp);
    let progress = Progress::decode(&path, &read(path.clone()).await, 0)
        .expect("a progress record")
        .expect("written with offset 0");
    assert_eq!(
        progress.done().first(),
        Some(&(1..DONE + 1)),
        "{progress:?}"
    );
    assert_eq!(progress.done().len(), 1, "{progress:?}");
    assert_eq!(progress.attempts(), [(0, 1)]);

    // The next owner: 0, then 101 on; 0 fails a second time and goes to
    // the dead-letter topic.
    let mut second = join("m2").await.expect("m2 joins");
    let mut handed = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while zookeeper.committed(&group, &tp).await != Some(TOTAL as i64) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "committed {:?} after 60 s, handed out {handed:?}",
            zookeeper.committed(&group, &tp).await
        );
        let next = tokio::time::timeout(Duration::from_millis(200), second.next_message());
        let Ok(message) = next.await else {
            let _ = second.commit().await.expect("m2 runs");
            continue;
        };
        let message = message.expect("m2 goes on");
        let offset = message.offset();
        assert!(
            handed.insert(offset),
            "{offset} handed out twice to the next owner"
        );
        assert!(
            !(1..=DONE).contains(&offset),
            "{offset}, done before the handoff, handed out again"
        );
        if offset == 0 {
            assert!(message.nack(Duration::ZERO).is_ok(), "nack refused");
        } else {
            message.ack();
        }
    }
    let expected: BTreeSet<i64> = std::iter::once(0).chain(DONE + 1..TOTAL as i64).collect();
    assert_eq!(handed, expected);
    let letters = letters_in(&client, &letters_topic, 1, 1).await;
    assert_eq!(
        letters
            .get(&(0, 0))
            .and_then(|h| h.get(dead_letter::ATTEMPTS)),
        Some(&"2".to_owned()),
        "0's attempts did not count on across the handoff: {letters:?}"
    );
    // Everything done: the record went with the last commit.
    assert_eq!(
        zookeeper.raw().get_data(&path).await.map(|_| ()),
        Err(zookeeper_client::Error::NoNode)
    );
    let _ = second.close().await.expect("m2 closes");
}
