//! How to reach Kafka and how to fetch.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use crate::security::KafkaSecurity;

/// How to reach Kafka and how to fetch.
///
/// Fetches read committed by default (see [`IsolationLevel`]); either way
/// the committed offset moves past transaction markers.
#[derive(Clone, Debug)]
pub struct KafkaConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// Most bytes one fetch asks for. Default: 1 MiB.
    pub fetch_max_bytes: i32,
    /// How long a fetch may wait on the broker for new messages. Default:
    /// 250 ms.
    pub fetch_max_wait: Duration,
    /// Fetched batches (each at most `fetch_max_bytes`) buffered per owned
    /// partition before its fetcher waits for the application: a slow
    /// application holds memory at this bound, about
    /// `(buffered_batches + 1) × fetch_max_bytes` per partition (one more
    /// batch is in the fetcher's hands). Each partition has its own buffer,
    /// so that one partition's backlog never sits in front of another's
    /// messages. 0 counts as 1. Default: 2.
    pub buffered_batches: usize,
    /// Most bytes of fetched messages the member buffers before handing
    /// them out, over all its partitions (librdkafka's
    /// `queued.max.messages.kbytes`): a member over 10,000 partitions
    /// buffers no more than one over 10. Each fetch reserves its size from
    /// this budget before it is sent; with many partitions a fetch asks for
    /// its share (this budget over the partitions being fetched, at least
    /// 16 KiB, at most `fetch_max_bytes`), so that with more partitions
    /// than the budget holds 16 KiB shares, fetches take turns. A fetched
    /// batch keeps what its messages take (keys, values, headers) until its
    /// last message is handed out or it is dropped; an answer larger than
    /// its fetch reserved (Kafka returns a partition's next batch whole
    /// when it is larger than asked for) waits for room for all of it.
    /// Once the budget is spent, fetchers wait, in the order they asked,
    /// until the application takes messages. The budget is never passed,
    /// but by a single batch larger than all of it. Messages handed out
    /// and still held by the application are not counted (they keep their
    /// batch's memory until dropped). With per-partition streams, a stream
    /// left unread keeps what its buffer holds (`buffered_batches` batches
    /// at most) and the others share the rest. Values under 16 KiB count
    /// as 16 KiB. Default: 64 MiB.
    pub max_buffered_bytes: usize,
    /// On the member's one message stream (`tenure_tokio::GroupMember::messages`):
    /// at most this many messages of one partition are handed out in a row
    /// while another partition has messages waiting. The partitions with
    /// messages take turns, so a backlogged partition delays each of the
    /// others by at most one turn. Per-partition streams are not affected.
    /// 0 counts as 1. Default: 64.
    pub max_messages_in_a_row: usize,
    /// How often partition counts are read from metadata, so that added
    /// partitions get assigned. Default: 10 s.
    pub metadata_refresh: Duration,
    /// How long connecting to the brokers may take. Default: 10 s.
    pub connect_timeout: Duration,
    /// The client id the brokers see (in their logs and quotas). Default:
    /// `tenure`.
    pub client_id: String,
    /// SASL and TLS, for brokers that require them. Default: none.
    pub security: KafkaSecurity,
    /// Which records are handed out: those of committed transactions only,
    /// or those of open and aborted transactions too. Default:
    /// [`IsolationLevel::ReadCommitted`].
    pub isolation_level: IsolationLevel,
    /// How long the application may leave a partition's messages waiting
    /// (fetched and not taken, or taken and not acknowledged) without
    /// taking or acknowledging one, before the member calls it stuck,
    /// reports `Problem::ProcessingStalled` and leaves the group, so that
    /// its partitions move to members that process them (Kafka's
    /// `max.poll.interval.ms`). Counted per partition: with per-partition
    /// streams, one stream left unread is enough. `None` turns it off.
    /// Default: 5 minutes.
    pub max_processing_stall: Option<Duration>,
    /// In what order a partition's messages are handed out, for every
    /// topic not named in [`KafkaConfig::topic_order`]. Default:
    /// [`ProcessingOrder::Partition`].
    pub order: ProcessingOrder,
    /// The order of the topics that differ from [`KafkaConfig::order`],
    /// by topic name. Default: none.
    pub topic_order: BTreeMap<String, ProcessingOrder>,
    /// Where messages go that keep failing or that the application
    /// rejects ([`crate::Message::nack`], [`crate::Message::reject`]).
    /// Default: none (a nacked message comes back for as long as the
    /// claim holds, and a rejection is refused).
    pub dead_letters: Option<DeadLetters>,
}

/// A dead-letter topic ([`KafkaConfig::dead_letters`]): a message nacked
/// `max_attempts` times, or rejected, is produced there with its key,
/// value, headers and timestamp, plus headers naming its origin (see
/// [`crate::dead_letter`]), and then counted as processed: the committed
/// offset moves past it.
///
/// The topic must exist; the member creates none, and reports
/// [`crate::KafkaError::DeadLetter`] while it cannot produce (and tries
/// again, holding the message, while its claim holds). A letter that
/// cannot be written for [`KafkaConfig::max_processing_stall`] holds its
/// partition's commits that long and counts as a stall. Produces are not
/// fenced by the claim: a member that lost the partition while producing
/// may leave a letter the next owner writes again.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetters {
    /// The topic.
    pub topic: String,
    /// A message handed out this many times and nacked each time is
    /// produced to the topic instead of handed out again.
    pub max_attempts: std::num::NonZeroU32,
}

impl DeadLetters {
    /// Letters go to `topic` after `max_attempts` failed attempts (0
    /// counts as 1).
    pub fn new(topic: impl Into<String>, max_attempts: u32) -> DeadLetters {
        DeadLetters {
            topic: topic.into(),
            max_attempts: std::num::NonZeroU32::new(max_attempts)
                .unwrap_or(std::num::NonZeroU32::MIN),
        }
    }
}

/// In what order the messages of one partition are handed out, and how
/// many of them the application may hold at once.
///
/// Whatever the order, the offset a member commits never passes a message
/// handed out and not acknowledged, in whatever order the application
/// acknowledges, and nothing is handed out past the member's lease.
///
/// ```
/// use tenure_kafka::{KafkaConfig, ProcessingOrder};
///
/// let mut config = KafkaConfig::new("127.0.0.1:9092");
/// // Orders by key, 32 messages of a partition in flight at most.
/// config.order = ProcessingOrder::key(32);
/// // Except one topic, whose messages may be processed in any order.
/// config
///     .topic_order
///     .insert("audit".to_owned(), ProcessingOrder::unordered(100));
/// assert_eq!(config.order_of("audit").max_in_flight(), Some(100));
/// assert_eq!(config.order_of("orders").max_in_flight(), Some(32));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProcessingOrder {
    /// Messages are handed out in offset order, as fast as the application
    /// takes them; how many it holds at once, and so the order it
    /// processes them in, is the application's: one that takes the next
    /// message of a partition only once it is done with the last processes
    /// in partition order. The default.
    #[default]
    Partition,
    /// Messages with the same key go through one lane: a message is handed
    /// out only once every earlier message of its partition with the same
    /// key is acknowledged, so that each key's messages are processed in
    /// offset order, one at a time, while different keys are processed
    /// concurrently. Messages without a key are each a lane of their own.
    /// At most `max_in_flight` messages of a partition are handed out and
    /// not acknowledged at once. Keys are told apart by a 64-bit hash: two
    /// keys with the same hash share a lane (their order is kept, their
    /// concurrency lost).
    Key {
        /// Most messages of one partition handed out and not yet
        /// acknowledged.
        max_in_flight: NonZeroUsize,
    },
    /// Messages are handed out in offset order, at most `max_in_flight` of
    /// a partition held by the application at once, to be processed in any
    /// order.
    Unordered {
        /// Most messages of one partition handed out and not yet
        /// acknowledged.
        max_in_flight: NonZeroUsize,
    },
}

impl ProcessingOrder {
    /// [`ProcessingOrder::Key`] with `max_in_flight` messages per partition
    /// (0 counts as 1).
    pub fn key(max_in_flight: usize) -> ProcessingOrder {
        ProcessingOrder::Key {
            max_in_flight: NonZeroUsize::new(max_in_flight).unwrap_or(NonZeroUsize::MIN),
        }
    }

    /// [`ProcessingOrder::Unordered`] with `max_in_flight` messages per
    /// partition (0 counts as 1).
    pub fn unordered(max_in_flight: usize) -> ProcessingOrder {
        ProcessingOrder::Unordered {
            max_in_flight: NonZeroUsize::new(max_in_flight).unwrap_or(NonZeroUsize::MIN),
        }
    }

    /// How many messages of a partition the application may hold at once;
    /// `None` for [`ProcessingOrder::Partition`], which does not count.
    pub fn max_in_flight(&self) -> Option<usize> {
        match self {
            ProcessingOrder::Partition => None,
            ProcessingOrder::Key { max_in_flight }
            | ProcessingOrder::Unordered { max_in_flight } => Some(max_in_flight.get()),
        }
    }
}

/// Which records of transactional producers a member hands out (the Java
/// consumer's `isolation.level`). Records written outside transactions are
/// handed out either way; transaction markers never are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// `read_committed`: records of committed transactions, none of aborted
    /// ones, and nothing at or past a partition's last stable offset (the
    /// first offset of a transaction still open), so that a partition
    /// waits for its open transactions to end. The default.
    #[default]
    ReadCommitted,
    /// `read_uncommitted`: every record up to the high watermark, those of
    /// open and aborted transactions included.
    ReadUncommitted,
}

impl KafkaConfig {
    /// Defaults for brokers at `bootstrap` (`host:port`, comma separated).
    pub fn new(bootstrap: &str) -> KafkaConfig {
        KafkaConfig {
            bootstrap: bootstrap
                .split(',')
                .map(|b| b.trim().to_owned())
                .filter(|b| !b.is_empty())
                .collect(),
            fetch_max_bytes: 1 << 20,
            fetch_max_wait: Duration::from_millis(250),
            buffered_batches: 2,
            max_buffered_bytes: 64 << 20,
            max_messages_in_a_row: 64,
            metadata_refresh: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            client_id: "tenure".to_owned(),
            security: KafkaSecurity::new(),
            isolation_level: IsolationLevel::ReadCommitted,
            max_processing_stall: Some(Duration::from_secs(300)),
            order: ProcessingOrder::Partition,
            topic_order: BTreeMap::new(),
            dead_letters: None,
        }
    }

    /// The order `topic`'s messages are handed out in: its entry in
    /// [`KafkaConfig::topic_order`], else [`KafkaConfig::order`].
    pub fn order_of(&self, topic: &str) -> ProcessingOrder {
        self.topic_order.get(topic).copied().unwrap_or(self.order)
    }
}
