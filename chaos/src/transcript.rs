//! What the member processes said, read from their lines as they come
//! (the lines of `examples/common/lines.rs`).

use std::io::{BufRead, BufReader};
use std::process::ChildStdout;
use std::sync::{Arc, Mutex, MutexGuard};

/// What the member processes handed out, as they said it.
#[derive(Default)]
pub struct Log {
    /// (member, wall ms, partition, offset, token)
    pub messages: Vec<(String, u64, u32, i64, u64)>,
    /// (member, wall ms, kind, partition, token)
    pub events: Vec<(String, u64, String, u32, u64)>,
    /// Acknowledgements in key order (`--ordering key`): (wall ms,
    /// partition, offset, token, key).
    pub acks: Vec<(u64, u32, i64, u64, String)>,
    /// Writes the sink refused as stale (`--sink postgres`): (member, wall
    /// ms, partition, token, stored token, messages dropped).
    pub fenced: Vec<(String, u64, u32, u64, u64, u64)>,
    /// Failed attempts the members reported (`--sink postgres`), as they
    /// said them: (member, line).
    pub failures: Vec<(String, String)>,
}

pub type SharedLog = Arc<Mutex<Log>>;

pub fn lock(log: &SharedLog) -> MutexGuard<'_, Log> {
    match log.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Reads a member's lines into the log until it exits; `ready` is sent
/// when it says it joined.
pub fn read_member(
    member: String,
    stdout: ChildStdout,
    log: SharedLog,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["ready"] => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
            }
            ["m", at, partition, offset, token] => {
                if let (Ok(at), Ok(p), Ok(o), Ok(t)) =
                    (at.parse(), partition.parse(), offset.parse(), token.parse())
                {
                    lock(&log).messages.push((member.clone(), at, p, o, t));
                }
            }
            ["a", at, partition, offset, token, key] => {
                if let (Ok(at), Ok(p), Ok(o), Ok(t)) =
                    (at.parse(), partition.parse(), offset.parse(), token.parse())
                {
                    lock(&log).acks.push((at, p, o, t, (*key).to_owned()));
                }
            }
            ["e", at, kind, partition, token] => {
                if let (Ok(at), Ok(p), Ok(t)) = (at.parse(), partition.parse(), token.parse()) {
                    lock(&log)
                        .events
                        .push((member.clone(), at, (*kind).to_owned(), p, t));
                }
            }
            ["f", at, partition, token, stored, dropped] => {
                if let (Ok(at), Ok(p), Ok(t), Ok(s), Ok(d)) = (
                    at.parse(),
                    partition.parse(),
                    token.parse(),
                    stored.parse(),
                    dropped.parse(),
                ) {
                    lock(&log).fenced.push((member.clone(), at, p, t, s, d));
                }
            }
            ["x", ..] => lock(&log).failures.push((member.clone(), line.clone())),
            _ => {}
        }
    }
}
