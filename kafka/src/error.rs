//! What can go wrong with Kafka.

use std::sync::Arc;

use tenure_core::{Offset, TopicPartition};

/// The Kafka client's error, shared: a [`KafkaError`] is cloned onto every
/// stream that reports it. It is the [`source`](std::error::Error::source)
/// of the variants that carry one, and downcasts as itself:
/// `error.source()?.downcast_ref::<ClientError>()` gives the client's
/// error (an `rskafka::client::error::Error`, behind the `Arc`).
pub type ClientError = Arc<rskafka::client::error::Error>;

/// What went wrong talking to Kafka.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaError {
    /// No bootstrap broker was given.
    #[error("no Kafka bootstrap broker given")]
    NoBootstrap,
    /// The security settings cannot be used (a trust store with no CA,
    /// a certificate file with none in it, say).
    #[error("Kafka security settings: {0}")]
    Config(String),
    /// A security setting names something that cannot be used: a file
    /// that cannot be read, PEM that does not parse, a key or certificate
    /// TLS refuses. The cause is the error's source.
    #[error("Kafka security settings: {what}: {source}")]
    InvalidSetting {
        /// The setting, and what is wrong with it.
        what: String,
        /// Why: the reader's, parser's or TLS library's own error.
        #[source]
        source: tenure_core::ClientError,
    },
    /// The brokers refused this member's SASL credentials, or their TLS
    /// certificate is not trusted.
    #[error("Kafka at {bootstrap}: {detail}")]
    Refused {
        /// The bootstrap brokers.
        bootstrap: String,
        /// What was refused, and what to check.
        detail: String,
        /// The client's error that said so.
        #[source]
        source: Option<ClientError>,
    },
    /// The brokers did not answer.
    #[error("Kafka at {bootstrap} does not answer: {detail}")]
    Unreachable {
        /// The bootstrap brokers.
        bootstrap: String,
        /// What the client said (with its causes), or how long it stayed
        /// silent.
        detail: String,
        /// The client's error; `None` when it gave none (it did not answer
        /// in time).
        #[source]
        source: Option<ClientError>,
    },
    /// A subscribed topic does not exist (yet): it is waited for, and
    /// assigned once it appears. Reported when the member first finds it
    /// missing, and again each time it goes missing after it existed.
    #[error("topic {topic:?} does not exist in Kafka at {bootstrap}; waiting for it")]
    UnknownTopic {
        /// The topic.
        topic: String,
        /// The bootstrap brokers.
        bootstrap: String,
    },
    /// A message could not be produced to the dead-letter topic; it is
    /// tried again, the message held, while its claim holds.
    #[error("dead letter of {partition} at offset {offset} not produced to {topic:?}: {source}")]
    DeadLetter {
        /// The message's partition.
        partition: TopicPartition,
        /// The message's offset.
        offset: Offset,
        /// The dead-letter topic.
        topic: String,
        /// What the client said.
        #[source]
        source: ClientError,
    },
    /// A fetch or offset lookup failed; the fetcher retries.
    #[error("fetching {partition} failed: {source}")]
    Fetch {
        /// The partition.
        partition: TopicPartition,
        /// What the client said.
        #[source]
        source: ClientError,
    },
    /// The partition holds record batches compressed with a codec this
    /// build cannot read. Fetching it stops (the claim stays, its offset
    /// does not move) until the member runs with the codec built in (the
    /// Cargo features `compression-lz4` and `compression-zstd`, on by
    /// default).
    #[error("{partition} holds records compressed with {codec}, which this build cannot read; build tenure with the Cargo feature `compression-{codec}`")]
    Codec {
        /// The partition.
        partition: TopicPartition,
        /// The codec, as the client names it.
        codec: String,
    },
    /// The position asked for is no longer (or not yet) in the log; the
    /// fetch went on from the position the initial-offset policy names.
    #[error("offset {offset} of {partition} is out of range; reset to {reset}")]
    OffsetReset {
        /// The partition.
        partition: TopicPartition,
        /// The offset that was out of range.
        offset: Offset,
        /// Where fetching went on.
        reset: Offset,
    },
    /// Looking up an offset of a partition (its log's bounds, the offset
    /// of a time) failed or took too long.
    #[error("looking up offsets of {partition} failed: {detail}")]
    Lookup {
        /// The partition.
        partition: TopicPartition,
        /// What the client said, or how long it stayed silent.
        detail: String,
        /// The client's error; `None` when it gave none (it did not answer
        /// in time).
        #[source]
        source: Option<ClientError>,
    },
    /// With the initial-offset policy `InitialOffset::None`: the partition
    /// has no committed offset (and the application gave none), so it is
    /// not fetched until the application says where to start (a seek).
    /// The claim stays.
    #[error("{partition} has no committed offset and the initial-offset policy is none; seek it to start")]
    NoOffset {
        /// The partition.
        partition: TopicPartition,
    },
    /// With the initial-offset policy `InitialOffset::None`: the position
    /// is no longer (or not yet) in the log, and nothing says where to go
    /// instead; fetching stops until the application seeks. The claim
    /// stays.
    #[error("offset {offset} of {partition} is out of range and the initial-offset policy is none; seek it to go on")]
    OutOfRange {
        /// The partition.
        partition: TopicPartition,
        /// The offset that was out of range.
        offset: Offset,
    },
}

impl KafkaError {
    /// `what` is wrong with a security setting, because of `source`.
    #[cfg(feature = "tls")]
    pub(crate) fn invalid_setting(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> KafkaError {
        KafkaError::InvalidSetting {
            what: what.into(),
            source: tenure_core::ClientError::new(source),
        }
    }

    /// Whether the problem may clear by itself while the member goes on (a
    /// broker that does not answer, a failed fetch, which is retried, a
    /// topic not created yet, which is waited for); `false` for what needs
    /// someone to act (no broker given) or is done with (an offset reset).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            KafkaError::Unreachable { .. }
                | KafkaError::Fetch { .. }
                | KafkaError::UnknownTopic { .. }
                | KafkaError::DeadLetter { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failed_fetch_keeps_the_clients_error_as_its_source() {
        let client = rskafka::client::error::Error::InvalidResponse("no partition".to_owned());
        let error = KafkaError::Fetch {
            partition: TopicPartition::new("t", 3),
            source: Arc::new(client),
        };
        assert!(error.is_transient());
        assert_eq!(
            error.to_string(),
            "fetching t/3 failed: Invalid response: no partition"
        );
        let source = error.source().expect("a source");
        let client = source
            .downcast_ref::<ClientError>()
            .expect("the client's error");
        assert!(matches!(
            **client,
            rskafka::client::error::Error::InvalidResponse(_)
        ));

        let silent = KafkaError::Unreachable {
            bootstrap: "b:9092".to_owned(),
            detail: "no answer within 13s".to_owned(),
            source: None,
        };
        assert!(silent.is_transient());
        assert!(silent.source().is_none());
    }
}
