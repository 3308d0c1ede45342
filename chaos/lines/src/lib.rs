//! The lines a member process prints for the chaos tool, which reads them
//! as they come (`chaos/src/transcript.rs`): `ready` once it joined,
//! `e <wall ms> <assigned|suspended|resumed|revoking|revoked|lost> <partition>
//! <token>` for each assignment change, `closed` after a clean close, and
//! lines of each kind of member's own (`chaos member`'s `m` for a message
//! handed out, `exactly_once_postgres`'s `f` and `x` for a write refused or
//! failed). One copy for both kinds of member: the chaos tool and the
//! facade's examples depend on this crate.

use std::fmt::Display;
use std::future::Future;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use tenure_tokio::{AssignmentEvent, Events};

/// Milliseconds since the Unix epoch: the clock every process of a chaos
/// run shares.
pub fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Prints one line at once (a reader may be waiting for it).
pub fn say(line: impl Display) {
    let mut out = std::io::stdout().lock();
    // Nobody reads any more if this fails (a closed pipe is no reason to
    // leave a group uncleanly): nothing left to tell.
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// The `e` line of an assignment change.
pub fn print_event(event: &AssignmentEvent) {
    let (kind, partition, token) = match event {
        AssignmentEvent::Assigned {
            partition, token, ..
        } => ("assigned", partition, token),
        AssignmentEvent::Resumed { partition, token } => ("resumed", partition, token),
        AssignmentEvent::Suspended {
            partition, token, ..
        } => ("suspended", partition, token),
        AssignmentEvent::Revoking { partition, token } => ("revoking", partition, token),
        AssignmentEvent::Revoked { partition, token } => ("revoked", partition, token),
        AssignmentEvent::Lost { partition, token } => ("lost", partition, token),
        _ => return,
    };
    say(format_args!(
        "e {} {kind} {} {}",
        wall_ms(),
        partition.partition,
        token.0
    ));
}

/// Awaits `closing`, a member's close, printing the assignment changes
/// that come meanwhile: what the close hands over, its releases.
pub async fn close_printing_events<T, E>(
    closing: impl Future<Output = Result<T, E>>,
    events: &mut Events,
) -> Result<T, E> {
    tokio::pin!(closing);
    loop {
        tokio::select! {
            closed = &mut closing => return closed,
            Some(event) = events.next() => print_event(&event),
        }
    }
}
