//! Exactly-once output into a real PostgreSQL, from a real Kafka, with
//! members coordinated through a real ZooKeeper (all from `scripts/services
//! start`): every message lands in the table once, the stored offsets end
//! at the log end, a database that goes away costs time and nothing else,
//! and a partition whose stored token is newer than the member's claim is
//! never written. Faults on separate processes (SIGSTOP past the session,
//! a cut-off, SIGKILL, a store restart) are the chaos tool's, with the
//! `exactly_once_postgres` example as its member (`scripts/test`).

use tenure_tests as common;

use std::time::{Duration, Instant};

use common::etcd::Etcd;
use common::kafka;
use common::postgres::{self, Audit};
use common::proxy::Proxy;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::core::{FencingToken, TopicPartition};
use tenure::postgres::{MessageTable, PostgresSink, PostgresSinkError, PostgresTls};
use tenure::tokio::exactly_once::{ExactlyOnce, Fence, Report, Reports, Stage, TransactionalSink};
use tenure::tokio::{Backend, GroupMember, KafkaConfig};

type Consumer = ExactlyOnce<PostgresSink<MessageTable>>;
type ConsumerStreams = tenure::tokio::exactly_once::ExactlyOnceStreams<PostgresSinkError>;

/// A sink writing `messages` rows for `group`, at `url`.
async fn sink(url: &str, group: &str, messages: &str) -> PostgresSink<MessageTable> {
    PostgresSink::builder(url, group)
        .connections(2)
        .idle_in_transaction_timeout(Duration::from_secs(2))
        .connect(MessageTable::new(messages).expect("a valid table name"))
        .await
        .unwrap_or_else(|e| panic!("connect the sink: {e}"))
}

/// A member of `group` writing `messages` rows through a sink of its own
/// at `url`.
async fn join(
    backend: Box<dyn Backend>,
    url: &str,
    group: &str,
    messages: &str,
    name: &str,
    topic: &str,
) -> Consumer {
    // Its streams are not read: the audit reads the table.
    join_with(
        backend,
        sink(url, group, messages).await,
        group,
        name,
        topic,
    )
    .await
    .0
}

/// A member of `group` writing through `sink`.
async fn join_with(
    backend: Box<dyn Backend>,
    sink: PostgresSink<MessageTable>,
    group: &str,
    name: &str,
    topic: &str,
) -> (Consumer, ConsumerStreams) {
    let member = GroupMember::builder(common::config_for(group, name, topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()));
    ExactlyOnce::builder(member, sink)
        // Small batches: many transactions, so that the joins, closes and
        // kills below fall while partitions are being written.
        .max_batch(200)
        .retry_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .join(backend)
        .await
        .unwrap_or_else(|e| panic!("{name} cannot join: {e}"))
}

/// A topic of `partitions` partitions with `per_partition` messages each.
async fn topic(name: &str, partitions: u32, per_partition: usize) -> (String, Vec<i64>) {
    let client = kafka::client().await;
    let topic = kafka::topic(name);
    kafka::create_topic(&client, &topic, partitions).await;
    let producing: Vec<_> = (0..partitions)
        .map(|p| {
            let (client, topic) = (client.clone(), topic.clone());
            tokio::spawn(async move { kafka::produce(&client, &topic, p, per_partition).await })
        })
        .collect();
    for producer in producing {
        producer.await.expect("producer");
    }
    let ends = kafka::end_offsets(&client, &topic, partitions).await;
    (topic, ends)
}

/// Waits until the message table holds at least `rows` rows of `topic`.
async fn rows_reach(
    client: &tenure::postgres::tokio_postgres::Client,
    messages: &str,
    topic: &str,
    rows: u64,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let now = postgres::rows(client, messages, topic).await;
        if now >= rows {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{now} of {rows} rows written within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every partition's stored offset is its log end, and
/// returns the audit.
async fn audit_at_end(
    client: &tenure::postgres::tokio_postgres::Client,
    messages: &str,
    group: &str,
    topic: &str,
    ends: &[i64],
    within: Duration,
) -> Audit {
    let deadline = Instant::now() + within;
    loop {
        let audit = Audit::read(client, messages, group, topic, ends).await;
        if audit.offsets_at(ends) || Instant::now() >= deadline {
            return audit;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every report waiting, without waiting.
fn waiting(reports: &mut Reports<PostgresSinkError>) -> Vec<Report<PostgresSinkError>> {
    std::iter::from_fn(|| reports.try_next()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_100000_messages_while_members_join_close_and_die_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = ZooKeeper::new("exactly-once-100k").await;
    a_hundred_thousand_messages_once_each(&zookeeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_100000_messages_while_members_join_close_and_die_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = Etcd::new("exactly-once-100k").await;
    a_hundred_thousand_messages_once_each(&etcd).await;
}

/// 100,000 messages over 8 partitions, written while members join, close
/// and die: every one lands once, and the stored offsets end at the log end.
async fn a_hundred_thousand_messages_once_each(stores: &dyn Stores) {
    const PARTITIONS: u32 = 8;
    let (topic, ends) = topic("exactly-once-100k", PARTITIONS, 12_500).await;
    let total: i64 = ends.iter().sum();
    assert_eq!(total, 100_000);
    let group = common::group("exactly-once-100k");
    let messages = postgres::table("eo_100k");
    let url = postgres::url();
    let db = postgres::client().await;

    let m1_backend = stores.doomed().await;
    let m1 = join(m1_backend.0, &url, &group, &messages, "m1", &topic).await;
    let m2 = join(stores.backend(), &url, &group, &messages, "m2", &topic).await;
    rows_reach(&db, &messages, &topic, 15_000, Duration::from_secs(60)).await;
    let m3 = join(stores.backend(), &url, &group, &messages, "m3", &topic).await;
    rows_reach(&db, &messages, &topic, 35_000, Duration::from_secs(60)).await;
    // m1 dies: what it held stays claimed until its session expires, and
    // what it wrote stays written; its next owners start where the table
    // says.
    (m1_backend.1)();
    m1.kill();
    rows_reach(&db, &messages, &topic, 50_000, Duration::from_secs(60)).await;
    let m4 = join(stores.backend(), &url, &group, &messages, "m4", &topic).await;
    rows_reach(&db, &messages, &topic, 65_000, Duration::from_secs(60)).await;
    let _ = m2.close().await.expect("m2 closes");

    let audit = audit_at_end(
        &db,
        &messages,
        &group,
        &topic,
        &ends,
        Duration::from_secs(120),
    )
    .await;
    let stats = [m3.stats(), m4.stats()];
    let _ = m3.close().await.expect("m3 closes");
    let _ = m4.close().await.expect("m4 closes");
    assert!(
        audit.offsets_at(&ends),
        "stored offsets {:?}, log ends {ends:?}",
        audit.next_offsets
    );
    assert_eq!(
        (
            audit.rows,
            audit.duplicates,
            audit.lost,
            audit.token_inversions
        ),
        (100_000, 0, 0, 0),
        "rows, duplicates, lost, token inversions ({audit:?}; stats of m3, m4: {stats:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_database_unreachable_or_refusing_at_start_is_a_typed_error() {
    let _turn = crate::turns::shared().await;
    let group = common::group("exactly-once-unreachable");
    let messages = MessageTable::new(&postgres::table("eo_unreachable")).expect("valid name");
    // Nothing listens on a port just freed.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.local_addr().expect("its address").port()
    };
    let nowhere = format!("postgresql://tenure:tenure-secret@127.0.0.1:{closed}/tenure");
    match PostgresSink::builder(&nowhere, &group)
        .connect(messages.clone())
        .await
    {
        Err(PostgresSinkError::Connect { address, .. }) => {
            assert_eq!(address, format!("127.0.0.1:{closed}"));
        }
        Err(other) => panic!("an unreachable server gave {other}"),
        Ok(_) => panic!("connected to a port nothing listens on"),
    }
    let url = postgres::url();
    let wrong_password = url.replace("tenure-secret", "not-the-password");
    match PostgresSink::builder(&wrong_password, &group)
        .connect(messages.clone())
        .await
    {
        Err(PostgresSinkError::Connect { source, .. }) => {
            let code = source.code().map(|c| c.code().to_owned());
            assert_eq!(code.as_deref(), Some("28P01"), "{source}");
        }
        Err(other) => panic!("a wrong password gave {other}"),
        Ok(_) => panic!("logged in with a wrong password"),
    }
    assert!(matches!(
        PostgresSink::builder("postgresql://[not a url", &group)
            .connect(messages.clone())
            .await,
        Err(PostgresSinkError::ConnectionString { .. })
    ));
    assert!(matches!(
        PostgresSink::builder(&url, &group)
            .offsets_table("offsets; DROP TABLE x")
            .connect(messages)
            .await,
        Err(PostgresSinkError::TableName { .. })
    ));
    assert!(matches!(
        MessageTable::new("1abc"),
        Err(PostgresSinkError::TableName { .. })
    ));
}

fn tls_var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs scripts/services' PostgreSQL with TLS; start it \
             with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_sink_speaks_tls_to_a_trusted_server_only() {
    let _turn = crate::turns::shared().await;
    let group = common::group("exactly-once-tls");
    let messages = MessageTable::new(&postgres::table("eo_tls")).expect("valid name");
    let url = postgres::url();
    let ca = tls_var("TENURE_POSTGRES_TLS_CA");
    let pem = std::fs::read(&ca).unwrap_or_else(|e| panic!("read {ca}: {e}"));
    let db = postgres::client().await;
    // Every connection of a sink with TLS settings is a TLS connection, by
    // the server's account: trusting the CA from memory or from its file.
    for (how, tls) in [
        ("pem", PostgresTls::ca_pem(&pem).expect("the CA PEM")),
        ("file", PostgresTls::ca_file(&ca).expect("the CA file")),
    ] {
        let application = format!("tenure-tls-{how}-{}", std::process::id());
        let sink = PostgresSink::builder(&format!("{url}?application_name={application}"), &group)
            .connections(2)
            .tls(tls)
            .connect(messages.clone())
            .await
            .unwrap_or_else(|e| panic!("connect over TLS ({how}): {e}"));
        let rows = db
            .query(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = $1",
                &[&application],
            )
            .await
            .expect("the server's view of its connections");
        let ssl: Vec<bool> = rows.iter().map(|row| row.get(0)).collect();
        assert_eq!(ssl, [true, true], "the sink's connections ({how})");
        drop(sink);
    }
    // And the test's own connection, without TLS, says the view tells the
    // difference.
    let plain: bool = db
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("the test's connection")
        .get(0);
    assert!(!plain, "the test's own connection is plaintext");

    // A CA that did not sign the server's certificate: refused, saying so.
    let other = PostgresTls::ca_file(tls_var("TENURE_POSTGRES_TLS_OTHER_CA")).expect("a CA");
    match PostgresSink::builder(&url, &group)
        .tls(other)
        .connect(messages.clone())
        .await
    {
        Err(PostgresSinkError::Tls { detail, .. }) => {
            assert!(detail.contains("not trusted"), "{detail}");
        }
        Err(other) => panic!("an untrusted server gave {other}"),
        Ok(_) => panic!("connected to a server whose CA is not trusted"),
    }
    // TLS asked for in the URL, without settings to check the server with.
    match PostgresSink::builder(&format!("{url}?sslmode=require"), &group)
        .connect(messages.clone())
        .await
    {
        Err(PostgresSinkError::TlsSettings { detail }) => {
            assert!(detail.contains("PostgresSinkBuilder::tls"), "{detail}");
        }
        Err(other) => panic!("sslmode=require without TLS settings gave {other}"),
        Ok(_) => panic!("connected with sslmode=require and no way to check the server"),
    }
    // PEM that holds no certificate, and a file that is not there.
    for bad in [
        PostgresTls::ca_pem(b"not a certificate"),
        PostgresTls::ca_pem(b""),
        PostgresTls::ca_file("/nonexistent/ca.pem"),
    ] {
        match bad {
            Err(PostgresSinkError::TlsSettings { detail }) => {
                assert!(
                    detail.contains("no certificate") || detail.contains("/nonexistent/ca.pem"),
                    "{detail}"
                );
            }
            other => panic!("expected TlsSettings, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_database_cut_off_before_and_while_writing_loses_nothing() {
    let _turn = crate::turns::shared().await;
    const PARTITIONS: u32 = 4;
    let zookeeper = ZooKeeper::new("exactly-once-cut").await;
    let (topic, ends) = topic("exactly-once-cut", PARTITIONS, 3_000).await;
    let group = common::group("exactly-once-cut");
    let messages = postgres::table("eo_cut");
    let db = postgres::client().await;
    let server = postgres::url();
    let address = server
        .rsplit_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(address, _)| address.to_owned())
        .expect("TENURE_POSTGRES names host:port");
    let proxy = Proxy::start(&address).await;
    let proxied = server.replace(&address, &proxy.address.to_string());
    let sink = sink(&proxied, &group, &messages).await;

    // Cut before the member claims anything: fencing fails, is reported,
    // and no partition is fetched until it works.
    proxy.down();
    let (consumer, streams) = join_with(zookeeper.backend(), sink, &group, "m1", &topic).await;
    let mut reports = streams.reports;
    let first = tokio::time::timeout(Duration::from_secs(20), reports.next())
        .await
        .expect("a report within 20 s")
        .expect("the writers are running");
    match &first {
        Report::Failed {
            stage: Stage::Fence,
            error: PostgresSinkError::Connect { .. } | PostgresSinkError::Query { .. },
            ..
        } => {}
        other => panic!("a cut database at the start gave {other:?}"),
    }
    assert_eq!(postgres::rows(&db, &messages, &topic).await, 0);
    proxy.up();
    rows_reach(&db, &messages, &topic, 3_000, Duration::from_secs(60)).await;

    // Cut while writing: writes fail, are reported and retried.
    proxy.down();
    let failed_at = Instant::now();
    let mut write_failed = false;
    while !write_failed && failed_at.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(report)) = tokio::time::timeout(Duration::from_secs(1), reports.next()).await
        {
            write_failed |= matches!(
                report,
                Report::Failed {
                    stage: Stage::Write,
                    ..
                }
            );
        }
    }
    assert!(
        write_failed,
        "no failed write reported while the database was cut off"
    );
    proxy.up();

    let audit = audit_at_end(
        &db,
        &messages,
        &group,
        &topic,
        &ends,
        Duration::from_secs(60),
    )
    .await;
    let stats = consumer.stats();
    let _ = waiting(&mut reports);
    let _ = consumer.close().await.expect("closes");
    assert!(stats.failures >= 2, "{stats:?}");
    assert!(
        audit.offsets_at(&ends),
        "stored {:?}, ends {ends:?}",
        audit.next_offsets
    );
    assert_eq!(
        (audit.rows, audit.duplicates, audit.lost),
        (12_000, 0, 0),
        "rows, duplicates, lost ({audit:?}, {stats:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_never_overwrites_a_partition_with_a_newer_token() {
    let _turn = crate::turns::shared().await;
    const PARTITIONS: u32 = 3;
    // Before any member registers its metrics.
    let recorded = common::recorder::installed();
    let zookeeper = ZooKeeper::new("exactly-once-newer").await;
    let (topic, ends) = topic("exactly-once-newer", PARTITIONS, 500).await;
    let group = common::group("exactly-once-newer");
    let messages = postgres::table("eo_newer");
    let url = postgres::url();
    let db = postgres::client().await;
    let sink = sink(&url, &group, &messages).await;
    // Partition 0: written by a claim far newer than any this group's
    // store will hand out (a table restored from elsewhere, say).
    // Partition 2: a row this sink never writes (a negative offset).
    let newer: i64 = 1_000_000_000;
    for (partition, next_offset, token) in [(0i32, 7i64, newer), (2, -5, 1)] {
        db.execute(
            "INSERT INTO tenure_offsets (consumer_group, topic, partition, next_offset, token) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&group, &topic, &partition, &next_offset, &token],
        )
        .await
        .expect("seed the offsets table");
    }
    let (consumer, streams) = join_with(zookeeper.backend(), sink, &group, "m1", &topic).await;
    let mut reports = streams.reports;
    let (mut fenced, mut corrupt) = (None, false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while (fenced.is_none() || !corrupt) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(1), reports.next()).await {
            Ok(Some(Report::Fenced {
                partition,
                token,
                stored,
                dropped,
            })) => {
                fenced = Some((partition, token, stored, dropped));
            }
            Ok(Some(Report::Failed {
                partition,
                error: PostgresSinkError::Corrupt { .. },
                ..
            })) => {
                assert_eq!(partition, TopicPartition::new(topic.as_str(), 2));
                corrupt = true;
            }
            _ => {}
        }
    }
    let (partition, token, stored, dropped) = fenced.expect("partition 0 reported fenced");
    assert_eq!(partition, TopicPartition::new(topic.as_str(), 0));
    assert!(token < FencingToken(newer as u64));
    assert_eq!((stored, dropped), (FencingToken(newer as u64), 0));
    assert!(corrupt, "the corrupt row of partition 2 was not reported");

    // Partition 1 is written whole; 0 and 2 are not touched.
    rows_reach(&db, &messages, &topic, 500, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let audit = Audit::read(&db, &messages, &group, &topic, &ends).await;
    let stats = consumer.stats();
    let _ = consumer.close().await.expect("closes");
    assert_eq!((audit.rows, audit.duplicates), (500, 0), "{audit:?}");
    assert_eq!(audit.next_offsets.get(&1), Some(&Some(ends[1])));
    let row = db
        .query_one(
            "SELECT next_offset, token FROM tenure_offsets \
             WHERE consumer_group = $1 AND topic = $2 AND partition = 0",
            &[&group, &topic],
        )
        .await
        .expect("partition 0's row");
    assert_eq!(
        (row.get::<_, Option<i64>>(0), row.get::<_, i64>(1)),
        (Some(7), newer)
    );
    let untouched = db
        .query_one(
            &format!("SELECT count(*) FROM {messages} WHERE topic = $1 AND partition <> 1"),
            &[&topic],
        )
        .await
        .expect("count");
    assert_eq!(untouched.get::<_, i64>(0), 0);
    assert_eq!(stats.fenced_claims, 1, "{stats:?}");
    let of_group = [("group", group.as_str())];
    assert_eq!(
        recorded.counter_sum("tenure_sink_claims_fenced_total", &of_group),
        1
    );
    assert_eq!(
        recorded.counter_sum("tenure_sink_messages_total", &of_group),
        500
    );
    assert!(recorded.counter_sum("tenure_sink_failures_total", &of_group) >= 1);
}

/// A member whose partition a newer claim fenced while it was writing (a
/// member paused past its session, whose partitions moved on, say): its
/// next batch is refused and nothing of it lands, although its own fence
/// went through when it claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_a_write_after_a_newer_fence_is_refused() {
    let _turn = crate::turns::shared().await;
    let zookeeper = ZooKeeper::new("exactly-once-fenced-write").await;
    let (topic, _) = topic("exactly-once-fenced-write", 1, 300).await;
    let group = common::group("exactly-once-fenced-write");
    let messages = postgres::table("eo_fenced_write");
    let url = postgres::url();
    let db = postgres::client().await;
    let (consumer, streams) = join_with(
        zookeeper.backend(),
        sink(&url, &group, &messages).await,
        &group,
        "m1",
        &topic,
    )
    .await;
    let mut reports = streams.reports;
    rows_reach(&db, &messages, &topic, 300, Duration::from_secs(30)).await;

    // Another claim of partition 0, far newer, fences it in the table.
    let partition = TopicPartition::new(topic.as_str(), 0);
    let newer = FencingToken(1_000_000_000);
    let elsewhere = sink(&url, &group, &messages).await;
    assert!(
        matches!(
            elsewhere.fence(&partition, newer).await,
            Ok(Fence::Held { .. })
        ),
        "the newer claim fences the partition"
    );

    // What m1 fetches next is refused as a whole.
    kafka::produce(&*kafka::client().await, &topic, 0, 100).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let fenced = loop {
        assert!(Instant::now() < deadline, "no Fenced report within 30 s");
        match tokio::time::timeout(Duration::from_secs(1), reports.next()).await {
            Ok(Some(Report::Fenced {
                partition: p,
                token,
                stored,
                dropped,
            })) => break (p, token, stored, dropped),
            Ok(None) => panic!("the reports ended"),
            _ => {}
        }
    };
    assert_eq!(fenced.0, partition);
    assert!(fenced.1 < newer, "{fenced:?}");
    assert_eq!(fenced.2, newer);
    assert!(fenced.3 > 0, "a batch was dropped: {fenced:?}");
    assert_eq!(
        postgres::rows(&db, &messages, &topic).await,
        300,
        "nothing of the refused batch landed"
    );
    let stats = consumer.stats();
    assert!(stats.fenced_writes >= 1, "{stats:?}");
    let _ = consumer.close().await.expect("closes");
}
