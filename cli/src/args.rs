//! The command line: the connection flags every subcommand takes, and the
//! subcommands with theirs. Values are read by [`crate::parse`], so a bad
//! one is bad usage (exit status 2) before anything connects.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use tenure_admin::{ResetTarget, TopicPartitions};

use crate::parse;

/// The key prefix of tenure's groups in etcd unless `--etcd-prefix` says
/// otherwise (the members' default).
pub const DEFAULT_ETCD_PREFIX: &str = "/tenure";

// The whole command line. (Plain comments on these types: clap would take
// doc comments for help text.)
#[derive(Parser, Debug)]
#[command(
    name = "tenure",
    version,
    about = "Inspect tenure consumer groups in ZooKeeper or etcd, move their offsets, delete them",
    after_help = "Every connection flag may also come from the environment variable named \
                  beside it. Exit status: 0 done, 1 failed or refused (or corrupt records \
                  found), 2 bad usage."
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: Connection,
    #[command(subcommand)]
    pub command: Command,
}

// Where the store and Kafka are, and how to reach them: flags every
// subcommand takes, each also from a `TENURE_*` variable.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// The ZooKeeper ensemble holding the groups
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER",
        value_name = "HOST:PORT[,...][/CHROOT]"
    )]
    pub zookeeper: Option<String>,
    /// ZooKeeper digest credentials, for groups whose members authenticate
    /// (their znodes are under a digest ACL)
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_DIGEST",
        hide_env_values = true,
        value_name = "USER:PASSWORD"
    )]
    pub zookeeper_digest: Option<String>,
    /// The CA certificate (PEM) that signed the ZooKeeper servers'
    /// certificates, or `system` for the system's trust store: speaks TLS
    /// (the address names their secureClientPort)
    #[arg(long, global = true, env = "TENURE_ZOOKEEPER_CA", value_name = "FILE")]
    pub zookeeper_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to ZooKeeper, with --zookeeper-key
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_CERT",
        value_name = "FILE",
        requires_all = ["zookeeper_key", "zookeeper_ca"]
    )]
    pub zookeeper_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_KEY",
        value_name = "FILE",
        requires = "zookeeper_cert"
    )]
    pub zookeeper_key: Option<std::path::PathBuf>,
    /// The etcd cluster holding the groups
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD",
        value_name = "http://HOST:PORT[,...]"
    )]
    pub etcd: Option<String>,
    /// The etcd user, for a cluster with auth enabled
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_USER",
        value_name = "USER",
        requires = "etcd_password"
    )]
    pub etcd_user: Option<String>,
    /// The etcd user's password
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        requires = "etcd_user"
    )]
    pub etcd_password: Option<String>,
    /// The CA certificate (PEM) that signed the etcd servers' certificates,
    /// or `system` for the system's trust store: speaks TLS to https://
    /// endpoints
    #[arg(long, global = true, env = "TENURE_ETCD_CA", value_name = "FILE")]
    pub etcd_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to etcd, with --etcd-key
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_CERT",
        value_name = "FILE",
        requires = "etcd_key"
    )]
    pub etcd_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_KEY",
        value_name = "FILE",
        requires = "etcd_cert"
    )]
    pub etcd_key: Option<std::path::PathBuf>,
    /// The key prefix of the groups in etcd
    #[arg(long, global = true, env = "TENURE_ETCD_PREFIX", default_value = DEFAULT_ETCD_PREFIX)]
    pub etcd_prefix: String,
    /// Kafka's bootstrap brokers: log offsets and lag for describe; needed by reset-offsets
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA",
        value_name = "HOST:PORT[,...]"
    )]
    pub bootstrap: Option<String>,
    /// The client id Kafka's brokers see
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_CLIENT_ID",
        default_value = "tenure"
    )]
    pub kafka_client_id: String,
    /// The SASL mechanism of the Kafka listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_SASL_MECHANISM",
        value_name = "MECHANISM",
        requires = "kafka_user"
    )]
    pub kafka_sasl_mechanism: Option<String>,
    /// The SASL user for Kafka
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_USER",
        value_name = "USER",
        requires = "kafka_password"
    )]
    pub kafka_user: Option<String>,
    /// The SASL user's password
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        requires = "kafka_user"
    )]
    pub kafka_password: Option<String>,
    /// The CA certificate (PEM) that signed the brokers' certificates, or
    /// `system` for the system's trust store: speaks TLS
    #[arg(long, global = true, env = "TENURE_KAFKA_CA", value_name = "FILE")]
    pub kafka_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to the brokers, with --kafka-key
    #[arg(long, global = true, env = "TENURE_KAFKA_CERT", value_name = "FILE", requires_all = ["kafka_key", "kafka_ca"])]
    pub kafka_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_KEY",
        value_name = "FILE",
        requires = "kafka_cert"
    )]
    pub kafka_key: Option<std::path::PathBuf>,
    /// How long to wait for each server, in seconds
    #[arg(long, global = true, default_value_t = 10, value_name = "SECS")]
    pub timeout: u64,
}

impl Connection {
    /// How long to wait for each server.
    pub fn wait(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }
}

// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List the groups in the store
    Groups {
        /// Print JSON instead of one name per line
        #[arg(long)]
        json: bool,
    },
    /// Show a group's members and, per partition, its owner, fencing token,
    /// committed offset, log-end offset and lag
    Describe {
        /// The group
        group: String,
        /// Print JSON instead of tables
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Keep watching: redraw the group in place whenever it changes (and
        /// at every Kafka refresh), with each partition's status, until
        /// interrupted
        #[arg(long)]
        watch: bool,
        /// With --watch: how often log offsets are read from Kafka (10s,
        /// PT10S)
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse::parse_duration, requires = "watch")]
        kafka_interval: Duration,
    },
    /// Watch groups and serve their lag and health over HTTP: Prometheus
    /// metrics (/metrics), a JSON API (/v1/groups), a live page (/) and
    /// /healthz; read-only
    Serve(ServeArgs),
    /// Plan a move of a group's committed offsets and print it; write it with
    /// --execute (refused while the group has live members, unless --force)
    ResetOffsets(ResetArgs),
    /// Delete a group's committed offsets of some topics or partitions
    /// (refused while the group has live members, unless --force)
    DeleteOffsets {
        /// The group
        group: String,
        /// A topic whose offsets go: every partition that has one, or those
        /// listed (TOPIC:0,2); repeat for several topics
        #[arg(long = "topic", value_name = "TOPIC[:P,...]", value_parser = parse::topic_partitions, required = true)]
        topics: Vec<TopicPartitions>,
        /// Print what would be deleted and delete nothing
        #[arg(long)]
        dry_run: bool,
        /// Delete even while members are live (their next commits write
        /// offsets again)
        #[arg(long)]
        force: bool,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Delete a group's records: its offsets and every record no live
    /// session holds (refused while the group has live members, unless
    /// --force)
    Delete {
        /// The group
        group: String,
        /// Print what would be deleted and delete nothing
        #[arg(long)]
        dry_run: bool,
        /// Delete the offsets even while members are live (their
        /// registrations and owner records stay: they go with the members)
        #[arg(long)]
        force: bool,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
    },
}

/// `tenure reset-offsets`: which partitions, where to, and whether to
/// write.
#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["to", "shift_by", "by_duration", "to_current", "from_file"])
))]
pub struct ResetArgs {
    /// The group
    pub group: String,
    /// A topic whose offsets move: all its partitions, or those listed
    /// (TOPIC:0,2); repeat for several topics
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,...]",
        value_parser = parse::topic_partitions,
        required_unless_present_any = ["all_topics", "from_file"],
        conflicts_with_all = ["all_topics", "from_file"]
    )]
    pub topics: Vec<TopicPartitions>,
    /// Every topic the group has offsets or owners for, or its members
    /// subscribe to by name
    #[arg(long, conflicts_with = "from_file")]
    pub all_topics: bool,
    /// Where to: earliest, latest, an offset, or a time (RFC 3339 such as
    /// 2026-11-30T12:00:00Z, or @MILLISECONDS since the epoch)
    #[arg(long, value_name = "earliest|latest|OFFSET|TIME", value_parser = parse::reset_target)]
    pub to: Option<ResetTarget>,
    /// Move each committed offset by N messages (negative: back), clamped to
    /// the log
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub shift_by: Option<i64>,
    /// To the first message at or after this long ago: ISO 8601 (PT1H30M,
    /// P1DT12H) or 1h30m
    #[arg(long, value_name = "DURATION", value_parser = parse::parse_duration)]
    pub by_duration: Option<Duration>,
    /// To the committed offsets as they are (the log end where there is
    /// none): a plan to --export
    #[arg(long)]
    pub to_current: bool,
    /// The offsets to set, from a CSV file of topic,partition,offset lines
    /// as --export prints them (- for standard input)
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<PathBuf>,
    /// Write the plan; without it the plan is only printed
    #[arg(long)]
    pub execute: bool,
    /// Only print the plan (the default; accepted to say so)
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
    /// Print the plan as CSV (topic,partition,offset lines), for --from-file
    #[arg(long, conflicts_with = "json")]
    pub export: bool,
    /// Write even while members are live (their next commits may overwrite
    /// the new offsets), or for a group with no records yet
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let mut all = vec!["tenure", "--zookeeper", "z:1"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
    }

    #[test]
    fn a_reset_takes_exactly_one_target_and_a_selection() {
        let reset = |args: &[&str]| {
            let mut all = vec!["reset-offsets", "g"];
            all.extend_from_slice(args);
            parse(&all)
        };
        assert!(reset(&["--topic", "t", "--to", "earliest"]).is_ok());
        assert!(reset(&["--topic", "t:0,2", "--topic", "u", "--shift-by", "-5"]).is_ok());
        assert!(reset(&["--all-topics", "--by-duration", "PT1H"]).is_ok());
        assert!(reset(&["--all-topics", "--to-current", "--export"]).is_ok());
        assert!(reset(&["--from-file", "plan.csv", "--execute"]).is_ok());
        for bad in [
            &["--topic", "t"][..],
            &["--topic", "t", "--to", "earliest", "--shift-by", "1"],
            &["--to", "earliest"],
            &["--topic", "t", "--all-topics", "--to", "latest"],
            &["--topic", "t", "--from-file", "f"],
            &["--all-topics", "--from-file", "f"],
            &["--topic", "t", "--to", "latest", "--execute", "--dry-run"],
            &["--topic", "t", "--to", "latest", "--export", "--json"],
            &["--topic", "t:x", "--to", "latest"],
            &["--topic", "t", "--by-duration", "1 hour"],
        ] {
            let error = reset(bad).expect_err("refused");
            assert_eq!(error.exit_code(), 2, "{bad:?}: {error}");
        }
        let Ok(Cli {
            command: Command::ResetOffsets(args),
            ..
        }) = reset(&["--topic", "t", "--shift-by", "-5"])
        else {
            panic!("a reset");
        };
        assert_eq!(args.shift_by, Some(-5));
        assert!(!args.execute, "planning is the default");
    }

    #[test]
    fn deletes_parse() {
        assert!(parse(&["delete-offsets", "g", "--topic", "t:1"]).is_ok());
        assert!(
            parse(&["delete-offsets", "g"]).is_err(),
            "a topic is needed"
        );
        assert!(parse(&["delete", "g", "--force"]).is_ok());
    }
}

// `tenure serve`'s own flags, under a heading of their own in its help
// (apart from the connection flags every subcommand takes).
#[derive(Args, Debug)]
#[command(next_help_heading = "Serving")]
pub struct ServeArgs {
    /// A group to watch; repeat for several (default: every group in the
    /// store, picked up as groups appear and disappear)
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Where to listen. Anything beyond loopback needs --token
    #[arg(
        long,
        env = "TENURE_SERVE_LISTEN",
        value_name = "ADDRESS:PORT",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: std::net::SocketAddr,
    /// A secret every request must carry as `Authorization: Bearer TOKEN`
    /// (the page takes it once as `?token=TOKEN` and keeps it in a cookie)
    #[arg(
        long,
        env = "TENURE_SERVE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Serve HTTPS with this certificate chain (PEM), with --tls-key
    #[arg(
        long,
        env = "TENURE_SERVE_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert
    #[arg(
        long,
        env = "TENURE_SERVE_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
    /// How often log offsets are read from Kafka and each partition
    /// sampled (10s, PT10S)
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse::parse_duration)]
    pub kafka_interval: Duration,
    /// How many samples a partition is judged on (a window spans this many
    /// Kafka refreshes)
    #[arg(long, value_name = "SAMPLES", default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub window: u32,
    /// After how long without an owner a partition is flagged (set it to
    /// the members' session timeout)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse::parse_duration)]
    pub unowned_after: Duration,
}
