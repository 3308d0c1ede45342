//! `tenure serve` end to end, as a process of its own, on the real
//! ZooKeeper, etcd and Kafka of `scripts/services`: a consuming group is
//! OK; a member that stops acknowledging leaves its partitions STALL while
//! the other's stay OK; killed members leave their partitions unowned and
//! STOP; a group that appears is picked up; a corrupt offset record is an
//! ERROR on its partition, not a crashed server. `/metrics` is read by a
//! Prometheus text-format parser and agrees with the JSON, which is read
//! into the serde types. The page, in Debian's chromium driven headless
//! over WebDriver, shows every member with its partitions and follows a
//! join without a reload. A cut Kafka and a cut store are reported as
//! ERROR and recovered from, and clients that never finish a request or
//! never read do not hold the watching up. A token guards everything but
//! `/healthz`; HTTPS is served with a certificate; `describe --watch`
//! redraws a group as it changes.

use tenure_tests as common;

use std::io::BufReader;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::kafka;
use common::serve::{get, group_of, Consumer, WAIT};
use hyper_util::client::legacy::connect::HttpConnector;
use tenure::admin::health::Status;
use tenure::admin::overview::Overview;
use tenure::tokio::Backend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The `tenure` binary, without the environment's TENURE_* variables: only
/// the flags count.
fn tenure_command() -> Command {
    common::serve::tenure_command(env!("CARGO_BIN_EXE_tenure-under-test"))
}

/// `tenure serve` on `store` with Kafka at `bootstrap` (see
/// [`common::serve::Serve::start`]).
fn start_serve(store: &[String], bootstrap: &str, extra: &[&str]) -> common::serve::Serve {
    common::serve::Serve::start(
        env!("CARGO_BIN_EXE_tenure-under-test"),
        store,
        bootstrap,
        extra,
    )
}

/// The whole story on one store: OK, STALL, STOP, a new group, a corrupt
/// record, metrics against JSON.
async fn a_group_judged_from_outside<F: std::future::Future<Output = String>>(
    store: Vec<String>,
    backend: impl Fn() -> Box<dyn Backend>,
    name: &str,
    corrupt: impl FnOnce(String, String) -> F,
) {
    let client = kafka::client().await;
    let topic = kafka::topic(name);
    kafka::create_topic_with_messages(&client, &topic, 4, 20).await;
    let group = common::group(name);
    let serve = start_serve(&store, &kafka::bootstrap(), &[]);

    // Two members consume everything: every partition owned, lag 0, OK.
    let a = Consumer::join(backend(), &group, "a", &topic).await;
    let b = Consumer::join(backend(), &group, "b", &topic).await;
    let settled = serve
        .until("the group consuming and OK", |o| {
            group_of(o, &group).is_some_and(|g| {
                // Both members consuming: each owns its share (right
                // after the joins, the first may hold them all).
                g.members.len() == 2
                    && g.members.iter().all(|m| m.partitions == 2)
                    && g.partitions.len() == 4
                    && g.unowned == 0
                    && g.total_lag == Some(0)
                    && g.status == Status::Ok
            })
        })
        .await;
    let health = group_of(&settled, &group).expect("the group");
    assert!(health.mismatches.is_empty(), "{health:?}");
    assert!(
        health.partitions.iter().all(|p| p.token.is_some()),
        "every owned partition has its token: {health:?}"
    );

    // /metrics, parsed as Prometheus parses it, says what the JSON says.
    let (status, text) = serve.get("/metrics").await;
    assert_eq!(status, 200);
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text format");
    let value = |name: &str, labels: &[(&str, &str)]| -> Option<f64> {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    assert_eq!(
        value("tenure_group_members", &[("group", &group)]),
        Some(2.0)
    );
    assert_eq!(
        value("tenure_group_status", &[("group", &group)]),
        Some(0.0)
    );
    for p in &health.partitions {
        let number = p.partition.to_string();
        let owner = p.owner.as_deref().expect("owned");
        let labels = [
            ("group", group.as_str()),
            ("topic", topic.as_str()),
            ("partition", number.as_str()),
            ("consumer_id", owner),
        ];
        assert_eq!(
            value("kafka_consumergroup_group_lag", &labels),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            value("kafka_consumergroup_group_offset", &labels),
            p.committed.map(|c| c as f64)
        );
        assert_eq!(
            value(
                "kafka_partition_latest_offset",
                &[("topic", &topic), ("partition", &number)]
            ),
            Some(20.0)
        );
    }

    // b stops acknowledging; new messages come: b's partitions STALL
    // within a window, a's stay OK.
    b.stop_acking();
    let b_partitions: Vec<u32> = health
        .partitions
        .iter()
        .filter(|p| p.owner.as_deref() == Some("b"))
        .map(|p| p.partition)
        .collect();
    assert!(!b_partitions.is_empty(), "b owns partitions: {health:?}");
    for p in 0..4 {
        kafka::produce(&client, &topic, p, 10).await;
    }
    let stalled = serve
        .until("b's partitions STALL, a's OK", |o| {
            group_of(o, &group).is_some_and(|g| {
                g.status == Status::Stall
                    && g.partitions.iter().all(|p| {
                        if b_partitions.contains(&p.partition) {
                            p.status == Status::Stall
                        } else {
                            p.status == Status::Ok && p.lag == Some(0)
                        }
                    })
            })
        })
        .await;
    let text = serve.get("/metrics").await.1;
    assert!(
        text.contains(&format!("tenure_group_status{{group=\"{group}\"}} 2")),
        "{text}"
    );
    drop(stalled);

    // Every member killed: partitions unowned, lag kept, STOP.
    a.handle.kill();
    b.handle.kill();
    let stopped = serve
        .until("every partition unowned and STOP", |o| {
            group_of(o, &group).is_some_and(|g| {
                g.members.is_empty()
                    && g.unowned == 4
                    && g.unowned_too_long.len() == 4
                    && g.status == Status::Stop
                    && g.partitions.iter().any(|p| p.status == Status::Stop)
            })
        })
        .await;
    let health = group_of(&stopped, &group).expect("the group");
    use tenure::admin::overview::TimelineKind;
    for kind in [
        TimelineKind::Claimed,
        TimelineKind::Released,
        TimelineKind::Left,
    ] {
        assert!(
            health.timeline.iter().any(|e| e.kind == kind),
            "no {kind:?} in the timeline: {:?}",
            health.timeline
        );
    }

    // A new group appears and is picked up; a corrupt offset record of its
    // is an ERROR on that partition, and the server goes on.
    let other = common::group(&format!("{name}-new"));
    let c = Consumer::join(backend(), &other, "c", &topic).await;
    serve
        .until("the new group picked up", |o| {
            group_of(o, &other).is_some_and(|g| g.members.len() == 1)
        })
        .await;
    c.handle.kill();
    // Partition 3's offset record of the first group made unreadable.
    let bad = corrupt(group.clone(), topic.clone()).await;
    let broken = serve
        .until("the corrupt record an ERROR on its partition", |o| {
            group_of(o, &group).is_some_and(|g| {
                g.status == Status::Error
                    && g.corrupt.iter().any(|c| c.path == bad)
                    && g.partitions
                        .iter()
                        .any(|p| p.partition == 3 && p.status == Status::Error)
            })
        })
        .await;
    assert!(broken.store_error.is_none(), "{broken:?}");
    let (status, _) = serve.get("/healthz").await;
    assert_eq!(status, 200, "the server still watches");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_judged_from_outside_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("serve").await;
    let connect = zookeeper.connect_string().to_owned();
    let store = vec!["--zookeeper".to_owned(), connect.clone()];
    let raw = zookeeper.raw();
    let name = "serve-zk";
    let corrupt = |group: String, topic: String| async move {
        let path = format!("/consumers/{group}/offsets/{topic}/3");
        raw.set_data(&path, b"not a number", None)
            .await
            .expect("overwrite an offset");
        path
    };
    a_group_judged_from_outside(
        store,
        || Box::new(tenure::zookeeper::ZooKeeperBackend::new(connect.clone())),
        name,
        corrupt,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_judged_from_outside_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("serve").await;
    let store = vec![
        "--etcd".to_owned(),
        etcd.endpoint().to_owned(),
        "--etcd-prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    let name = "serve-etcd";
    let raw = etcd.raw();
    let keys = etcd.key(
        "GROUP",
        "offsets",
        &tenure::core::TopicPartition::new("TOPIC", 3),
    );
    let corrupt = |group: String, topic: String| async move {
        let key = keys
            .replacen("GROUP", &group, 1)
            .replacen("TOPIC", &topic, 1);
        let mut raw = raw;
        raw.put(key.clone(), "not a number", None)
            .await
            .expect("overwrite an offset");
        key
    };
    let (endpoint, prefix) = (etcd.endpoint().to_owned(), etcd.prefix().to_owned());
    a_group_judged_from_outside(
        store,
        || Box::new(tenure::etcd::EtcdBackend::new(endpoint.clone()).prefix(prefix.clone())),
        name,
        corrupt,
    )
    .await;
}

/// Kafka cut off (through a proxy) is an ERROR that names Kafka, and
/// healed is OK again; the store cut off is an ERROR and `/healthz` says
/// 503, and healed is watched again; clients that never finish a request
/// or never read their events hold nothing up meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outages_are_reported_and_recovered_and_bad_clients_hold_nothing_up() {
    let _turn = crate::turns::shared().await;
    let etcd = common::etcd::Etcd::new("serve-outage").await;
    let (backend, store_proxy) = etcd.through_proxy().await;
    drop(backend);
    let kafka_proxy = kafka::cuttable().await;
    let client = kafka::client().await;
    let name = "serve-outage";
    let topic = kafka::topic(name);
    // Messages to commit: the committed offsets keep the group in the
    // store after its last member is gone.
    kafka::create_topic_with_messages(&client, &topic, 2, 5).await;
    let group = common::group(name);
    let member = Consumer::join(
        Box::new(tenure::etcd::EtcdBackend::new(etcd.endpoint()).prefix(etcd.prefix())),
        &group,
        "a",
        &topic,
    )
    .await;
    let store = vec![
        "--etcd".to_owned(),
        format!("http://{}", store_proxy.address),
        "--etcd-prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    let serve = start_serve(&store, &kafka_proxy.address.to_string(), &[]);
    serve
        .until("the group OK", |o| {
            group_of(o, &group).is_some_and(|g| g.status == Status::Ok && g.total_lag == Some(0))
        })
        .await;

    // A client that sends half a request, and one that subscribes to the
    // events and never reads them.
    let mut half = tokio::net::TcpStream::connect(serve.address)
        .await
        .expect("connect");
    half.write_all(b"GET /v1/groups HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("half a request");
    let mut deaf = tokio::net::TcpStream::connect(serve.address)
        .await
        .expect("connect");
    deaf.write_all(b"GET /v1/events HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("subscribe");

    kafka_proxy.down();
    serve
        .until("Kafka's outage an ERROR", |o| {
            o.kafka_error.is_some()
                && group_of(o, &group).is_some_and(|g| g.status == Status::Error)
        })
        .await;
    kafka_proxy.up();
    serve
        .until("Kafka back, OK again", |o| {
            o.kafka_error.is_none() && group_of(o, &group).is_some_and(|g| g.status == Status::Ok)
        })
        .await;

    store_proxy.down();
    serve
        .until("the store's outage an ERROR", |o| {
            o.store_error.is_some()
                && group_of(o, &group).is_some_and(|g| g.status == Status::Error)
        })
        .await;
    assert_eq!(serve.get("/healthz").await.0, 503);
    store_proxy.up();
    serve
        .until("the store back, watched again", |o| o.store_error.is_none())
        .await;
    assert_eq!(serve.get("/healthz").await.0, 200);

    // A change after all that is still seen: the member leaves.
    member.handle.kill();
    serve
        .until("the member's leaving seen", |o| {
            group_of(o, &group).is_some_and(|g| g.members.is_empty())
        })
        .await;
    drop((half, deaf));
}

/// A token is asked of every request but `/healthz`, and listening beyond
/// loopback without one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_everything_but_healthz() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("serve-token").await;
    let store = vec![
        "--zookeeper".to_owned(),
        zookeeper.connect_string().to_owned(),
    ];
    let serve = start_serve(&store, &kafka::bootstrap(), &["--token", "s3cret"]);
    assert_eq!(serve.get("/v1/groups").await.0, 401);
    assert_eq!(serve.get("/metrics").await.0, 401);
    // /healthz needs no token: 503 while the first connection is made,
    // then 200.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match serve.get("/healthz").await {
            (200, _) => break,
            (503, why) if tokio::time::Instant::now() < deadline => {
                assert!(why.contains("cannot be watched"), "{why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (status, why) => panic!("/healthz answered {status}: {why}"),
        }
    }
    assert_eq!(
        get(serve.address, "/v1/groups", Some("s3cret")).await.0,
        200
    );
    assert_eq!(get(serve.address, "/v1/groups", Some("wrong")).await.0, 401);
    assert_eq!(serve.get("/?token=s3cret").await.0, 200);

    let refused = tenure_command()
        .args(&store)
        .args([
            "--bootstrap",
            &kafka::bootstrap(),
            "serve",
            "--listen",
            "0.0.0.0:0",
        ])
        .output()
        .expect("run tenure");
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--token"), "{stderr}");
}

/// chromedriver on a free port, stopped when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_chromedriver() -> Driver {
    const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
    assert!(
        std::path::Path::new(CHROMEDRIVER).exists(),
        "{CHROMEDRIVER} is missing: install Debian's chromium and chromium-driver with \
         `scripts/services start`"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    Driver { child, port }
}

/// The page in a real browser: every member of a live group with its
/// partitions; another member's join shown without a reload; a
/// screenshot written under the test's output directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_a_live_group_in_a_real_browser() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("serve-page").await;
    let connect = zookeeper.connect_string().to_owned();
    let store = vec!["--zookeeper".to_owned(), connect.clone()];
    let client = kafka::client().await;
    let name = "serve-page";
    let topic = kafka::topic(name);
    kafka::create_topic_with_messages(&client, &topic, 6, 30).await;
    let group = common::group(name);
    let backend = || -> Box<dyn Backend> {
        Box::new(tenure::zookeeper::ZooKeeperBackend::new(connect.clone()))
    };
    let _first = Consumer::join(backend(), &group, "first", &topic).await;
    let _second = Consumer::join(backend(), &group, "second", &topic).await;
    let serve = start_serve(&store, &kafka::bootstrap(), &[]);
    serve
        .until("two members holding every partition", |o| {
            group_of(o, &group).is_some_and(|g| g.members.len() == 2 && g.unowned == 0)
        })
        .await;

    let driver = start_chromedriver();
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"],
        }),
    );
    let webdriver = format!("http://127.0.0.1:{}", driver.port);
    let deadline = tokio::time::Instant::now() + WAIT;
    let browser = loop {
        let mut builder = fantoccini::ClientBuilder::new(HttpConnector::new());
        match builder
            .capabilities(capabilities.clone())
            .connect(&webdriver)
            .await
        {
            Ok(browser) => break browser,
            Err(error) if tokio::time::Instant::now() < deadline => {
                // chromedriver is still starting.
                let _ = error;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("no WebDriver session from chromedriver: {error}"),
        }
    };
    let page = format!("http://{}/groups/{group}", serve.address);
    browser.goto(&page).await.expect("open the page");

    // What the map shows: member → the partitions in its block.
    let map_of = || async {
        let shown = browser
            .execute(
                "const map = {};
                 for (const owner of document.querySelectorAll('#map .owner')) {
                   map[owner.dataset.member] = [...owner.querySelectorAll('.cell')]
                     .map((c) => c.dataset.partition);
                 }
                 return map;",
                Vec::new(),
            )
            .await
            .expect("read the map");
        serde_json::from_value::<std::collections::BTreeMap<String, Vec<String>>>(shown)
            .expect("a map of members")
    };
    let expected = |overview: &Overview| {
        let mut map = std::collections::BTreeMap::<String, Vec<String>>::new();
        if let Some(g) = group_of(overview, &group) {
            for m in &g.members {
                map.insert(m.id.clone(), Vec::new());
            }
            for p in &g.partitions {
                if let Some(owner) = &p.owner {
                    map.entry(owner.clone())
                        .or_default()
                        .push(format!("{}/{}", p.topic, p.partition));
                }
            }
        }
        map
    };
    let shown = map_of().await;
    let truth = expected(&serve.overview().await);
    assert_eq!(shown.keys().collect::<Vec<_>>(), ["first", "second"]);
    assert_eq!(shown, truth, "the map shows who owns what");
    let before_marker = browser
        .execute("window.notReloaded = true; return true;", Vec::new())
        .await
        .expect("mark the page");
    assert_eq!(before_marker, serde_json::Value::Bool(true));

    // A third member joins: the map follows, without a reload.
    let _third = Consumer::join(backend(), &group, "third", &topic).await;
    let settled = serve
        .until("three members holding every partition", |o| {
            group_of(o, &group).is_some_and(|g| {
                g.members.len() == 2 + 1
                    && g.unowned == 0
                    && g.members.iter().all(|m| m.partitions == 2)
            })
        })
        .await;
    let truth = expected(&settled);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let shown = map_of().await;
        if shown == truth {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page never showed the join: {shown:?}, expected {truth:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let same_page = browser
        .execute("return window.notReloaded === true;", Vec::new())
        .await
        .expect("read the mark");
    assert_eq!(
        same_page,
        serde_json::Value::Bool(true),
        "the page was reloaded"
    );
    let chart_lines = browser
        .execute(
            "return document.querySelectorAll('#chart polyline').length;",
            Vec::new(),
        )
        .await
        .expect("count the chart's lines");
    assert_eq!(
        chart_lines,
        serde_json::Value::from(6),
        "a line per partition"
    );

    let png = browser.screenshot().await.expect("a screenshot");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-page.png");
    std::fs::write(&path, png).expect("write the screenshot");
    eprintln!("screenshot: {}", path.display());
    browser.close().await.expect("close the browser");
}

/// With a certificate and key, serve speaks HTTPS (checked by curl against
/// the CA that signed the certificate) and refuses plain HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_speaks_https_with_a_certificate() {
    let _turn = crate::turns::shared().await;
    // The services' Kafka certificate: issued for 127.0.0.1 by their CA.
    let ca = std::env::var("TENURE_KAFKA_SECURED_CA").unwrap_or_else(|_| {
        panic!("TENURE_KAFKA_SECURED_CA is not set: start the servers with scripts/services start")
    });
    let certs = std::path::Path::new(&ca)
        .parent()
        .expect("the certificates' folder")
        .to_owned();
    let (cert, key) = (certs.join("broker.pem"), certs.join("broker-key.pem"));
    let zookeeper = common::zookeeper::ZooKeeper::new("serve-tls").await;
    let store = vec![
        "--zookeeper".to_owned(),
        zookeeper.connect_string().to_owned(),
    ];
    let serve = start_serve(
        &store,
        &kafka::bootstrap(),
        &[
            "--tls-cert",
            cert.to_str().expect("a path"),
            "--tls-key",
            key.to_str().expect("a path"),
        ],
    );
    let url = format!("https://{}/healthz", serve.address);
    let curl = Command::new("curl")
        .args([
            "--silent",
            "--show-error",
            "--max-time",
            "20",
            "--cacert",
            &ca,
            &url,
        ])
        .output()
        .expect("run curl");
    assert!(
        curl.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&curl.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&curl.stdout), "ok\n");

    // Plain HTTP gets no HTTP answer.
    let mut stream = tokio::net::TcpStream::connect(serve.address)
        .await
        .expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.0\r\n\r\n")
        .await
        .expect("send");
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(WAIT, stream.read_to_end(&mut answer)).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "plain HTTP was served"
    );
}

/// `describe --watch` redraws the group in place as it changes: a member
/// joining appears without the command being run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_watch_redraws_the_group_as_it_changes() {
    let _turn = crate::turns::shared().await;
    let zookeeper = common::zookeeper::ZooKeeper::new("describe-watch").await;
    let connect = zookeeper.connect_string().to_owned();
    let client = kafka::client().await;
    let name = "describe-watch";
    let topic = kafka::topic(name);
    kafka::create_topic(&client, &topic, 2).await;
    let group = common::group(name);
    let backend = || -> Box<dyn Backend> {
        Box::new(tenure::zookeeper::ZooKeeperBackend::new(connect.clone()))
    };
    let first = Consumer::join(backend(), &group, "first", &topic).await;

    let mut child = tenure_command()
        .args(["--zookeeper", &connect, "--bootstrap", &kafka::bootstrap()])
        .args(["describe", &group, "--watch", "--kafka-interval", "PT0.3S"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start describe --watch");
    let stdout = child.stdout.take().expect("its stdout");
    let screen = Arc::new(Mutex::new(String::new()));
    let kept = screen.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut buffer = [0u8; 4096];
        while let Ok(read) = std::io::Read::read(&mut reader, &mut buffer) {
            if read == 0 {
                break;
            }
            kept.lock()
                .expect("screen")
                .push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    });
    // The latest picture: what follows the last home-and-clear.
    let picture = || {
        let all = screen.lock().expect("screen").clone();
        all.rsplit("\x1b[H\x1b[2J")
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let until = |what: &'static str, done: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let shown = picture();
            if done(&shown) {
                return shown;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "describe --watch never showed {what}; last picture:\n{shown}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let shown = until("the first member holding both partitions", &|p| {
        p.contains("status OK") && p.contains("1 member(s), 2 partition(s), 0 unowned")
    });
    assert!(shown.contains(&group), "{shown}");

    let second = Consumer::join(backend(), &group, "second", &topic).await;
    let shown = until("the second member's join", &|p| {
        p.contains("2 member(s), 2 partition(s), 0 unowned")
            && p.lines().any(|l| l.starts_with("second "))
    });
    assert!(
        shown.contains("second joined"),
        "the timeline shows it: {shown}"
    );
    let _ = child.kill();
    let _ = child.wait();
    first.handle.kill();
    second.handle.kill();
}
