//! The consumer shared by the `zookeeper_consumer` and `etcd_consumer`
//! examples: flags, the consuming loop, a clean leave on Ctrl-C.

use std::time::Duration;

use tenure::core::Config;
use tenure::tokio::{Backend, GroupMember, KafkaConfig};

/// What to consume, from the command line.
pub struct Args {
    pub topic: String,
    pub group: String,
    pub member: String,
    pub seconds: Option<u64>,
}

pub fn parse(example: &str) -> Result<Args, String> {
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
        return Err(format!(
            "usage: {example} --topic T [--group G] [--member M] [--seconds N]"
        ));
    }
    Ok(args)
}

/// The address of a server of `scripts/services`, from its variable.
pub fn env(name: &str) -> Result<String, String> {
    std::env::var(name)
        .map_err(|_| format!("{name} is not set: run `eval \"$(scripts/services start)\"`"))
}

/// The member's config: defaults for `args`.
pub fn config(args: &Args) -> Result<Config, String> {
    Config::new(&args.group, &args.member, [&args.topic]).map_err(|e| e.to_string())
}

/// Consumes until Ctrl-C (or `--seconds`), acknowledging every message,
/// then leaves the group cleanly: drains, commits, releases.
pub async fn consume(args: Args, config: Config, store: impl Backend) -> Result<(), String> {
    let kafka = env("TENURE_KAFKA")?;
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
                        println!(
                            "{}/{} @{} (token {})",
                            message.topic, message.partition, message.offset, message.token.0
                        );
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
