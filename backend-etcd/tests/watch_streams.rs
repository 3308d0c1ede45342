//! How many watch streams a backend opens on the real etcd (`TENURE_ETCD`),
//! counted by the server itself on its metrics endpoint, and that its
//! watches still fire after the server restarts on its data.
//!
//! In a test binary of its own: it reads server-wide gauges that the
//! watches of other tests would move, and it restarts the server
//! (`scripts/services restart etcd`, which acts on the etcd of the same
//! settings: `TENURE_SERVICES_STATE`, `TENURE_ETCD_PORT`).

mod common;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use common::{partition, Sandbox};
use tenure_core::{ClaimOutcome, Event, StoreOp, StoreRequest};
use tenure_tokio::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Partitions the watching member waits for: enough that a stream per
/// watch would show at once.
const PARTITIONS: u32 = 300;

/// How long the server may take to show what it was asked.
const METRICS_TIMEOUT: Duration = Duration::from_secs(30);

/// What the server says about its watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Watching {
    /// Watch streams open now (`etcd_debugging_mvcc_watch_stream_total`).
    streams: u64,
    /// Watches registered now (`etcd_debugging_mvcc_watcher_total`).
    watchers: u64,
    /// Watch calls (streams) opened since the server started
    /// (`grpc_server_started_total` of `etcdserverpb.Watch`).
    started: u64,
}

/// The metrics endpoint of the server at `address` (`http://host:port`).
struct Metrics {
    authority: String,
}

impl Metrics {
    fn of(address: &str) -> Metrics {
        let authority = address
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("this test reads metrics over plain HTTP, not {address}"))
            .trim_end_matches('/')
            .to_owned();
        Metrics { authority }
    }

    async fn read(&self) -> Watching {
        let mut connection = tokio::net::TcpStream::connect(&self.authority)
            .await
            .unwrap_or_else(|e| panic!("cannot reach etcd's metrics at {}: {e}", self.authority));
        let request = format!(
            "GET /metrics HTTP/1.0\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.authority
        );
        connection
            .write_all(request.as_bytes())
            .await
            .expect("ask for the metrics");
        let mut body = String::new();
        connection
            .read_to_string(&mut body)
            .await
            .expect("read the metrics");
        let value = |name: &str| -> u64 {
            body.lines()
                .find_map(|line| {
                    let (metric, value) = line.rsplit_once(' ')?;
                    (metric == name).then(|| value.parse::<f64>().ok())?
                })
                .unwrap_or_else(|| panic!("etcd's metrics have no {name}")) as u64
        };
        Watching {
            streams: value("etcd_debugging_mvcc_watch_stream_total"),
            watchers: value("etcd_debugging_mvcc_watcher_total"),
            started: value(
                "grpc_server_started_total{grpc_method=\"Watch\",\
                 grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"}",
            ),
        }
    }

    /// Reads the metrics until `done` accepts them. The server tells no one
    /// when its gauges move: asking again is the only way to see it.
    async fn until(&self, what: &str, mut done: impl FnMut(&Watching) -> bool) -> Watching {
        let deadline = tokio::time::Instant::now() + METRICS_TIMEOUT;
        loop {
            let now = self.read().await;
            if done(&now) {
                return now;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "etcd's metrics never showed {what} within {METRICS_TIMEOUT:?}; last: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Restarts the server at `address` on its data, and returns once it
/// answers again.
async fn restart_etcd(address: &str) {
    // The workspace's scripts, one level above this crate.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let address = address.trim_end_matches('/').to_owned();
    tokio::task::spawn_blocking(move || {
        // The script restarts the etcd its settings name: it must be the one
        // this test talks to, never another that other runs rely on.
        let env = Command::new(script)
            .args(["env", "etcd"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        let settings = String::from_utf8_lossy(&env.stdout).into_owned();
        assert!(
            settings
                .lines()
                .any(|line| line == format!("export TENURE_ETCD={address}")),
            "scripts/services would restart another etcd than TENURE_ETCD={address}: {settings}\
             (set TENURE_SERVICES_STATE and TENURE_ETCD_PORT as for the one under test)"
        );
        let status = Command::new(script)
            .args(["restart", "etcd"])
            .status()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        assert!(status.success(), "scripts/services restart etcd failed");
    })
    .await
    .expect("the restart ran");
}

/// A member waiting for hundreds of partitions that another holds opens one
/// watch stream for all of its watches; after the server restarts it opens
/// one again and registers every watch on it from where it stood, so that
/// nothing fires for a change that did not happen and every change that
/// did fires; fired watches are cancelled on the server, and the stream
/// closes with the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watch_stream_carries_every_watch_across_a_restart() {
    let sandbox = Sandbox::new("streams").await;
    let metrics = Metrics::of(&sandbox.address);
    let mut holder = sandbox.member("holder").await;
    let claims: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            holder.submit(|id, session| StoreRequest {
                id,
                session,
                op: StoreOp::Claim {
                    partition: partition(p),
                    read_offset: false,
                },
            })
        })
        .collect();
    for claim in claims {
        match holder.result(claim).await {
            Event::ClaimResult {
                result: Ok(ClaimOutcome::Created { .. }),
                ..
            } => {}
            other => panic!("a claim answered {other:?}"),
        }
    }

    let before = metrics.read().await;
    let mut waiter = sandbox.member("waiter").await;
    assert_eq!(waiter.watch_members().await, Vec::<String>::new());
    let watches: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            waiter.submit(|id, session| StoreRequest {
                id,
                session,
                op: StoreOp::WatchOwner {
                    partition: partition(p),
                },
            })
        })
        .collect();
    for watch in watches {
        match waiter.result(watch).await {
            Event::OwnerWatchResult {
                result: Ok(true), ..
            } => {}
            other => panic!("an owner watch answered {other:?}"),
        }
    }
    let expected = u64::from(PARTITIONS) + 1;
    let watching = metrics
        .until("every watch registered", |m| {
            m.watchers >= before.watchers + expected
        })
        .await;
    println!(
        "{expected} watches (members and {PARTITIONS} owners): {} watch stream(s) open, \
         {} Watch call(s) started",
        watching.streams - before.streams,
        watching.started - before.started
    );
    assert_eq!(watching.watchers - before.watchers, expected);
    assert_eq!(
        watching.streams - before.streams,
        1,
        "one watch stream for every watch of the member"
    );
    assert_eq!(watching.started - before.started, 1, "one Watch call");

    restart_etcd(&sandbox.address).await;
    // A fresh server counts from zero; whatever watched it before (and
    // watches it again) is in `before`.
    let again = metrics
        .until("every watch registered again", |m| {
            m.watchers >= before.watchers + expected
        })
        .await;
    println!(
        "after the restart: {} watch stream(s), {} watches",
        again.streams, again.watchers
    );
    assert_eq!(again.streams, before.streams + 1, "one stream again");
    assert_eq!(again.watchers, before.watchers + expected);
    // Registered again from the revision after the last one seen: the
    // owner keys did not change, so nothing fired.
    assert!(
        !waiter.has(|e| matches!(e, Event::OwnerDeleted { .. } | Event::MembersChanged)),
        "a watch fired for a change that did not happen"
    );

    // Every change fires its own watch, once: the even partitions first,
    // so that a response routed to another watch than its own shows.
    registered(holder.register().await);
    waiter
        .wait_for("MembersChanged", |e| {
            matches!(e, Event::MembersChanged).then_some(())
        })
        .await;
    let evens: BTreeSet<_> = (0..PARTITIONS).filter(|p| p % 2 == 0).collect();
    let odds: BTreeSet<_> = (0..PARTITIONS).filter(|p| p % 2 == 1).collect();
    for half in [evens, odds] {
        release(&mut holder, &half).await;
        let mut deleted = BTreeSet::new();
        while deleted.len() < half.len() {
            let p = waiter
                .wait_for("OwnerDeleted", |e| match e {
                    Event::OwnerDeleted { partition } => Some(partition.partition),
                    _ => None,
                })
                .await;
            assert!(deleted.insert(p), "partition {p} fired twice");
        }
        assert_eq!(deleted, half, "each release fires the watch of its key");
    }
    assert!(
        !waiter.has(|e| matches!(e, Event::OwnerDeleted { .. } | Event::MembersChanged)),
        "a watch fired more than once"
    );

    // Fired watches are cancelled on the server; the stream stays for the
    // next ones.
    let fired = metrics
        .until("the fired watches cancelled", |m| {
            m.watchers == before.watchers
        })
        .await;
    assert_eq!(fired.streams, before.streams + 1);

    // Watches whose session ends end without firing, and are cancelled;
    // the next session's watches ride on the same stream.
    let some: BTreeSet<u32> = (0..10).collect();
    for &p in &some {
        assert!(matches!(
            holder.claim(p).await,
            Event::ClaimResult {
                result: Ok(ClaimOutcome::Created { .. }),
                ..
            }
        ));
        assert!(matches!(
            waiter.watch_owner(p).await,
            Event::OwnerWatchResult {
                result: Ok(true),
                ..
            }
        ));
    }
    metrics
        .until("the new watches registered", |m| {
            m.watchers == before.watchers + 10
        })
        .await;
    let mut raw = sandbox.raw.clone();
    raw.lease_revoke(common::lease(waiter.session))
        .await
        .expect("revoke the waiter's lease");
    waiter
        .wait_for("SessionExpired", |e| {
            matches!(e, Event::SessionExpired).then_some(())
        })
        .await;
    waiter.session = waiter
        .wait_for("SessionEstablished", |e| match e {
            Event::SessionEstablished { session } => Some(*session),
            _ => None,
        })
        .await;
    let ended = metrics
        .until("the old session's watches cancelled", |m| {
            m.watchers == before.watchers
        })
        .await;
    assert_eq!(
        ended.streams,
        before.streams + 1,
        "the stream outlives leases"
    );
    for &p in &some {
        assert!(matches!(
            waiter.watch_owner(p).await,
            Event::OwnerWatchResult {
                result: Ok(true),
                ..
            }
        ));
    }
    release(&mut holder, &some).await;
    let mut deleted = BTreeSet::new();
    while deleted.len() < some.len() {
        deleted.insert(
            waiter
                .wait_for("OwnerDeleted under the new session", |e| match e {
                    Event::OwnerDeleted { partition } => Some(partition.partition),
                    _ => None,
                })
                .await,
        );
    }
    let finally = metrics.read().await;
    assert_eq!(finally.started, again.started, "no other Watch call");

    waiter.backend.shutdown().await;
    metrics
        .until("the stream closed with the backend", |m| {
            m.streams == before.streams
        })
        .await;
    holder.backend.shutdown().await;
}

/// Releases `partitions` of `member`, all at once.
async fn release(member: &mut common::Driver, partitions: &BTreeSet<u32>) {
    let releases: Vec<_> = partitions
        .iter()
        .map(|&p| {
            member.submit(|id, session| StoreRequest {
                id,
                session,
                op: StoreOp::Release {
                    partition: partition(p),
                    token: None,
                    commit: None,
                    progress: Default::default(),
                },
            })
        })
        .collect();
    for release in releases {
        assert!(matches!(
            member.result(release).await,
            Event::ReleaseResult { result: Ok(()), .. }
        ));
    }
}

fn registered(event: Event) {
    assert!(
        matches!(
            event,
            Event::RegisterResult {
                result: Ok(tenure_core::RegisterOutcome::Registered),
                ..
            }
        ),
        "expected a registration, got {event:?}"
    );
}
