//! A consumer process for the tests that stop, continue and kill a member
//! with real signals. It joins `--group` on `--store zookeeper|etcd` at
//! `--address` (etcd: under `--prefix`), consumes `--topic` from the Kafka
//! at `--kafka`, and prints one line per message it hands to itself:
//!
//! ```text
//! <wall clock ms> <partition> <offset> <fencing token>
//! ```
//!
//! stamped the moment `next_message` returned, then takes `--delay-ms` to
//! "process" it and acknowledges it. It runs until it is killed.
//!
//! It reads its assignment changes only once a line arrives on its standard
//! input (so that a test can leave them waiting unread), and prints each:
//!
//! ```text
//! <wall clock ms> event <assigned|suspended|resumed|revoking|revoked|lost> <partition> <fencing token>
//! ```
//!
//! With `--pause-after N`, once it has handed out and acknowledged `N`
//! messages it prints
//!
//! ```text
//! <wall clock ms> paused
//! ```
//!
//! and asks for no further message until that line arrives on its standard
//! input. A test that stops the process after `paused` knows that no
//! hand-out was under way when it stopped: the lease check and the stamp
//! of a message cannot fall on either side of the stop.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tenure::core::Config;
use tenure::etcd::EtcdBackend;
use tenure::tokio::{AssignmentEvent, Backend, Events, GroupMember, KafkaConfig};
use tenure::zookeeper::ZooKeeperBackend;
use tokio::sync::watch;

struct Args {
    store: String,
    address: String,
    prefix: String,
    kafka: String,
    group: String,
    topic: String,
    member: String,
    session_ms: u64,
    delay_ms: u64,
    pause_after: Option<u64>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        store: String::new(),
        address: String::new(),
        prefix: "/tenure".to_owned(),
        kafka: String::new(),
        group: String::new(),
        topic: String::new(),
        member: String::new(),
        session_ms: 3000,
        delay_ms: 2,
        pause_after: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} takes a number"))
        };
        match flag.as_str() {
            "--store" => args.store = value,
            "--address" => args.address = value,
            "--prefix" => args.prefix = value,
            "--kafka" => args.kafka = value,
            "--group" => args.group = value,
            "--topic" => args.topic = value,
            "--member" => args.member = value,
            "--session-ms" => args.session_ms = number()?,
            "--delay-ms" => args.delay_ms = number()?,
            "--pause-after" => args.pause_after = Some(number()?),
            other => return Err(format!("unknown flag {other:?}")),
        }
    }
    Ok(args)
}

fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

async fn run() -> Result<(), String> {
    let args = parse()?;
    let backend: Box<dyn Backend> = match args.store.as_str() {
        "zookeeper" => Box::new(ZooKeeperBackend::new(args.address.clone())),
        "etcd" => Box::new(EtcdBackend::new(args.address.clone()).prefix(args.prefix.clone())),
        other => return Err(format!("unknown store {other:?}")),
    };
    let config = Config::new(&args.group, &args.member, [&args.topic])
        .map_err(|e| e.to_string())?
        .with_session_timeout(Duration::from_millis(args.session_ms));
    let (member, streams) = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&args.kafka))
        .join(backend)
        .await
        .map_err(|e| e.to_string())?
        .split();
    let go = go_on_a_line();
    tokio::spawn(print_events(streams.events, go.clone()));
    let mut messages = streams
        .messages
        .ok_or("a member with Kafka hands out messages")?;
    let mut handed_out = 0_u64;
    loop {
        if args.pause_after == Some(handed_out) {
            print(format_args!("{} paused", wall_ms()))?;
            wait_for_go(go.clone()).await?;
        }
        let Some(message) = messages.next().await else {
            break;
        };
        let at = wall_ms();
        print(format_args!(
            "{at} {} {} {}",
            message.partition(),
            message.offset(),
            message.token().0
        ))?;
        tokio::time::sleep(Duration::from_millis(args.delay_ms)).await;
        message.ack();
        handed_out += 1;
    }
    // The messages end with the member: nothing left to close.
    member.kill();
    Ok(())
}

/// Prints one line, at once.
fn print(line: std::fmt::Arguments<'_>) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))
}

/// Turns `true` once a line (or the end) arrives on standard input.
fn go_on_a_line() -> watch::Receiver<bool> {
    let (go_tx, go) = watch::channel(false);
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        // An unreadable standard input lets the process go on too: what
        // it waits for can then never come.
        let _ = std::io::stdin().read_line(&mut line);
        go_tx.send_replace(true);
    });
    go
}

/// Waits until `go` turns `true`.
async fn wait_for_go(mut go: watch::Receiver<bool>) -> Result<(), String> {
    go.wait_for(|go| *go)
        .await
        .map(|_| ())
        .map_err(|_| "stdin: its reader is gone".to_owned())
}

/// Once a line arrives on standard input, prints every assignment change
/// the moment it is handed out.
async fn print_events(mut events: Events, go: watch::Receiver<bool>) -> Result<(), String> {
    wait_for_go(go).await?;
    while let Some(event) = events.next().await {
        let at = wall_ms();
        let (kind, partition, token) = match &event {
            AssignmentEvent::Assigned {
                partition, token, ..
            } => ("assigned", partition, token),
            AssignmentEvent::Suspended {
                partition, token, ..
            } => ("suspended", partition, token),
            AssignmentEvent::Resumed { partition, token } => ("resumed", partition, token),
            AssignmentEvent::Revoking { partition, token } => ("revoking", partition, token),
            AssignmentEvent::Revoked { partition, token } => ("revoked", partition, token),
            AssignmentEvent::Lost { partition, token } => ("lost", partition, token),
            other => return Err(format!("an assignment change it does not know: {other:?}")),
        };
        print(format_args!(
            "{at} event {kind} {} {}",
            partition.partition, token.0
        ))?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("consumer-under-test: {message}");
            ExitCode::FAILURE
        }
    }
}
