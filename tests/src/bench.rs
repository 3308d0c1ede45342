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
