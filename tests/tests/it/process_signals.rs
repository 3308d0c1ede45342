//! Members as separate OS processes, stopped and continued with real
//! signals (SIGSTOP, SIGCONT) against real ZooKeeper, etcd and Kafka, and
//! audited line by line: every message and assignment change the process
//! handed out is printed with the moment it was handed out and its fencing
//! token.

use tenure_tests as common;

use std::time::Duration;

use common::etcd::Etcd;
use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::tokio::{GroupMember, KafkaConfig};

use crate::consumer_process::{read_events, signal, spawn_consumer, wall_ms, HandedOut, Told};

/// A consumer process frozen with SIGSTOP, with messages buffered and its
/// assignment change unread, for longer than its session timeout, while
/// another member claims its partition; then continued with SIGCONT, and
/// at once asking for its next message. It must hand out nothing more
/// under its old claim, neither a message nor the assignment: the check is
/// made at the moment of handing out, so it cannot race the process's own
/// task noticing that the session lapsed.
///
/// The process is stopped while it waits between two messages (after
/// `--pause-after`), not in the middle of handing one out: a stop that
/// fell between a hand-out's lease check and its stamp would show a
/// message handed out while the lease held as stamped after SIGCONT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_woken_past_its_session_hands_out_nothing_under_its_old_claim_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    let zookeeper = ZooKeeper::new("sigstop").await;
    let store = [
        "--store".to_owned(),
        "zookeeper".to_owned(),
        "--address".to_owned(),
        zookeeper.connect_string().to_owned(),
    ];
    woken_process(&zookeeper, &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_woken_past_its_session_hands_out_nothing_under_its_old_claim_on_etcd() {
    let _turn = crate::turns::shared().await;
    let etcd = Etcd::new("sigstop").await;
    let store = [
        "--store".to_owned(),
        "etcd".to_owned(),
        "--address".to_owned(),
        etcd.endpoint().to_owned(),
        "--prefix".to_owned(),
        etcd.prefix().to_owned(),
    ];
    woken_process(&etcd, &store).await;
}

async fn woken_process(stores: &dyn Stores, store: &[String]) {
    let client = kafka::client().await;
    let topic = kafka::topic("sigstop");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 5_000).await;
    let group = common::group("sigstop");

    let mut args = store.to_vec();
    for (flag, value) in [
        ("--kafka", kafka::bootstrap()),
        ("--group", group.clone()),
        ("--topic", topic.clone()),
        ("--member", "a".to_owned()),
        ("--session-ms", common::SESSION.as_millis().to_string()),
        ("--delay-ms", "2".to_owned()),
        ("--pause-after", "50".to_owned()),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    let mut consumer = spawn_consumer(&args);
    let first = |what: &'static str| async move { panic!("the consumer process {what}") };

    // It consumes: its buffer fills far ahead of its slow processing.
    let mut before = Vec::new();
    while before.len() < 50 {
        match tokio::time::timeout(Duration::from_secs(30), consumer.messages.recv()).await {
            Ok(Some(message)) => before.push(message),
            Ok(None) => first("exited before consuming").await,
            Err(_) => first("consumed nothing within 30 s").await,
        }
    }
    let old_token = before[0].token;
    // One partition, handed out in order from its start, under one claim.
    for (i, message) in before.iter().enumerate() {
        assert_eq!(
            (message.partition, message.offset, message.token),
            (0, i as i64, old_token),
            "the consumer process's first messages"
        );
    }

    // It waits for the test between two messages: nothing is being handed
    // out when it stops.
    match tokio::time::timeout(Duration::from_secs(30), consumer.paused.recv()).await {
        Ok(Some(_)) => {}
        Ok(None) => first("exited before pausing").await,
        Err(_) => first("did not pause within 30 s after its 50th message").await,
    }
    signal(&consumer.child, "STOP");

    // Another member takes the partition once the frozen one's session
    // expired on the server.
    let mut b = GroupMember::builder(common::config_for(&group, "b", &topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("b cannot join: {e}"));
    let taken = tokio::time::timeout(Duration::from_secs(30), b.next_message())
        .await
        .expect("b consumes within 30 s")
        .expect("a message for b");
    assert!(
        taken.token().0 > old_token,
        "b's claim {} is not newer than the frozen claim {old_token}",
        taken.token().0
    );
    taken.ack();
    let b_token = taken.token();
    let b_consumes = tokio::spawn(async move {
        while let Some(message) = b.next_message().await {
            message.ack();
        }
    });

    signal(&consumer.child, "CONT");
    // Its assignment change has waited unread all along, and its next
    // message unasked: it may read and ask now.
    let go_ms = wall_ms();
    read_events(&mut consumer);
    // What it hands out now, for as long as its own task needs to catch up
    // and far longer: nothing can be awaited here, since what is checked is
    // that nothing happens.
    let mut after = Vec::new();
    let window = tokio::time::Instant::now() + common::SESSION * 2;
    while let Ok(Some(message)) = tokio::time::timeout_at(window, consumer.messages.recv()).await {
        after.push(message);
    }
    assert!(
        consumer
            .child
            .try_wait()
            .expect("look at the process")
            .is_none(),
        "the consumer process exited after SIGCONT"
    );
    signal(&consumer.child, "KILL");
    let _ = consumer.child.wait();
    b_consumes.abort();
    let mut events = Vec::new();
    while let Ok(event) = consumer.events.try_recv() {
        events.push(event);
    }

    // Every change it told was told after SIGCONT (what the test relies
    // on): none may give it the partition under the claim b took over.
    assert!(
        events.iter().all(|e| e.at_ms >= go_ms),
        "the consumer process read assignment changes before it was let: {events:?}"
    );
    let stale_events: Vec<&Told> = events
        .iter()
        .filter(|e| {
            e.partition == 0
                && e.token == old_token
                && (e.kind == "assigned" || e.kind == "resumed")
        })
        .collect();
    assert!(
        stale_events.is_empty(),
        "after SIGCONT the process told its application it had partition 0 under its old \
         claim {old_token} (the partition was b's under {}): {stale_events:?}",
        b_token.0
    );

    // It paused after its 50th message: everything after that was handed
    // out after SIGCONT.
    assert!(
        after.iter().all(|m| m.at_ms >= go_ms),
        "the consumer process handed out messages while it should have waited: {after:?}"
    );
    let stale: Vec<HandedOut> = after
        .iter()
        .filter(|m| m.token == old_token)
        .copied()
        .collect();
    assert!(
        stale.is_empty(),
        "after SIGCONT the process handed out {} message(s) under its old claim {old_token} \
         (the partition was b's under {}): {stale:?}",
        stale.len(),
        b_token.0
    );
}
