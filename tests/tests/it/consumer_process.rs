//! The consumer process of the tests that stop, continue, kill or cut off
//! a member as a separate OS process (`consumer-under-test`), and what it
//! prints, parsed line by line: every message and assignment change it
//! handed out, with the moment it did and its fencing token.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;

/// A message the consumer process handed out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HandedOut {
    /// Wall clock, in milliseconds, the moment it was handed out.
    pub(crate) at_ms: u128,
    pub(crate) partition: u32,
    pub(crate) offset: i64,
    pub(crate) token: u64,
}

/// An assignment change the consumer process handed out.
#[derive(Clone, Debug)]
pub(crate) struct Told {
    /// Wall clock, in milliseconds, the moment it was handed out.
    pub(crate) at_ms: u128,
    /// `assigned`, `suspended`, `resumed`, `revoking`, `revoked` or `lost`.
    pub(crate) kind: String,
    pub(crate) partition: u32,
    pub(crate) token: u64,
}

/// What the consumer process prints, as it prints it.
pub(crate) struct Consumer {
    pub(crate) child: Child,
    pub(crate) messages: mpsc::UnboundedReceiver<HandedOut>,
    pub(crate) events: mpsc::UnboundedReceiver<Told>,
    /// One value once it paused after `--pause-after` messages.
    pub(crate) paused: mpsc::UnboundedReceiver<()>,
}

pub(crate) fn wall_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Sends `signal` (`STOP`, `CONT`, `KILL`) to `child`, as an operator's
/// `kill` would.
pub(crate) fn signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {} failed", child.id());
}

/// Starts the consumer process and a thread that parses what it prints.
/// It reads no assignment change before [`read_events`].
pub(crate) fn spawn_consumer(args: &[String]) -> Consumer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_consumer-under-test"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the consumer process");
    let stdout = child.stdout.take().expect("its stdout");
    let (messages_tx, messages) = mpsc::unbounded_channel();
    let (events_tx, events) = mpsc::unbounded_channel();
    let (paused_tx, paused) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let fields: Vec<&str> = line.split_whitespace().collect();
            let sent = match fields.as_slice() {
                [at, partition, offset, token] => (|| {
                    Some(
                        messages_tx
                            .send(HandedOut {
                                at_ms: at.parse().ok()?,
                                partition: partition.parse().ok()?,
                                offset: offset.parse().ok()?,
                                token: token.parse().ok()?,
                            })
                            .is_ok(),
                    )
                })(),
                [at, "event", kind, partition, token] => (|| {
                    Some(
                        events_tx
                            .send(Told {
                                at_ms: at.parse().ok()?,
                                kind: (*kind).to_owned(),
                                partition: partition.parse().ok()?,
                                token: token.parse().ok()?,
                            })
                            .is_ok(),
                    )
                })(),
                [at, "paused"] => at.parse::<u128>().ok().map(|_| paused_tx.send(()).is_ok()),
                _ => None,
            };
            match sent {
                None => panic!("the consumer process printed {line:?}"),
                Some(false) => return,
                Some(true) => {}
            }
        }
    });
    Consumer {
        child,
        messages,
        events,
        paused,
    }
}

/// Lets the consumer process read its assignment changes, and ask for
/// messages again if it paused.
pub(crate) fn read_events(consumer: &mut Consumer) {
    let stdin = consumer.child.stdin.as_mut().expect("its stdin");
    stdin
        .write_all(b"go\n")
        .and_then(|()| stdin.flush())
        .expect("write to the consumer process");
}
