//! Signals to member processes, by the `kill` command.

use std::process::{Child, Command};

/// Sends signal `name` (`KILL`, `STOP`, ...) to `child`.
pub fn signal(child: &Child, name: &str) {
    signal_pid(child.id(), name);
}

/// Sends signal `name` to the process `pid`.
pub fn signal_pid(pid: u32, name: &str) {
    // A process already gone needs no signal.
    let _ = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}
