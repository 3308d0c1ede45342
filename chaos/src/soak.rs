//! `--sample-every`: what a long run costs over time. Each sample gives
//! the member processes' resident memory and open descriptors (from
//! `/proc`), the store's watches and the requests it served per second
//! since the last sample (ZooKeeper's `mntr`, etcd's `/metrics`, summed
//! over its nodes); the run's end prints the first and last samples and
//! the growth between them. A soak is `chaos --seconds 3600 --sample-every
//! 60`: flat figures say nothing leaks.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::run::Run;
use crate::store::{Store, StoreKind};

/// One sample.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Seconds since the group settled.
    pub at_s: u64,
    pub members: usize,
    pub rss_kib_median: u64,
    pub rss_kib_max: u64,
    pub fds_median: u64,
    pub fds_max: u64,
    /// The longest-lived member's resident memory, and how long it had
    /// lived: a leak shows there first.
    pub oldest_rss_kib: u64,
    pub oldest_age_s: u64,
    /// Watches the store holds, every node's summed (None: not read).
    pub store_watches: Option<u64>,
    /// Each node's request counter and uptime in seconds, in the order of
    /// the store's nodes (None: that node did not answer).
    store_counters: Vec<Option<(u64, u64)>>,
    /// Requests per second since the previous sample.
    pub store_requests_per_s: Option<u64>,
}

impl std::fmt::Display for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or_dash = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
        write!(
            f,
            "at_s={} members={} rss_kib_median={} rss_kib_max={} fds_median={} fds_max={} \
             oldest_rss_kib={} oldest_age_s={} store_watches={} store_requests_per_s={}",
            self.at_s,
            self.members,
            self.rss_kib_median,
            self.rss_kib_max,
            self.fds_median,
            self.fds_max,
            self.oldest_rss_kib,
            self.oldest_age_s,
            or_dash(self.store_watches),
            or_dash(self.store_requests_per_s),
        )
    }
}

impl Run {
    /// Takes a sample, `at_s` seconds into the run, after `previous`.
    pub async fn sample(&mut self, at_s: u64, previous: Option<&Sample>) -> Sample {
        let mut rss = Vec::new();
        let mut fds = Vec::new();
        let mut oldest: Option<(Instant, u64)> = None;
        for running in self.members.values_mut() {
            if running.killed_at.is_some() || running.has_ended() {
                continue;
            }
            let pid = running.process.id();
            let Some(kib) = resident_kib(pid) else {
                continue;
            };
            rss.push(kib);
            fds.push(open_fds(pid));
            if oldest.is_none_or(|(since, _)| running.started_at < since) {
                oldest = Some((running.started_at, kib));
            }
        }
        let (watches, counters) = store_counters(&self.store).await;
        let per_s = previous.and_then(|p| requests_per_s(p, at_s, &counters));
        Sample {
            at_s,
            members: rss.len(),
            rss_kib_median: median(&mut rss),
            rss_kib_max: rss.iter().copied().max().unwrap_or(0),
            fds_median: median(&mut fds),
            fds_max: fds.iter().copied().max().unwrap_or(0),
            oldest_rss_kib: oldest.map_or(0, |(_, kib)| kib),
            oldest_age_s: oldest.map_or(0, |(since, _)| since.elapsed().as_secs()),
            store_watches: watches,
            store_counters: counters,
            store_requests_per_s: per_s,
        }
    }
}

/// The soak's closing line: first and last samples, and the growth
/// between them of what would show a leak.
pub fn summary(samples: &[Sample]) -> Option<String> {
    let (first, last) = (samples.first()?, samples.last()?);
    let growth = |a: u64, b: u64| {
        if a == 0 {
            "-".to_owned()
        } else {
            format!("{:+.1}%", (b as f64 - a as f64) * 100.0 / a as f64)
        }
    };
    let opt = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
    // The first sample has no rate (nothing before it): the second's.
    let first_rate = samples.iter().find_map(|s| s.store_requests_per_s);
    Some(format!(
        "soak: samples={} over_s={} rss_kib_median {}->{} ({}) oldest_rss_kib {}->{} ({}, \
         {} s old at the end) fds_median {}->{} store_watches {}->{} \
         store_requests_per_s {}->{}",
        samples.len(),
        last.at_s - first.at_s,
        first.rss_kib_median,
        last.rss_kib_median,
        growth(first.rss_kib_median, last.rss_kib_median),
        first.oldest_rss_kib,
        last.oldest_rss_kib,
        growth(first.oldest_rss_kib, last.oldest_rss_kib),
        last.oldest_age_s,
        first.fds_median,
        last.fds_median,
        opt(first.store_watches),
        opt(last.store_watches),
        opt(first_rate),
        opt(last.store_requests_per_s),
    ))
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values
        .get(values.len().saturating_sub(1) / 2)
        .copied()
        .unwrap_or(0)
}

fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// The store's requests per second between `previous` and now (`at_s`),
/// summed over its nodes: a node that ran throughout, by its counter's
/// difference; one that started since (a store fault restarts nodes, and
/// their counters with them), by what it served since its start over its
/// uptime. `None` if no node answered.
fn requests_per_s(previous: &Sample, at_s: u64, now: &[Option<(u64, u64)>]) -> Option<u64> {
    let seconds = at_s.saturating_sub(previous.at_s).max(1);
    let mut rate = None;
    for (i, node) in now.iter().enumerate() {
        let Some((count, uptime_s)) = *node else {
            continue;
        };
        let before = previous.store_counters.get(i).copied().flatten();
        let node_rate = match before {
            Some((then, _)) if uptime_s >= seconds && count >= then => (count - then) / seconds,
            _ => count / uptime_s.max(1),
        };
        *rate.get_or_insert(0) += node_rate;
    }
    rate
}

/// The store's watches, summed over the nodes that answer, and each
/// node's request counter and uptime (seconds).
async fn store_counters(store: &Store) -> (Option<u64>, Vec<Option<(u64, u64)>>) {
    let mut watches = None;
    let mut counters = Vec::new();
    let now_s = tenure_chaos_lines::wall_ms() / 1_000;
    for server in &store.servers {
        let (query, watch_key, request_key) = match store.kind {
            StoreKind::ZooKeeper => ("mntr\n".to_owned(), "zk_watch_count", "zk_packets_received"),
            StoreKind::Etcd => (
                format!("GET /metrics HTTP/1.0\r\nHost: {server}\r\n\r\n"),
                "etcd_debugging_mvcc_watcher_total",
                "grpc_server_started_total",
            ),
        };
        let Some(text) = ask(server, &query).await else {
            counters.push(None);
            continue;
        };
        let sum_of = |key: &str| -> Option<u64> {
            let values: Vec<u64> = text
                .lines()
                .filter(|l| l.starts_with(key))
                .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
                .map(|v| v as u64)
                .collect();
            (!values.is_empty()).then(|| values.iter().sum())
        };
        if let Some(w) = sum_of(watch_key) {
            *watches.get_or_insert(0) += w;
        }
        let uptime_s = match store.kind {
            StoreKind::ZooKeeper => sum_of("zk_uptime").map(|ms| ms / 1_000),
            StoreKind::Etcd => {
                sum_of("process_start_time_seconds").map(|t| now_s.saturating_sub(t))
            }
        };
        counters.push(sum_of(request_key).zip(uptime_s));
    }
    (watches, counters)
}

/// Sends `query` to `server` and reads the answer to its end (2 s at most).
async fn ask(server: &str, query: &str) -> Option<String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(server).await.ok()?;
        stream.write_all(query.as_bytes()).await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        Some(answer)
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_s: u64, rss: u64, rate: Option<u64>) -> Sample {
        Sample {
            at_s,
            members: 3,
            rss_kib_median: rss,
            rss_kib_max: rss,
            fds_median: 18,
            fds_max: 19,
            oldest_rss_kib: rss,
            oldest_age_s: at_s,
            store_watches: Some(4),
            store_counters: Vec::new(),
            store_requests_per_s: rate,
        }
    }

    #[test]
    fn the_summary_gives_first_last_and_growth() {
        let line = summary(&[
            sample(0, 10_000, None),
            sample(60, 10_100, Some(40)),
            sample(120, 10_500, Some(42)),
        ])
        .unwrap_or_default();
        assert!(
            line.contains("rss_kib_median 10000->10500 (+5.0%)"),
            "{line}"
        );
        assert!(line.contains("store_requests_per_s 40->42"), "{line}");
        assert!(line.contains("over_s=120"), "{line}");
        assert_eq!(summary(&[]), None);
    }

    #[test]
    fn a_node_restarted_since_counts_at_its_rate_since_its_start() {
        let mut before = sample(60, 10_000, None);
        before.store_counters = vec![Some((1_000, 600)), Some((5_000, 600)), None];
        // Node 1 went on, node 2 restarted 30 s ago, node 3 is back.
        let now = [Some((1_600, 660)), Some((300, 30)), Some((60, 10))];
        assert_eq!(
            requests_per_s(&before, 120, &now),
            Some(600 / 60 + 300 / 30 + 60 / 10)
        );
        assert_eq!(requests_per_s(&before, 120, &[None, None, None]), None);
    }

    #[test]
    fn a_median_of_nothing_is_zero() {
        assert_eq!(median(&mut []), 0);
        assert_eq!(median(&mut [5, 1, 3]), 3);
        assert_eq!(median(&mut [4, 1]), 1);
    }
}
