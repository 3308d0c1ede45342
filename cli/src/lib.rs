//! tenure-cli: the `tenure` command — who is in a group, who owns which
//! partition, how far behind each partition is, moving its committed
//! offsets (planned by default, written with `--execute`), and deleting
//! them or the group — for groups in ZooKeeper or etcd, with Kafka for the
//! log offsets. The binary is [`main`]; the library behind it is
//! `tenure-admin` (`tenure::admin`).
//!
//! ```text
//! tenure --zookeeper 127.0.0.1:2181 groups
//! tenure --zookeeper 127.0.0.1:2181 --bootstrap 127.0.0.1:9092 describe orders
//! tenure --etcd http://127.0.0.1:2379 --bootstrap 127.0.0.1:9092 \
//!     reset-offsets orders --topic payments --to 2026-11-30T12:00:00Z
//! tenure --etcd http://127.0.0.1:2379 --bootstrap 127.0.0.1:9092 \
//!     reset-offsets orders --topic payments:0,2 --shift-by -100 --execute
//! tenure --zookeeper 127.0.0.1:2181 delete-offsets orders --topic retired
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

#[cfg(not(any(feature = "zookeeper", feature = "etcd")))]
compile_error!("the tenure command needs a store: enable the `zookeeper` or the `etcd` feature");

mod csv;
mod parse;
mod render;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgGroup, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use tenure_admin::{
    self as admin, AdminError, GroupAdmin, PartitionSelection, ResetPlan, ResetTarget,
    TopicPartitions,
};
use tenure_tokio::kafka::{self, KafkaConfig};

/// The key prefix of tenure's groups in etcd unless `--etcd-prefix` says
/// otherwise (the members' default).
const DEFAULT_ETCD_PREFIX: &str = "/tenure";

#[derive(Parser, Debug)]
#[command(
    name = "tenure",
    version,
    about = "Inspect tenure consumer groups in ZooKeeper or etcd, move their offsets, delete them",
    after_help = "Every connection flag may also come from the environment variable named \
                  beside it. Exit status: 0 done, 1 failed or refused (or corrupt records \
                  found), 2 bad usage."
)]
struct Cli {
    #[command(flatten)]
    connection: Connection,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct Connection {
    /// The ZooKeeper ensemble holding the groups
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER",
        value_name = "HOST:PORT[,...][/CHROOT]"
    )]
    zookeeper: Option<String>,
    /// ZooKeeper digest credentials, for groups whose members authenticate
    /// (their znodes are under a digest ACL)
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_DIGEST",
        hide_env_values = true,
        value_name = "USER:PASSWORD"
    )]
    zookeeper_digest: Option<String>,
    /// The CA certificate (PEM) that signed the ZooKeeper servers'
    /// certificates: speaks TLS (the address names their secureClientPort)
    #[arg(long, global = true, env = "TENURE_ZOOKEEPER_CA", value_name = "FILE")]
    zookeeper_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to ZooKeeper, with --zookeeper-key
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_CERT",
        value_name = "FILE",
        requires_all = ["zookeeper_key", "zookeeper_ca"]
    )]
    zookeeper_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_ZOOKEEPER_KEY",
        value_name = "FILE",
        requires = "zookeeper_cert"
    )]
    zookeeper_key: Option<std::path::PathBuf>,
    /// The etcd cluster holding the groups
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD",
        value_name = "http://HOST:PORT[,...]"
    )]
    etcd: Option<String>,
    /// The etcd user, for a cluster with auth enabled
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_USER",
        value_name = "USER",
        requires = "etcd_password"
    )]
    etcd_user: Option<String>,
    /// The etcd user's password
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        requires = "etcd_user"
    )]
    etcd_password: Option<String>,
    /// The CA certificate (PEM) that signed the etcd servers' certificates:
    /// speaks TLS to https:// endpoints
    #[arg(long, global = true, env = "TENURE_ETCD_CA", value_name = "FILE")]
    etcd_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to etcd, with --etcd-key
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_CERT",
        value_name = "FILE",
        requires = "etcd_key"
    )]
    etcd_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD_KEY",
        value_name = "FILE",
        requires = "etcd_cert"
    )]
    etcd_key: Option<std::path::PathBuf>,
    /// The key prefix of the groups in etcd
    #[arg(long, global = true, env = "TENURE_ETCD_PREFIX", default_value = DEFAULT_ETCD_PREFIX)]
    etcd_prefix: String,
    /// Kafka's bootstrap brokers: log offsets and lag for describe; needed by reset-offsets
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA",
        value_name = "HOST:PORT[,...]"
    )]
    bootstrap: Option<String>,
    /// The client id Kafka's brokers see
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_CLIENT_ID",
        default_value = "tenure"
    )]
    kafka_client_id: String,
    /// The SASL mechanism of the Kafka listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_SASL_MECHANISM",
        value_name = "MECHANISM",
        requires = "kafka_user"
    )]
    kafka_sasl_mechanism: Option<String>,
    /// The SASL user for Kafka
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_USER",
        value_name = "USER",
        requires = "kafka_password"
    )]
    kafka_user: Option<String>,
    /// The SASL user's password
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD",
        requires = "kafka_user"
    )]
    kafka_password: Option<String>,
    /// The CA certificate (PEM) that signed the brokers' certificates: speaks TLS
    #[arg(long, global = true, env = "TENURE_KAFKA_CA", value_name = "FILE")]
    kafka_ca: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present to the brokers, with --kafka-key
    #[arg(long, global = true, env = "TENURE_KAFKA_CERT", value_name = "FILE", requires_all = ["kafka_key", "kafka_ca"])]
    kafka_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM)
    #[arg(
        long,
        global = true,
        env = "TENURE_KAFKA_KEY",
        value_name = "FILE",
        requires = "kafka_cert"
    )]
    kafka_key: Option<std::path::PathBuf>,
    /// How long to wait for each server, in seconds
    #[arg(long, global = true, default_value_t = 10, value_name = "SECS")]
    timeout: u64,
}

impl Connection {
    /// How long to wait for each server.
    fn wait(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }
}

#[derive(Subcommand, Debug)]
enum Command {
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
        #[arg(long)]
        json: bool,
    },
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
struct ResetArgs {
    /// The group
    group: String,
    /// A topic whose offsets move: all its partitions, or those listed
    /// (TOPIC:0,2); repeat for several topics
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,...]",
        value_parser = parse::topic_partitions,
        required_unless_present_any = ["all_topics", "from_file"],
        conflicts_with_all = ["all_topics", "from_file"]
    )]
    topics: Vec<TopicPartitions>,
    /// Every topic the group has offsets or owners for, or its members
    /// subscribe to by name
    #[arg(long, conflicts_with = "from_file")]
    all_topics: bool,
    /// Where to: earliest, latest, an offset, or a time (RFC 3339 such as
    /// 2026-11-30T12:00:00Z, or @MILLISECONDS since the epoch)
    #[arg(long, value_name = "earliest|latest|OFFSET|TIME", value_parser = parse::reset_target)]
    to: Option<ResetTarget>,
    /// Move each committed offset by N messages (negative: back), clamped to
    /// the log
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
    /// To the first message at or after this long ago: ISO 8601 (PT1H30M,
    /// P1DT12H) or 1h30m
    #[arg(long, value_name = "DURATION", value_parser = parse::parse_duration)]
    by_duration: Option<Duration>,
    /// To the committed offsets as they are (the log end where there is
    /// none): a plan to --export
    #[arg(long)]
    to_current: bool,
    /// The offsets to set, from a CSV file of topic,partition,offset lines
    /// as --export prints them (- for standard input)
    #[arg(long, value_name = "FILE")]
    from_file: Option<PathBuf>,
    /// Write the plan; without it the plan is only printed
    #[arg(long)]
    execute: bool,
    /// Only print the plan (the default; accepted to say so)
    #[arg(long, conflicts_with = "execute")]
    dry_run: bool,
    /// Print the plan as CSV (topic,partition,offset lines), for --from-file
    #[arg(long, conflicts_with = "json")]
    export: bool,
    /// Write even while members are live (their next commits may overwrite
    /// the new offsets), or for a group with no records yet
    #[arg(long)]
    force: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// Which store the flags and environment name.
enum Store {
    ZooKeeper(String),
    Etcd(String),
}

/// Picks the store: a flag wins over the environment; two flags, or two
/// variables and no flag, are ambiguous.
fn pick_store(matches: &ArgMatches, connection: &Connection) -> Result<Store, String> {
    let from_flag = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    match (&connection.zookeeper, &connection.etcd) {
        (Some(zookeeper), None) => Ok(Store::ZooKeeper(zookeeper.clone())),
        (None, Some(etcd)) => Ok(Store::Etcd(etcd.clone())),
        (Some(zookeeper), Some(etcd)) => match (from_flag("zookeeper"), from_flag("etcd")) {
            (true, false) => Ok(Store::ZooKeeper(zookeeper.clone())),
            (false, true) => Ok(Store::Etcd(etcd.clone())),
            (true, true) => Err("give one of --zookeeper and --etcd, not both".to_owned()),
            (false, false) => Err(
                "TENURE_ZOOKEEPER and TENURE_ETCD are both set: pass --zookeeper or --etcd to pick one"
                    .to_owned(),
            ),
        },
        (None, None) => Err(
            "no store given: pass --zookeeper HOST:PORT[/CHROOT] or --etcd http://HOST:PORT \
             (or set TENURE_ZOOKEEPER or TENURE_ETCD)"
                .to_owned(),
        ),
    }
}

async fn connect_store(
    store: Store,
    connection: &Connection,
) -> Result<Box<dyn GroupAdmin>, String> {
    match store {
        #[cfg(feature = "zookeeper")]
        Store::ZooKeeper(address) => {
            let admin = tenure_zookeeper::ZooKeeperAdmin::connect_with(
                &address,
                zookeeper_security(connection)?,
                connection.wait(),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Box::new(admin))
        }
        #[cfg(not(feature = "zookeeper"))]
        Store::ZooKeeper(address) => Err(format!(
            "cannot use ZooKeeper at {address}: this tenure was built without the Cargo feature \
             `zookeeper`"
        )),
        #[cfg(feature = "etcd")]
        Store::Etcd(endpoints) => {
            let admin = tenure_etcd::EtcdAdmin::connect_with(
                &endpoints,
                &connection.etcd_prefix,
                etcd_security(connection)?,
                connection.wait(),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Box::new(admin))
        }
        #[cfg(not(feature = "etcd"))]
        Store::Etcd(endpoints) => Err(format!(
            "cannot use etcd at {endpoints}: this tenure was built without the Cargo feature \
             `etcd` (cargo install --path cli --features etcd)"
        )),
    }
}

/// The ZooKeeper credentials and TLS settings the flags (or variables)
/// give.
#[cfg(feature = "zookeeper")]
fn zookeeper_security(
    connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, String> {
    let mut security = tenure_zookeeper::ZooKeeperSecurity::new();
    if let Some(credentials) = &connection.zookeeper_digest {
        let (user, password) = credentials
            .split_once(':')
            .ok_or("--zookeeper-digest takes USER:PASSWORD (TENURE_ZOOKEEPER_DIGEST too)")?;
        let digest = tenure_zookeeper::Digest::new(user, password).map_err(|e| e.to_string())?;
        security = security.digest(digest);
    }
    match &connection.zookeeper_ca {
        Some(ca) => zookeeper_tls(security, ca, connection),
        None => Ok(security),
    }
}

#[cfg(feature = "zookeeper-tls")]
fn zookeeper_tls(
    security: tenure_zookeeper::ZooKeeperSecurity,
    ca: &std::path::Path,
    connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, String> {
    let mut security = security.ca_file(ca).map_err(|e| e.to_string())?;
    // Each of the two requires the other (clap says so on bad usage).
    if let (Some(cert), Some(key)) = (&connection.zookeeper_cert, &connection.zookeeper_key) {
        security = security
            .client_identity_files(cert, key)
            .map_err(|e| e.to_string())?;
    }
    Ok(security)
}

#[cfg(all(feature = "zookeeper", not(feature = "zookeeper-tls")))]
fn zookeeper_tls(
    _security: tenure_zookeeper::ZooKeeperSecurity,
    ca: &std::path::Path,
    _connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, String> {
    Err(format!(
        "--zookeeper-ca {}: this tenure was built without TLS to ZooKeeper (the Cargo feature \
         `zookeeper-tls`)",
        ca.display()
    ))
}

/// The etcd credentials and TLS settings the flags (or variables) give.
#[cfg(feature = "etcd")]
fn etcd_security(connection: &Connection) -> Result<tenure_etcd::EtcdSecurity, String> {
    let mut security = tenure_etcd::EtcdSecurity::new();
    // Each of the two requires the other (clap says so on bad usage).
    if let (Some(user), Some(password)) = (&connection.etcd_user, &connection.etcd_password) {
        security = security.user(user, password);
    }
    if let Some(ca) = &connection.etcd_ca {
        security = security.ca_file(ca).map_err(|e| e.to_string())?;
    }
    if let (Some(cert), Some(key)) = (&connection.etcd_cert, &connection.etcd_key) {
        security = security
            .client_identity_files(cert, key)
            .map_err(|e| e.to_string())?;
    }
    Ok(security)
}

/// The Kafka SASL and TLS settings the flags (or variables) give.
fn kafka_security(connection: &Connection) -> Result<kafka::KafkaSecurity, String> {
    let mut security = kafka::KafkaSecurity::new();
    if let (Some(user), Some(password)) = (&connection.kafka_user, &connection.kafka_password) {
        let name = connection
            .kafka_sasl_mechanism
            .as_deref()
            .unwrap_or("SCRAM-SHA-512");
        let mechanism = kafka::SaslMechanism::from_name(name).ok_or(format!(
            "--kafka-sasl-mechanism {name:?}: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        ))?;
        security = security.sasl(mechanism, user, password);
    }
    if let Some(ca) = &connection.kafka_ca {
        security = kafka_tls(security, ca, connection)?;
    }
    Ok(security)
}

#[cfg(feature = "kafka-tls")]
fn kafka_tls(
    security: kafka::KafkaSecurity,
    ca: &std::path::Path,
    connection: &Connection,
) -> Result<kafka::KafkaSecurity, String> {
    let client = match (&connection.kafka_cert, &connection.kafka_key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        _ => None,
    };
    security.tls(ca, client).map_err(|e| e.to_string())
}

#[cfg(not(feature = "kafka-tls"))]
fn kafka_tls(
    _security: kafka::KafkaSecurity,
    ca: &std::path::Path,
    _connection: &Connection,
) -> Result<kafka::KafkaSecurity, String> {
    Err(format!(
        "--kafka-ca {}: this tenure was built without TLS to Kafka (the Cargo feature `kafka-tls`)",
        ca.display()
    ))
}

async fn connect_kafka(
    connection: &Connection,
) -> Result<Option<std::sync::Arc<admin::KafkaClient>>, String> {
    let Some(bootstrap) = &connection.bootstrap else {
        return Ok(None);
    };
    let mut config = KafkaConfig::new(bootstrap);
    config.connect_timeout = connection.wait();
    config.client_id = connection.kafka_client_id.clone();
    config.security = kafka_security(connection)?;
    kafka::connect(&config)
        .await
        .map(Some)
        .map_err(|e| e.to_string())
}

async fn run(cli: Cli, matches: &ArgMatches) -> Result<ExitCode, String> {
    let store = pick_store(matches, &cli.connection)?;
    let admin = connect_store(store, &cli.connection).await?;
    match cli.command {
        Command::Groups { json } => {
            let groups = admin.groups().await.map_err(|e| e.to_string())?;
            print!("{}", render::groups(&groups, json));
            Ok(ExitCode::SUCCESS)
        }
        Command::Describe { group, json } => {
            let client = connect_kafka(&cli.connection).await?;
            let description = admin::describe(admin.as_ref(), &group, client.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            print!(
                "{}",
                render::description(&description, json, client.is_some())
            );
            for record in &description.corrupt {
                eprintln!("warning: {record}");
            }
            Ok(if description.corrupt.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::ResetOffsets(args) => reset_offsets(admin.as_ref(), &cli.connection, args).await,
        Command::DeleteOffsets {
            group,
            topics,
            dry_run,
            force,
            json,
        } => {
            let plan = admin::plan_delete_offsets(admin.as_ref(), &group, &topics)
                .await
                .map_err(|e| e.to_string())?;
            for absent in &plan.absent {
                eprintln!("note: group {group} has no committed offset for {absent}: skipped");
            }
            if plan.offsets.is_empty() {
                return Err(format!(
                    "nothing to delete: group {group} has no committed offsets for the topics \
                     given (`tenure describe {group}` shows them)"
                ));
            }
            if dry_run {
                print!("{}", render::offset_deletion(&plan, json, false));
                note_live_members(&plan.live_members, force, "without --dry-run");
                return Ok(ExitCode::SUCCESS);
            }
            match admin::apply_delete_offsets(admin.as_ref(), &plan, force).await {
                Ok(()) => {
                    print!("{}", render::offset_deletion(&plan, json, true));
                    Ok(ExitCode::SUCCESS)
                }
                Err(error @ AdminError::GroupActive { .. }) => {
                    eprint!("{}", render::offset_deletion(&plan, false, false));
                    Err(error.to_string())
                }
                Err(error) => Err(error.to_string()),
            }
        }
        Command::Delete {
            group,
            dry_run,
            force,
            json,
        } => {
            if dry_run {
                let records = admin.records(&group).await.map_err(|e| e.to_string())?;
                print!("{}", render::group_records(&group, &records, json));
                let live: Vec<String> = records.members.iter().map(|m| m.id.clone()).collect();
                note_live_members(&live, force, "without --dry-run");
                return Ok(ExitCode::SUCCESS);
            }
            let deletion = admin::delete_group(admin.as_ref(), &group, force)
                .await
                .map_err(|e| e.to_string())?;
            print!("{}", render::group_deletion(&group, &deletion, json));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Tells, on stderr, that the write a plan shows would be refused for
/// `live` members unless forced; `how` names what would write.
fn note_live_members(live: &[String], force: bool, how: &str) {
    if !live.is_empty() && !force {
        eprintln!(
            "note: the group has live members ({}); {how} this is refused unless --force",
            live.join(", ")
        );
    }
}

/// `tenure reset-offsets`: plans, prints, and with `--execute` writes.
async fn reset_offsets(
    admin: &dyn GroupAdmin,
    connection: &Connection,
    args: ResetArgs,
) -> Result<ExitCode, String> {
    let Some(client) = connect_kafka(connection).await? else {
        return Err(
            "reset-offsets needs Kafka: pass --bootstrap HOST:PORT (or set TENURE_KAFKA)"
                .to_owned(),
        );
    };
    let group = args.group.as_str();
    let plan = if let Some(path) = &args.from_file {
        let text = read_file(path)?;
        let offsets =
            csv::parse_offsets_csv(&text, group).map_err(|e| format!("{}: {e}", path.display()))?;
        match admin::plan_listed(admin, &client, group, &offsets, args.force).await {
            // A partition Kafka does not have is named with its line.
            Err(
                error @ (AdminError::UnknownTopic { .. } | AdminError::UnknownPartition { .. }),
            ) => {
                let line = match &error {
                    AdminError::UnknownPartition {
                        topic, partition, ..
                    } => line_of(&text, group, topic, Some(*partition)),
                    AdminError::UnknownTopic { topic } => line_of(&text, group, topic, None),
                    _ => None,
                };
                let at = line.map_or_else(String::new, |line| format!("line {line}: "));
                return Err(format!("{}: {at}{error}", path.display()));
            }
            other => other,
        }
    } else {
        let target = if let Some(to) = args.to {
            to
        } else if let Some(by) = args.shift_by {
            ResetTarget::ShiftBy(by)
        } else if let Some(duration) = args.by_duration {
            ResetTarget::Duration(duration)
        } else {
            // clap requires one target: --to-current is the one left.
            ResetTarget::Current
        };
        let selection = if args.all_topics {
            PartitionSelection::AllTopics
        } else {
            PartitionSelection::Topics(args.topics.clone())
        };
        admin::plan_reset(admin, &client, group, &selection, target, args.force).await
    }
    .map_err(|error| match error {
        AdminError::UnknownGroup { .. } => {
            format!("{error}; to seed the offsets of a new group, pass --force")
        }
        error => error.to_string(),
    })?;
    note_plan(&plan);
    if plan.changes.is_empty() {
        return Err(format!(
            "nothing to reset: none of the topics of group {group} exists in Kafka"
        ));
    }
    let output = |applied| {
        if args.export {
            csv::offsets_csv(&plan)
        } else {
            render::plan(&plan, args.json, applied)
        }
    };
    if !args.execute {
        print!("{}", output(false));
        note_live_members(&plan.live_members, args.force, "with --execute");
        return Ok(ExitCode::SUCCESS);
    }
    match admin::apply_reset(admin, &plan, args.force).await {
        Ok(()) => {
            print!("{}", output(true));
            Ok(ExitCode::SUCCESS)
        }
        Err(error @ AdminError::GroupActive { .. }) => {
            eprint!("{}", render::plan(&plan, false, false));
            Err(error.to_string())
        }
        Err(error) => Err(error.to_string()),
    }
}

/// Tells, on stderr, what a plan leaves out or bends: topics Kafka does not
/// know, offsets clamped to the log.
fn note_plan(plan: &ResetPlan) {
    for topic in &plan.missing_topics {
        eprintln!("note: topic {topic} does not exist in Kafka: its offsets are left as they are");
    }
    for change in &plan.changes {
        if let Some(asked) = change.clamped_from {
            eprintln!(
                "note: {}:{}: offset {asked} is outside the log, {} is used",
                change.partition.topic, change.partition.partition, change.new
            );
        }
    }
}

/// Reads a whole file (`-`: standard input), naming it in its error.
fn read_file(path: &std::path::Path) -> Result<String, String> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The number of the first line of an offsets file that names `topic` (and
/// `partition`, if given).
fn line_of(text: &str, group: &str, topic: &str, partition: Option<u32>) -> Option<usize> {
    text.lines().enumerate().find_map(|(index, line)| {
        let offsets = csv::parse_offsets_csv(line, group).ok()?;
        offsets
            .keys()
            .any(|p| &*p.topic == topic && partition.is_none_or(|n| p.partition == n))
            .then_some(index + 1)
    })
}

/// Runs the command on this process's arguments and environment (the
/// `TENURE_*` variables), printing to stdout and stderr, and returns its
/// exit status: 0 done, 1 failed or refused, 2 bad usage (clap exits by
/// itself on bad usage, `--help` and `--version`).
pub fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli, &matches)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
