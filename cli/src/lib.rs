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

mod args;
mod connect;
mod csv;
mod error;
mod parse;
mod render;
mod run;
mod serve;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::args::Cli;
use crate::error::Failure;

/// The command line the command parses, as clap describes it: its
/// subcommands, flags and the `TENURE_*` variable each flag is also read
/// from (for shell completions, manual pages, or checking an environment).
pub fn command() -> clap::Command {
    Cli::command()
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
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Failure::Runtime)
        .and_then(|runtime| runtime.block_on(run::run(cli, &matches)));
    match outcome {
        Ok(code) => code,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::FAILURE
        }
    }
}
