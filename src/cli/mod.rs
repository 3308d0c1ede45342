//! The `tenure` command (feature `cli`): who is in a group, who owns which
//! partition, how far behind each partition is, and moving its committed
//! offsets — for groups in ZooKeeper or etcd, with Kafka for the log
//! offsets. The binary is [`main`]; the library behind it is
//! [`tenure::tokio::admin`](crate::tokio::admin).
//!
//! ```text
//! tenure --zookeeper 127.0.0.1:2181 groups
//! tenure --zookeeper 127.0.0.1:2181 --bootstrap 127.0.0.1:9092 describe orders
//! tenure --etcd http://127.0.0.1:2379 --bootstrap 127.0.0.1:9092 \
//!     reset-offsets orders --topic payments --to 2026-11-30T12:00:00Z --dry-run
//! ```

#[cfg(not(any(feature = "zookeeper", feature = "etcd")))]
compile_error!("the tenure command needs a store: enable the `zookeeper` or the `etcd` feature");

mod render;

use std::process::ExitCode;
use std::time::Duration;

use crate::tokio::admin::{self, AdminError, GroupAdmin, ResetTarget};
use crate::tokio::kafka::{self, KafkaConfig};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

/// The key prefix of tenure's groups in etcd unless `--etcd-prefix` says
/// otherwise (the members' default).
const DEFAULT_ETCD_PREFIX: &str = "/tenure";

#[derive(Parser, Debug)]
#[command(
    name = "tenure",
    version,
    about = "Inspect tenure consumer groups in ZooKeeper or etcd, and move their offsets",
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
    /// The etcd cluster holding the groups
    #[arg(
        long,
        global = true,
        env = "TENURE_ETCD",
        value_name = "http://HOST:PORT[,...]"
    )]
    etcd: Option<String>,
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
    /// Move a group's committed offsets of one topic (refused while the
    /// group has live members, unless --force)
    ResetOffsets {
        /// The group
        group: String,
        /// The topic whose offsets move (every partition of it)
        #[arg(long)]
        topic: String,
        /// Where to: earliest, latest, an offset, or a time (RFC 3339 such as
        /// 2026-11-30T12:00:00Z, or @MILLISECONDS since the epoch)
        #[arg(long, value_name = "earliest|latest|OFFSET|TIME", value_parser = parse_target)]
        to: ResetTarget,
        /// Print the plan and write nothing
        #[arg(long)]
        dry_run: bool,
        /// Write even while members are live (their next commits may
        /// overwrite the new offsets), or for a group with no records yet
        #[arg(long)]
        force: bool,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
}

fn parse_target(given: &str) -> Result<ResetTarget, String> {
    given
        .parse()
        .map_err(|e: admin::ResetTargetError| e.to_string())
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
            let admin = crate::zookeeper::ZooKeeperAdmin::connect(&address, connection.wait())
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
            let admin = crate::etcd::EtcdAdmin::connect(
                &endpoints,
                &connection.etcd_prefix,
                connection.wait(),
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Box::new(admin))
        }
        #[cfg(not(feature = "etcd"))]
        Store::Etcd(endpoints) => Err(format!(
            "cannot use etcd at {endpoints}: this tenure was built without the Cargo feature \
             `etcd` (cargo install --path . --features cli,etcd)"
        )),
    }
}

async fn connect_kafka(
    connection: &Connection,
) -> Result<Option<std::sync::Arc<admin::KafkaClient>>, String> {
    let Some(bootstrap) = &connection.bootstrap else {
        return Ok(None);
    };
    let mut config = KafkaConfig::new(bootstrap);
    config.connect_timeout = connection.wait();
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
        Command::ResetOffsets {
            group,
            topic,
            to,
            dry_run,
            force,
            json,
        } => {
            let Some(client) = connect_kafka(&cli.connection).await? else {
                return Err(
                    "reset-offsets needs Kafka: pass --bootstrap HOST:PORT (or set TENURE_KAFKA)"
                        .to_owned(),
                );
            };
            let plan = admin::plan_reset(admin.as_ref(), &client, &group, &topic, to, force)
                .await
                .map_err(|e| e.to_string())?;
            if dry_run {
                print!("{}", render::plan(&plan, json, false));
                if !plan.live_members.is_empty() && !force {
                    eprintln!(
                        "note: the group has live members ({}); without --dry-run this is refused unless --force",
                        plan.live_members.join(", ")
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            match admin::apply_reset(admin.as_ref(), &plan, force).await {
                Ok(()) => {
                    print!("{}", render::plan(&plan, json, true));
                    Ok(ExitCode::SUCCESS)
                }
                Err(error @ AdminError::GroupActive { .. }) => {
                    eprint!("{}", render::plan(&plan, false, false));
                    Err(error.to_string())
                }
                Err(error) => Err(error.to_string()),
            }
        }
    }
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
