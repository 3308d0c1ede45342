//! A complete consumer coordinated through ZooKeeper, against the servers
//! of `scripts/services` (start them with `eval "$(scripts/services start)"`,
//! which sets `TENURE_ZOOKEEPER` and `TENURE_KAFKA`).
//!
//! ```text
//! cargo run --example zookeeper_consumer -- --topic orders --group billing
//! ```
//!
//! It consumes until Ctrl-C or SIGTERM (or `--seconds N`), then leaves the group
//! cleanly: drains, commits, releases its partitions.

use std::process::ExitCode;

use tenure::zookeeper::ZooKeeperBackend;

#[path = "common/consumer.rs"]
mod consumer;

async fn run() -> Result<(), String> {
    let args = consumer::parse("zookeeper_consumer")?;
    let config = consumer::config(&args)?;
    let store = ZooKeeperBackend::new(consumer::env("TENURE_ZOOKEEPER")?);
    consumer::consume(args, config, store).await
}

#[tokio::main]
async fn main() -> ExitCode {
    consumer::exit_code("zookeeper_consumer", run().await)
}
