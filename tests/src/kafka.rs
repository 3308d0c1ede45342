//! The real Kafka of `scripts/services`: topics made for one test, data
//! produced into them, end offsets read back.

use std::sync::Arc;
use std::time::Duration;

use rskafka::bytes::Bytes;
use rskafka::client::partition::{Compression, OffsetAt, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;

const HOW_TO_START: &str =
    "start it with `eval \"$(scripts/services start)\"` (it sets TENURE_KAFKA), or run scripts/test";

/// The broker's address; fails the test if it is not set.
pub fn bootstrap() -> String {
    match std::env::var("TENURE_KAFKA") {
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => panic!("TENURE_KAFKA is not set: these tests need a real Kafka; {HOW_TO_START}"),
    }
}

/// A proxy in front of the broker's second listener, which advertises the
/// proxy's address: a client that bootstraps through it reaches the broker
/// only through it, so cutting it is a broker outage for that client alone.
/// Fails the test if the services do not say where (older services).
pub async fn cuttable() -> tenure_testkit::proxy::Proxy {
    let var = |name: &str| match std::env::var(name) {
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => panic!("{name} is not set: this test needs Kafka's second listener; {HOW_TO_START}"),
    };
    let (listener, proxy) = (var("TENURE_KAFKA_CUTTABLE"), var("TENURE_KAFKA_PROXY"));
    tenure_testkit::proxy::Proxy::start_at(&proxy, &listener).await
}

/// A client of the broker; fails the test if it does not answer.
pub async fn client() -> Arc<Client> {
    let bootstrap = bootstrap();
    let building = ClientBuilder::new(vec![bootstrap.clone()]).build();
    let client = tokio::time::timeout(Duration::from_secs(10), building)
        .await
        .unwrap_or_else(|_| panic!("Kafka at {bootstrap} does not answer; {HOW_TO_START}"))
        .unwrap_or_else(|e| panic!("Kafka at {bootstrap}: {e}; {HOW_TO_START}"));
    Arc::new(client)
}

/// A topic name no other test uses.
pub fn topic(name: &str) -> String {
    crate::unique(name)
}

/// Creates `topic` with `partitions` partitions and waits until every
/// partition has a leader.
pub async fn create_topic(client: &Client, topic: &str, partitions: u32) {
    create_topic_with_configs(client, topic, partitions, []).await;
}

/// Creates `topic` with `partitions` partitions and produces `messages` to
/// each.
pub async fn create_topic_with_messages(
    client: &Client,
    topic: &str,
    partitions: u32,
    messages: usize,
) {
    create_topic(client, topic, partitions).await;
    for p in 0..partitions {
        produce(client, topic, p, messages).await;
    }
}

/// Creates `topic` with `partitions` partitions and topic-level `configs`
/// (`("message.timestamp.type", "LogAppendTime")`, say), and waits until
/// every partition has a leader.
pub async fn create_topic_with_configs<const N: usize>(
    client: &Client,
    topic: &str,
    partitions: u32,
    configs: [(&str, &str); N],
) {
    let configs = configs.map(|(name, value)| (name.to_owned(), value.to_owned()));
    client
        .controller_client()
        .expect("controller client")
        .create_topic_with_configs(topic, partitions as i32, 1, configs, 10_000)
        .await
        .unwrap_or_else(|e| panic!("create topic {topic}: {e}"));
    for p in 0..partitions {
        let partition = client
            .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
            .await
            .expect("partition client");
        tokio::time::timeout(
            Duration::from_secs(30),
            partition.get_offset(OffsetAt::Latest),
        )
        .await
        .unwrap_or_else(|_| panic!("{topic}/{p} has no leader after 30 s"))
        .unwrap_or_else(|e| panic!("{topic}/{p}: {e}"));
    }
}

/// Produces `count` messages to `partition` of `topic`, in batches, the
/// key of message `i` `k{i}` and its value naming its position.
pub async fn produce(client: &Client, topic: &str, partition: u32, count: usize) {
    let source = ("source".to_owned(), Bytes::from_static(b"test"));
    produce_with(
        client,
        topic,
        partition,
        count,
        |i| format!("k{i}"),
        Some(source),
    )
    .await;
}

/// Produces `count` messages to `partition` of `topic`, in batches, the
/// key of message `i` `key{i % keys}` and its value naming its position.
pub async fn produce_keyed(
    client: &Client,
    topic: &str,
    partition: u32,
    count: usize,
    keys: usize,
) {
    let key = |i: usize| format!("key{}", i % keys.max(1));
    produce_with(client, topic, partition, count, key, None).await;
}

/// Produces `count` messages to `partition` of `topic`, in batches of 500,
/// the key of message `i` `key(i)`, its value naming its position, with
/// `header` if given.
pub async fn produce_with(
    client: &Client,
    topic: &str,
    partition: u32,
    count: usize,
    key: impl Fn(usize) -> String,
    header: Option<(String, Bytes)>,
) {
    let target = client
        .partition_client(topic, partition as i32, UnknownTopicHandling::Retry)
        .await
        .expect("partition client");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(now_ms).expect("a valid time");
    let mut sent = 0;
    while sent < count {
        let batch: Vec<Record> = (sent..(sent + 500).min(count))
            .map(|i| Record {
                key: Some(key(i).into_bytes().into()),
                value: Some(format!("{topic}/{partition}#{i}").into_bytes().into()),
                headers: header.iter().cloned().collect(),
                timestamp,
            })
            .collect();
        let n = batch.len();
        target
            .produce(batch, Compression::NoCompression)
            .await
            .unwrap_or_else(|e| panic!("produce to {topic}/{partition}: {e}"));
        sent += n;
    }
}

/// The end offset (high watermark) of every partition of `topic`.
pub async fn end_offsets(client: &Client, topic: &str, partitions: u32) -> Vec<i64> {
    let mut ends = Vec::new();
    for p in 0..partitions {
        let partition = client
            .partition_client(topic, p as i32, UnknownTopicHandling::Retry)
            .await
            .expect("partition client");
        ends.push(
            partition
                .get_offset(OffsetAt::Latest)
                .await
                .expect("end offset"),
        );
    }
    ends
}

/// Grows `topic` to `partitions` partitions with Kafka's own tool (rskafka
/// has no CreatePartitions).
pub fn add_partitions(topic: &str, partitions: u32) {
    let status = std::process::Command::new("java")
        .args([
            "-cp",
            &kafka_classpath(),
            "org.apache.kafka.tools.TopicCommand",
            "--bootstrap-server",
            &bootstrap(),
            "--alter",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ])
        .status()
        .unwrap_or_else(|e| panic!("cannot run Kafka's TopicCommand: {e}"));
    assert!(status.success(), "TopicCommand --alter failed for {topic}");
}

/// Produces `count` records of 64 bytes to `topic` with Kafka's own
/// producer (`ProducerPerformance`, in the broker's jars), with `settings`
/// (`key=value` producer configs, such as `compression.type=zstd`): records
/// written as Kafka's clients write them, not as rskafka does.
pub fn produce_with_kafkas_producer(
    topic: &str,
    count: usize,
    settings: &[&str],
) -> std::process::Child {
    let bootstrap = format!("bootstrap.servers={}", bootstrap());
    let mut command = std::process::Command::new("java");
    command
        .args([
            "-Xmx128m",
            "-cp",
            &kafka_classpath(),
            "org.apache.kafka.tools.ProducerPerformance",
        ])
        .args(["--topic", topic, "--num-records", &count.to_string()])
        .args([
            "--record-size",
            "64",
            "--throughput",
            "-1",
            "--producer-props",
            &bootstrap,
        ])
        .args(settings)
        .stdout(std::process::Stdio::null());
    command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run Kafka's ProducerPerformance: {e}"))
}

/// Kafka's jars and tools (`TENURE_KAFKA_LIBS`), as a java classpath.
fn kafka_classpath() -> String {
    let libs = std::env::var("TENURE_KAFKA_LIBS")
        .unwrap_or_else(|_| panic!("TENURE_KAFKA_LIBS is not set; {HOW_TO_START}"));
    format!("{libs}/*")
}

/// Starts copying every record of partition 0 of `input` to partition 0 of
/// `output` with Kafka's own transactional producer
/// (`TransactionalMessageCopier`, the tool of Kafka's exactly-once system
/// tests), `transaction_size` records to a transaction, aborting about one
/// transaction in three at random (an aborted transaction's records are
/// copied again in a later one): the output gets every input record once
/// in committed transactions, the records of aborted ones, and a marker
/// after each transaction. Wait for it with [`finished`].
pub fn copy_transactionally(
    input: &str,
    output: &str,
    transaction_size: usize,
) -> std::process::Child {
    std::process::Command::new("java")
        .args(["-Xmx128m", "-cp", &kafka_classpath()])
        .arg("org.apache.kafka.tools.TransactionalMessageCopier")
        .args(["--broker-list", &bootstrap()])
        .args(["--input-topic", input, "--input-partition", "0"])
        .args(["--output-topic", output])
        .args(["--consumer-group", &format!("{input}-copier")])
        .args(["--transactional-id", &format!("{input}-copier")])
        .args(["--transaction-size", &transaction_size.to_string()])
        .arg("--enable-random-aborts")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run Kafka's TransactionalMessageCopier: {e}"))
}

/// Waits for one of Kafka's tools, started by this module, and fails the
/// test if it failed.
pub fn finished(mut tool: std::process::Child, what: &str) {
    let status = tool
        .wait()
        .unwrap_or_else(|e| panic!("wait for {what}: {e}"));
    assert!(status.success(), "{what} failed: {status}");
}

/// How many records of `topic` Kafka's own consumer reads with `isolation`
/// (`read_committed` or `read_uncommitted`), from the start to the end.
pub fn count_with_kafkas_consumer(topic: &str, isolation: &str) -> usize {
    let output = std::process::Command::new("java")
        .args(["-Xmx128m", "-cp", &kafka_classpath()])
        .arg("org.apache.kafka.tools.consumer.ConsoleConsumer")
        .args(["--bootstrap-server", &bootstrap(), "--topic", topic])
        .args(["--from-beginning", "--isolation-level", isolation])
        // Ends once nothing more came for this long.
        .args(["--timeout-ms", "5000"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run Kafka's ConsoleConsumer: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    const TOTAL: &str = "Processed a total of ";
    stderr
        .lines()
        .find_map(|line| line.strip_prefix(TOTAL)?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("Kafka's ConsoleConsumer did not say its total: {stderr}"))
}

/// Waits until the broker's metadata lists `partitions` partitions of
/// `topic` (the tool returns before every broker answers with them; Kafka
/// has no notification to wait on, so this asks again, bounded).
pub async fn await_partitions(client: &Client, topic: &str, partitions: u32) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = client.list_topics().await.expect("metadata");
        let count = listed
            .iter()
            .find(|t| t.name == topic)
            .map_or(0, |t| t.partitions.len());
        if count >= partitions as usize {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{topic} still has {count} partitions after 30 s, not {partitions}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
