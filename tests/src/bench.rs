//! What the end-to-end benchmarks (`examples/`) share. They say what went
//! wrong as an error rather than failing a test with a panic.

/// The address of a server of `scripts/services`, from its variable.
pub fn server(variable: &str) -> Result<String, String> {
    std::env::var(variable).map_err(|_| {
        format!(
            "{variable} is not set: start the servers with `eval \"$(scripts/services start)\"`"
        )
    })
}

/// Milliseconds since the Unix epoch (the clock Kafka records are stamped
/// with).
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The value at quantile `q` (0 to 1) of `sorted`, nearest rank; `None`
/// when there is none.
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    let rank = (last as f64 * q).round() as usize;
    sorted.get(rank.min(last)).copied()
}

/// Runs `command` off the runtime's threads and gives what it printed on
/// stdout; `what` names it in the error when it cannot run or fails (with
/// all it printed).
pub async fn run_program(what: &str, mut command: std::process::Command) -> Result<String, String> {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .map_err(|e| format!("{what}: its thread: {e}"))?
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{what} failed ({}): {stdout}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout)
}
