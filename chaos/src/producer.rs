//! The run's topic, and a producer that writes to it throughout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rskafka::client::partition::{Compression, OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder};
use rskafka::record::Record;
use tokio::task::JoinHandle;

use tenure_chaos_lines::wall_ms;

/// The topic of the run, being written to.
pub struct Producer {
    client: Arc<Client>,
    pub topic: String,
    partitions: u32,
    producing: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Producer {
    /// Creates the topic `chaos-<seed>-<ms>` with `partitions` partitions
    /// and writes `rate` messages a second to it, a batch to every
    /// partition every 50 ms, until [`Producer::stop`].
    pub async fn start(kafka: &str, seed: u64, partitions: u32, rate: u64) -> Result<Self, String> {
        let client = ClientBuilder::new(vec![kafka.to_owned()])
            .build()
            .await
            .map_err(|e| format!("Kafka at {kafka}: {e}"))?;
        let client = Arc::new(client);
        let topic = format!("chaos-{seed}-{}", wall_ms());
        client
            .controller_client()
            .map_err(|e| e.to_string())?
            .create_topic(&topic, partitions as i32, 1, 10_000)
            .await
            .map_err(|e| format!("create topic {topic}: {e}"))?;
        let mut targets = Vec::new();
        for p in 0..partitions {
            targets.push(partition(&client, &topic, p).await?);
        }
        let producing = Arc::new(AtomicBool::new(true));
        let per_batch = (rate / 20 / u64::from(partitions)).max(1);
        let task = tokio::spawn(produce(targets, per_batch, producing.clone()));
        Ok(Producer {
            client,
            topic,
            partitions,
            producing,
            task,
        })
    }

    /// Stops writing; returns every partition's log end.
    pub async fn stop(self) -> Result<Vec<i64>, String> {
        self.producing.store(false, Ordering::Relaxed);
        self.task.await.map_err(|e| e.to_string())?;
        let mut ends = Vec::new();
        for p in 0..self.partitions {
            let target = partition(&self.client, &self.topic, p).await?;
            ends.push(
                target
                    .get_offset(OffsetAt::Latest)
                    .await
                    .map_err(|e| e.to_string())?,
            );
        }
        Ok(ends)
    }
}

async fn partition(client: &Client, topic: &str, p: u32) -> Result<PartitionClient, String> {
    client
        .partition_client(topic.to_owned(), p as i32, UnknownTopicHandling::Retry)
        .await
        .map_err(|e| format!("{topic}/{p}: {e}"))
}

/// How many keys the messages of a partition take turns with.
const KEYS: u64 = 16;

/// `per_batch` messages to every partition every 50 ms while `producing`,
/// their values counting up from 1, keyed `k<value % KEYS>`.
async fn produce(targets: Vec<PartitionClient>, per_batch: u64, producing: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut written = 0u64;
    while producing.load(Ordering::Relaxed) {
        tick.tick().await;
        for target in &targets {
            let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(wall_ms() as i64)
                .unwrap_or_default();
            let values = written + 1..=written + per_batch;
            written += per_batch;
            let batch = values
                .map(|value| Record {
                    // A few keys, for the key-ordered runs.
                    key: Some(format!("k{}", value % KEYS).into_bytes().into()),
                    value: Some(value.to_string().into_bytes().into()),
                    headers: Vec::new(),
                    timestamp,
                })
                .collect();
            if let Err(e) = target.produce(batch, Compression::NoCompression).await {
                eprintln!("chaos: produce: {e}");
            }
        }
    }
}
