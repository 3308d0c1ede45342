//! A complete consumer coordinated through etcd, against the servers
//! of `scripts/services` (start them with `eval "$(scripts/services start)"`,
//! which sets `TENURE_ETCD` and `TENURE_KAFKA`).
//!
//! ```text
//! cargo run --features etcd --example etcd_consumer -- --topic orders --group billing
//! ```
//!
//! It consumes until Ctrl-C or SIGTERM (or `--seconds N`), then leaves the group
//! cleanly: drains, commits, releases its partitions.

use std::process::ExitCode;

use tenure::etcd::EtcdBackend;

#[path = "common/consumer.rs"]
mod consumer;

async fn run() -> Result<(), String> {
    let args = consumer::parse("etcd_consumer")?;
    let config = consumer::config(&args)?;
    let store = EtcdBackend::new(consumer::env("TENURE_ETCD")?);
    consumer::consume(args, config, store).await
}

#[tokio::main]
async fn main() -> ExitCode {
    consumer::exit_code("etcd_consumer", run().await)
}
