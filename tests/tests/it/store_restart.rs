//! The store restarted under a running group: the members see the
//! connection drop, stop consuming in time, then resume or register again,
//! and converge with every partition owned. Each test takes its turn alone
//! (`crate::turns`), since it restarts the servers the other tests use.

use tenure_tests as common;

use std::process::Command;
use std::time::Duration;

use common::Stores;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_after_zookeeper_restarts() {
    let _turn = crate::turns::alone().await;
    let stores = common::zookeeper::ZooKeeper::new("restart").await;
    // ZooKeeper takes a few seconds to come back (a JVM starting): when
    // that is longer than a session, every member must have stopped
    // meanwhile.
    converge_after_restart(&stores, "zookeeper", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_converge_after_etcd_restarts() {
    let _turn = crate::turns::alone().await;
    let stores = common::etcd::Etcd::new("restart").await;
    // etcd may be back within the lease, so a pause is allowed, not required.
    converge_after_restart(&stores, "etcd", false).await;
}

async fn converge_after_restart(stores: &dyn Stores, service: &str, must_pause: bool) {
    let (group, mut monitor, members) = common::three_settled(stores, "restart").await;

    // The workspace's scripts, one level above this crate.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");
    let outage = Outage::watch(&server_address(service));
    let restarted = service.to_owned();
    let status = tokio::task::spawn_blocking(move || {
        Command::new(script).args(["restart", &restarted]).status()
    })
    .await
    .expect("the restart's thread")
    .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(
        status.success(),
        "scripts/services restart {service} failed"
    );

    // The server refused connections at least this long (the script's own
    // work before the stop and after the start is not the server's
    // absence); a member's lease ends a session after its last answer at
    // the latest.
    let away = outage.end().await;
    let must_pause = must_pause && away > common::SESSION;
    let before: Vec<usize> = (0..12).map(|p| monitor.starts(&common::tp(p))).collect();
    monitor
        .until(Duration::from_secs(30), "all members converge again", |v| {
            common::settled(v, &["m1", "m2", "m3"], 12)
        })
        .await;
    // The server was away longer than a session's lease: every partition
    // was stopped and started again (resumed or claimed anew).
    for p in 0..12 {
        assert!(
            !must_pause || monitor.starts(&common::tp(p)) > before[p as usize],
            "partition {p} was never stopped while the server was down for {away:?}"
        );
    }
    monitor.assert_no_overlap();
    common::store_agrees(stores, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// The server's `host:port`, from the services' environment.
fn server_address(service: &str) -> String {
    let var = match service {
        "zookeeper" => "TENURE_ZOOKEEPER",
        _ => "TENURE_ETCD",
    };
    let value = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: start the servers with `eval \"$(scripts/services start)\"`")
    });
    value.trim().trim_start_matches("http://").to_owned()
}

/// How long a server refused connections, from tries every few
/// milliseconds while it restarts.
struct Outage {
    stop: tokio::sync::oneshot::Sender<()>,
    watcher: tokio::task::JoinHandle<Duration>,
}

/// How often the watcher tries to connect.
const TRY_EVERY: Duration = Duration::from_millis(20);

impl Outage {
    fn watch(address: &str) -> Outage {
        let address = address.to_owned();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let watcher = tokio::spawn(async move {
            let (mut refused_since, mut longest) = (None, Duration::ZERO);
            loop {
                let answered =
                    tokio::time::timeout(TRY_EVERY, tokio::net::TcpStream::connect(&address))
                        .await
                        .is_ok_and(|connected| connected.is_ok());
                let now = std::time::Instant::now();
                match (answered, refused_since) {
                    (false, None) => refused_since = Some(now),
                    (true, Some(since)) => {
                        longest = longest.max(now - since);
                        refused_since = None;
                    }
                    _ => {}
                }
                if stopped.try_recv().is_ok() {
                    return longest;
                }
                tokio::time::sleep(TRY_EVERY).await;
            }
        });
        Outage { stop, watcher }
    }

    /// The longest stretch without an answer, less the tries' spacing
    /// (a lower bound of the server's absence).
    async fn end(self) -> Duration {
        let _ = self.stop.send(());
        let longest = self.watcher.await.expect("the outage watcher");
        longest.saturating_sub(2 * TRY_EVERY)
    }
}
