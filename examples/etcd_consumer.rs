//! A complete consumer coordinated through etcd, against the servers of
//! `scripts/services` (start them with `eval "$(scripts/services start)"`,
//! which sets `TENURE_ETCD` and `TENURE_KAFKA`).
//!
//! ```text
//! cargo run --features etcd --example etcd_consumer -- --topic orders --group billing
//! ```
//!
//! It consumes until Ctrl-C (or `--seconds N`), then leaves the group
//! cleanly: drains, commits, releases its partitions.

use std::process::ExitCode;
use std::time::Duration;

use tenure::core::Config;
use tenure::etcd::EtcdBackend;
use tenure::tokio::{GroupMember, KafkaConfig};

struct Args {
    topic: String,
    group: String,
    member: String,
    seconds: Option<u64>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        topic: String::new(),
        group: "tenure-example".to_owned(),
        member: format!("member-{}", std::process::id()),
        seconds: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--topic" => args.topic = value,
            "--group" => args.group = value,
            "--member" => args.member = value,
            "--seconds" => {
                args.seconds = Some(value.parse().map_err(|_| "--seconds takes a number")?)
            }
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    if args.topic.is_empty() {
        return Err("usage: etcd_consumer --topic T [--group G] [--member M] [--seconds N]".into());
    }
    Ok(args)
}

async fn run(args: Args) -> Result<(), String> {
    let etcd = std::env::var("TENURE_ETCD")
        .map_err(|_| "TENURE_ETCD is not set: run `eval \"$(scripts/services start)\"`")?;
    let kafka = std::env::var("TENURE_KAFKA")
        .map_err(|_| "TENURE_KAFKA is not set: run `eval \"$(scripts/services start)\"`")?;
    let config =
        Config::new(&args.group, &args.member, [&args.topic]).map_err(|e| e.to_string())?;
    let store = EtcdBackend::new(etcd).session_timeout(config.session_timeout);
    let mut member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka))
        .join(store)
        .await
        .map_err(|e| e.to_string())?;
    println!("{} joined group {}", args.member, args.group);
    let stop = async {
        match args.seconds {
            Some(seconds) => tokio::time::sleep(Duration::from_secs(seconds)).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(stop);
    let mut consumed = 0u64;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            message = member.next_message() => match message {
                Some(message) => {
                    while let Some(problem) = member.try_next_error() {
                        eprintln!("problem: {problem}");
                    }
                    consumed += 1;
                    if consumed % 1000 == 1 {
                        println!("{}/{} @{} (token {})", message.topic, message.partition, message.offset, message.token.0);
                    }
                    message.ack();
                }
                None => break,
            },
        }
    }
    member.close().await.map_err(|e| e.to_string())?;
    println!("consumed {consumed} messages; left the group cleanly");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("etcd_consumer failed: {message}");
            ExitCode::FAILURE
        }
    }
}
