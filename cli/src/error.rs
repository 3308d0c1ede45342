//! Why the command fails: each is printed as `error: …` and exits with
//! status 1 (clap reports bad usage itself, with status 2).

use std::path::PathBuf;

use tenure_admin::AdminError;
use tenure_kafka::KafkaError;
use tenure_tokio::BackendError;

use crate::csv::CsvError;

/// Why the command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// The store or Kafka failed or refused an operation.
    #[error(transparent)]
    Admin(#[from] AdminError),
    /// `--zookeeper` and `--etcd` are both given.
    #[error("give one of --zookeeper and --etcd, not both")]
    TwoStores,
    /// `TENURE_ZOOKEEPER` and `TENURE_ETCD` are both set, and no flag picks
    /// one.
    #[error(
        "TENURE_ZOOKEEPER and TENURE_ETCD are both set: pass --zookeeper or --etcd to pick one"
    )]
    TwoStoreVariables,
    /// No store is named.
    #[error(
        "no store given: pass --zookeeper HOST:PORT[/CHROOT] or --etcd http://HOST:PORT (or set \
         TENURE_ZOOKEEPER or TENURE_ETCD)"
    )]
    NoStore,
    /// What is asked for needs a Cargo feature this build lacks.
    #[cfg(not(all(
        feature = "zookeeper",
        feature = "etcd",
        feature = "zookeeper-tls",
        feature = "kafka-tls"
    )))]
    #[error("{asked}: this tenure was built without {missing}")]
    NotBuilt {
        /// What was asked for (a store, a flag).
        asked: String,
        /// What the build lacks, and how to get it.
        missing: &'static str,
    },
    /// `--zookeeper-digest` is not `USER:PASSWORD`.
    #[cfg(feature = "zookeeper")]
    #[error("--zookeeper-digest takes USER:PASSWORD (TENURE_ZOOKEEPER_DIGEST too)")]
    DigestForm,
    /// A store's credentials or certificates cannot be used.
    #[error(transparent)]
    Settings(#[from] BackendError),
    /// `--kafka-sasl-mechanism` names no mechanism Kafka has.
    #[error("--kafka-sasl-mechanism {0:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")]
    SaslMechanism(String),
    /// Kafka cannot be reached, or its settings cannot be used.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    /// `reset-offsets` without Kafka.
    #[error("reset-offsets needs Kafka: pass --bootstrap HOST:PORT (or set TENURE_KAFKA)")]
    NoKafka,
    /// `tenure serve` was started without Kafka.
    #[error(
        "serve needs Kafka for the log offsets: pass --bootstrap HOST:PORT (or set TENURE_KAFKA)"
    )]
    ServeNoKafka,
    /// `tenure serve` would listen beyond loopback without a token.
    #[error(
        "serve would listen on {listen}, beyond loopback, to anyone: pass --token (or set \
         TENURE_SERVE_TOKEN), or listen on 127.0.0.1"
    )]
    ServeOpen {
        /// The address asked for.
        listen: std::net::SocketAddr,
    },
    /// `tenure serve` cannot listen where asked.
    #[error("cannot listen on {listen}: {source}")]
    Listen {
        /// The address asked for.
        listen: std::net::SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// `tenure serve`'s certificate or key cannot be used.
    #[error("cannot serve TLS with {}: {detail}", path.display())]
    ServeTls {
        /// The certificate or key file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// The HTTP server stopped on an error.
    #[error("the HTTP server failed: {0}")]
    Serve(#[source] std::io::Error),
    /// A reset of a group with no records, not forced.
    #[error("{source}; to seed the offsets of a new group, pass --force")]
    NewGroup {
        /// The store's answer ([`AdminError::UnknownGroup`]).
        source: AdminError,
    },
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file (`-`: standard input).
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An offsets file has a line that cannot be used.
    #[error("{}: {source}", path.display())]
    OffsetsFile {
        /// The file.
        path: PathBuf,
        /// The line, and what is wrong with it.
        source: CsvError,
    },
    /// An offsets file names a topic or partition Kafka does not have.
    #[error(
        "{}: {}{source}",
        path.display(),
        line.map_or_else(String::new, |line| format!("line {line}: "))
    )]
    NotInKafka {
        /// The file.
        path: PathBuf,
        /// The first line that names it.
        line: Option<usize>,
        /// What Kafka lacks.
        source: AdminError,
    },
    /// `delete-offsets` selects no committed offset.
    #[error(
        "nothing to delete: group {group} has no committed offsets for the topics given \
         (`tenure describe {group}` shows them)"
    )]
    NothingToDelete {
        /// The group.
        group: String,
    },
    /// `reset-offsets --all-topics` finds none of the group's topics in
    /// Kafka.
    #[error("nothing to reset: none of the topics of group {group} exists in Kafka")]
    NothingToReset {
        /// The group.
        group: String,
    },
    /// The async runtime does not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}
