//! The consumer API a member's application uses, on a real ZooKeeper and a
//! real Kafka 4.x (both started by `scripts/services start`): positions,
//! seeks by time and to the log's bounds, offsets for times, watermarks,
//! committed offsets, pauses, lost versus revoked partitions, a member id
//! already in use, application start offsets that fail, the `none`
//! initial-offset policy, and the end of the error stream.

use tenure_tests as common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;
use tenure::core::{FetchFrom, InitialOffset, TopicPartition};
use tenure::tokio::{
    generate_member_id, AssignmentEvent, Events, GroupMember, JoinError, KafkaConfig, KafkaError,
    LogOffsets, MemberEnd, Message, Messages, Problem, SeekTo,
};

/// How long any one awaited event may take.
const WAIT: Duration = Duration::from_secs(20);

/// The next message, within [`WAIT`].
async fn next_message(messages: &mut Messages) -> Message {
    tokio::time::timeout(WAIT, messages.next())
        .await
        .expect("a message within 20 s")
        .expect("the member hands out messages")
}

/// Reads `events` until `want` holds for one, within `limit`; returns it
/// with every event read before it.
async fn event_where(
    events: &mut Events,
    limit: Duration,
    what: &str,
    want: impl Fn(&AssignmentEvent) -> bool,
) -> (AssignmentEvent, Vec<AssignmentEvent>) {
    let mut before = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("no {what} within {limit:?}; events: {before:?}"))
            .unwrap_or_else(|| panic!("events ended before {what}; events: {before:?}"));
        if want(&event) {
            return (event, before);
        }
        before.push(event);
    }
}

/// Produces `count` records to partition 0 of `topic`, all with the
/// create time `at`, in one batch.
async fn produce_at(client: &rskafka::client::Client, topic: &str, count: usize, at: SystemTime) {
    let millis = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    let timestamp = rskafka::chrono::DateTime::from_timestamp_millis(millis).expect("a valid time");
    let target = client
        .partition_client(topic, 0, UnknownTopicHandling::Retry)
        .await
        .expect("partition client");
    let records = (0..count)
        .map(|i| Record {
            key: None,
            value: Some(format!("{millis}#{i}").into_bytes().into()),
            headers: Vec::new(),
            timestamp,
        })
        .collect();
    target
        .produce(records, Compression::NoCompression)
        .await
        .unwrap_or_else(|e| panic!("produce to {topic}/0: {e}"));
}

fn millis(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
}

/// Three groups of five messages, created 10 s apart in the past: a time
/// finds the first message at or after it, a seek to a time, to the
/// beginning and to the end lands there, and the position, the committed
/// offset and the watermarks say what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_to_a_time_lands_on_the_first_offset_at_or_after_it() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("seek-time");
    kafka::create_topic(&client, &topic, 1).await;
    // Whole milliseconds: Kafka keeps no finer time.
    let base = SystemTime::UNIX_EPOCH
        + Duration::from_millis(millis(SystemTime::now() - Duration::from_secs(120)) as u64);
    let times = [
        base,
        base + Duration::from_secs(10),
        base + Duration::from_secs(20),
    ];
    for at in times {
        produce_at(&client, &topic, 5, at).await;
    }
    let zookeeper = ZooKeeper::new("seek-time").await;
    let group = common::group("seek-time");
    // Commits only when asked, so each commit is the test's own.
    let config =
        common::config_for(&group, "m1", &topic).with_commit_interval(Duration::from_secs(3600));
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let (member, streams) = member.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    let tp = TopicPartition::new(&topic, 0);

    assert_eq!(
        member.watermarks(&tp).await.expect("watermarks"),
        LogOffsets { start: 0, end: 15 },
        "the log holds the 15 messages produced"
    );
    let offset_for = |time: SystemTime| {
        let member = &member;
        let tp = tp.clone();
        async move {
            let found = member
                .offsets_for_times([(tp.clone(), time)])
                .await
                .expect("offsets for times");
            assert_eq!(found.len(), 1, "one answer per partition asked: {found:?}");
            found[&tp]
        }
    };
    let [t0, t1, t2] = times;
    let ms = Duration::from_millis(1);
    assert_eq!(offset_for(t0 - Duration::from_secs(1)).await, Some(0));
    assert_eq!(offset_for(t0).await, Some(0), "at T0");
    assert_eq!(offset_for(t0 + ms).await, Some(5), "just after T0");
    assert_eq!(offset_for(t1).await, Some(5), "at T1");
    assert_eq!(offset_for(t1 + ms).await, Some(10), "just after T1");
    assert_eq!(offset_for(t2).await, Some(10), "at T2");
    assert_eq!(offset_for(t2 + ms).await, None, "after every message");

    // Nothing committed: the claim starts at the oldest message.
    let first = next_message(&mut messages).await;
    assert_eq!(first.offset(), 0);
    assert_eq!(
        first.timestamp(),
        tenure::runtime::Timestamp::CreateTime(millis(t0)),
        "the create time produced"
    );
    let token = first.token();
    first.ack();
    assert_eq!(
        member.position(&tp).await.expect("position"),
        (token, Some(1)),
        "the position after taking offset 0"
    );
    assert_eq!(
        member.committed(&tp).await.expect("committed"),
        (token, None),
        "nothing committed yet"
    );
    let report = member.commit().await.expect("the member runs");
    assert!(report.all_written(), "{report:?}");
    assert_eq!(
        member.committed(&tp).await.expect("committed"),
        (token, Some(1)),
        "what commit() wrote"
    );

    // Forward to T1: the first message at T1, offset 5.
    let landed = member
        .seek_to(tp.clone(), token, SeekTo::Time(t1))
        .await
        .expect("seeks to T1");
    assert_eq!(landed, 5);
    let message = next_message(&mut messages).await;
    assert_eq!(
        (message.offset(), message.timestamp().millis()),
        (5, millis(t1)),
        "the next message after the seek to T1"
    );
    message.ack();
    assert_eq!(
        member.position(&tp).await.expect("position"),
        (token, Some(6))
    );
    let report = member.commit().await.expect("the member runs");
    assert!(report.all_written(), "{report:?}");
    assert_eq!(
        member.committed(&tp).await.expect("committed"),
        (token, Some(6)),
        "the skipped messages count as processed"
    );
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(6));

    // A millisecond after T1 finds the T2 group, not the T1 one.
    let landed = member
        .seek_to(tp.clone(), token, SeekTo::Time(t1 + ms))
        .await
        .expect("seeks just after T1");
    assert_eq!(landed, 10);
    let message = next_message(&mut messages).await;
    assert_eq!(message.offset(), 10);
    assert_eq!(
        member.position(&tp).await.expect("position"),
        (token, Some(11))
    );

    // Back to the beginning, as the watermarks say it is.
    let landed = member
        .seek_to(tp.clone(), token, SeekTo::Beginning)
        .await
        .expect("seeks to the beginning");
    assert_eq!(
        landed,
        member.watermarks(&tp).await.expect("watermarks").start
    );
    let message = next_message(&mut messages).await;
    assert_eq!(message.offset(), 0, "handed out again from the beginning");

    // To the end: only what is produced from now on.
    let landed = member
        .seek_to(tp.clone(), token, SeekTo::End)
        .await
        .expect("seeks to the end");
    assert_eq!(
        landed,
        member.watermarks(&tp).await.expect("watermarks").end
    );
    assert_eq!(landed, 15);
    // A time after every message lands on the end too.
    let landed = member
        .seek_to(tp.clone(), token, SeekTo::Time(t2 + ms))
        .await
        .expect("seeks past the last message's time");
    assert_eq!(landed, 15);
    produce_at(&client, &topic, 1, SystemTime::now()).await;
    let message = next_message(&mut messages).await;
    assert_eq!(message.offset(), 15, "the first message after the end");
    message.ack();
    assert_eq!(
        member.position(&tp).await.expect("position"),
        (token, Some(16))
    );
    assert_eq!(member.lag(&tp).await.expect("lag"), Some(0));
    // Seeking back never moved the committed offset back.
    assert_eq!(
        member.committed(&tp).await.expect("committed"),
        (token, Some(6))
    );
    let report = member.close().await.expect("closes");
    assert!(report.all_written(), "{report:?}");
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(16));
}

/// A paused partition is listed with the claim it was paused under until
/// it is resumed; a partition the member does not own is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_is_listed_by_paused() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("paused");
    kafka::create_topic(&client, &topic, 2).await;
    let zookeeper = ZooKeeper::new("paused").await;
    let group = common::group("paused");
    let member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let (member, mut streams) = member.split();
    // Consumed once told: a pause before then has nothing to pause.
    let mut owned = BTreeMap::new();
    while owned.len() < 2 {
        let (event, _) = event_where(&mut streams.events, WAIT, "both claims", |e| {
            matches!(e, AssignmentEvent::Assigned { .. })
        })
        .await;
        owned.insert(event.partition().clone(), event.token());
    }
    let (tp0, tp1) = (
        TopicPartition::new(&topic, 0),
        TopicPartition::new(&topic, 1),
    );
    assert!(member.paused().await.expect("runs").is_empty());

    member.pause(tp0.clone()).await.expect("pauses");
    assert_eq!(
        member.paused().await.expect("runs"),
        BTreeMap::from([(tp0.clone(), owned[&tp0])])
    );
    // Not owned: left alone, so not listed.
    let elsewhere = TopicPartition::new(&topic, 7);
    member.pause(elsewhere).await.expect("runs");
    member.pause(tp1.clone()).await.expect("pauses");
    assert_eq!(
        member.paused().await.expect("runs"),
        BTreeMap::from([(tp0.clone(), owned[&tp0]), (tp1.clone(), owned[&tp1])])
    );

    member.resume(tp1.clone()).await.expect("resumes");
    assert_eq!(
        member.paused().await.expect("runs"),
        BTreeMap::from([(tp0.clone(), owned[&tp0])])
    );

    // What the listing stands for: the paused partition hands out nothing
    // while the other does. Partition 0 is written first, so a pause that
    // did not hold would show among the first messages.
    let mut messages = streams.messages.expect("a member with Kafka");
    kafka::produce(&client, &topic, 0, 5).await;
    kafka::produce(&client, &topic, 1, 5).await;
    for expected in 0..5 {
        let message = next_message(&mut messages).await;
        assert_eq!(
            (message.partition(), message.offset()),
            (1, expected),
            "only the unpaused partition is handed out"
        );
        message.ack();
    }
    member.resume(tp0).await.expect("resumes");
    assert!(member.paused().await.expect("runs").is_empty());
    for expected in 0..5 {
        let message = next_message(&mut messages).await;
        assert_eq!(
            (message.partition(), message.offset()),
            (0, expected),
            "the resumed partition from its start"
        );
        message.ack();
    }
    let _ = member.close().await.expect("closes");
}

/// The partitions a rebalance moves away are released (`Revoked`); those
/// a member still held when its session expired are lost (`Lost`), never
/// told as released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_partition_is_told_as_lost_and_a_released_one_as_revoked() {
    let _turn = crate::turns::shared().await;
    let zookeeper = ZooKeeper::new("lost").await;
    let group = common::group("lost");
    let build = |name: &str| {
        GroupMember::builder(common::config(&group, name))
            .partitions([(common::TOPIC.to_owned(), 4)].into())
            .auto_drain(true)
            .seed(7)
    };
    let (backend, proxy) = zookeeper.through_proxy().await;
    let m1 = build("m1").join(backend).await.expect("m1 joins");
    let (m1, mut m1_streams) = m1.split();
    let mut held = BTreeMap::new();
    while held.len() < 4 {
        let (event, _) = event_where(&mut m1_streams.events, WAIT, "m1's claims", |e| {
            matches!(e, AssignmentEvent::Assigned { .. })
        })
        .await;
        held.insert(event.partition().clone(), event.token());
    }
    let assigned: BTreeSet<TopicPartition> = held.keys().cloned().collect();

    let m2 = build("m2")
        .join(zookeeper.backend())
        .await
        .expect("m2 joins");
    let (m2, mut m2_streams) = m2.split();
    let mut released = BTreeSet::new();
    while released.len() < 2 {
        let (event, before) = event_where(&mut m1_streams.events, WAIT, "m1's releases", |e| {
            e.ends_claim()
        })
        .await;
        assert!(
            matches!(event, AssignmentEvent::Revoked { .. }),
            "a partition m1 handed over was not told as released: {event:?} after {before:?}"
        );
        released.insert(event.partition().clone());
    }
    let kept: BTreeSet<TopicPartition> = assigned.difference(&released).cloned().collect();
    assert_eq!(kept.len(), 2, "m1 keeps two of four");
    let mut taken = BTreeSet::new();
    while taken.len() < 2 {
        let (event, _) = event_where(&mut m2_streams.events, WAIT, "m2's claims", |e| {
            matches!(e, AssignmentEvent::Assigned { .. })
        })
        .await;
        taken.insert(event.partition().clone());
    }
    assert_eq!(taken, released, "m2 claims what m1 released");

    // m1 loses the store: its session expires on the server, and m2 takes
    // over m1's partitions once their owner nodes are gone.
    proxy.down();
    while taken.len() < 4 {
        let (event, _) = event_where(
            &mut m2_streams.events,
            common::SESSION + WAIT,
            "m2 taking over after m1's expiry",
            |e| matches!(e, AssignmentEvent::Assigned { .. }),
        )
        .await;
        taken.insert(event.partition().clone());
    }
    // Back in reach, m1 learns its session expired.
    proxy.up();
    let mut lost = BTreeSet::new();
    while lost.len() < 2 {
        let (event, before) = event_where(&mut m1_streams.events, WAIT, "m1's losses", |e| {
            e.ends_claim()
        })
        .await;
        assert!(
            matches!(event, AssignmentEvent::Lost { .. }),
            "a partition m1 never released was told as released: {event:?} after {before:?}"
        );
        assert_eq!(
            Some(&event.token()),
            held.get(event.partition()),
            "lost under the claim m1 held"
        );
        lost.insert(event.partition().clone());
    }
    assert_eq!(lost, kept, "m1 lost what it kept");
    let _ = m2.close().await.expect("m2 closes");
    let _ = m1.close().await;
}

/// A second process that uses the id of a live member fails to join
/// after the registration wait, naming the id; the live member keeps its
/// claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_a_live_members_id_fails_to_join() {
    let _turn = crate::turns::shared().await;
    let zookeeper = ZooKeeper::new("id-in-use").await;
    let group = common::group("id-in-use");
    let id = generate_member_id();
    let build = || {
        GroupMember::builder(common::config(&group, id.as_str()))
            .partitions([(common::TOPIC.to_owned(), 2)].into())
            .auto_drain(true)
    };
    let mut a = build().join(zookeeper.backend()).await.expect("A joins");
    let mut view = a.watch_view();
    let owned = tokio::time::timeout(WAIT, view.wait_for(|v| v.settled && v.owned.len() == 2))
        .await
        .expect("A owns both partitions within 20 s")
        .expect("A's view is published")
        .owned
        .clone();
    while a.try_next_event().is_some() {}

    let wait = Duration::from_secs(2);
    let started = tokio::time::Instant::now();
    let joined = tokio::time::timeout(
        wait + Duration::from_secs(10),
        build().registration_wait(wait).join(zookeeper.backend()),
    )
    .await
    .expect("B's join ends within 12 s");
    match joined {
        Err(JoinError::MemberIdInUse { member, waited, .. }) => {
            assert_eq!(member, id, "the id in use");
            assert!(
                (wait..wait + Duration::from_secs(5)).contains(&waited),
                "gave up after {waited:?}, not about {wait:?}"
            );
        }
        Err(other) => panic!("B failed otherwise: {other}"),
        Ok(_) => panic!("B joined with A's id while A lives"),
    }
    assert!(started.elapsed() >= wait);

    // A is untouched: same claims, nothing taken from it, still the owner.
    assert_eq!(a.view().owned, owned, "A's claims changed");
    assert!(a.view().registered, "A is still registered");
    let mut told = Vec::new();
    while let Some(event) = a.try_next_event() {
        told.push(event);
    }
    assert!(
        !told.iter().any(AssignmentEvent::ends_claim),
        "A lost a claim: {told:?}"
    );
    for partition in owned.keys() {
        assert_eq!(
            zookeeper.owner(&group, partition).await.as_deref(),
            Some(id.as_str()),
            "the store's owner of {partition}"
        );
    }
    let _ = a.close().await.expect("A closes");
}

/// The application's start offset fails twice, then answers: each failure
/// is reported, and the claim starts where the application said, not at
/// the store's committed offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_offsets_failing_twice_then_succeeding_starts_at_the_applications_offset() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("start-fails");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 50).await;
    let zookeeper = ZooKeeper::new("start-fails").await;
    let group = common::group("start-fails");
    let tp = TopicPartition::new(&topic, 0);

    // A first member commits 10 to the store.
    let first = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(zookeeper.backend())
        .await
        .expect("m1 joins");
    let (first, streams) = first.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    for expected in 0..10 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.offset(), expected);
        message.ack();
    }
    let report = first.close().await.expect("m1 closes");
    assert!(report.all_written(), "{report:?}");
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(10));

    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let member = GroupMember::builder(common::config_for(&group, "m2", &topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .start_offsets(move |_, _| {
            let attempt = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if attempt < 2 {
                    Err(std::io::Error::other(format!(
                        "the offsets' database is down ({attempt})"
                    )))
                } else {
                    Ok(Some(30))
                }
            }
        })
        .join(zookeeper.backend())
        .await
        .expect("m2 joins");
    let (member, streams) = member.split();
    let (mut messages, mut errors) = (
        streams.messages.expect("a member with Kafka"),
        streams.errors,
    );
    let message = next_message(&mut messages).await;
    assert_eq!(
        message.offset(),
        30,
        "starts at the application's offset, not the store's (10)"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 3, "asked until it answered");
    let mut reported = Vec::new();
    while reported.len() < 2 {
        let problem = tokio::time::timeout(WAIT, errors.next())
            .await
            .expect("the failures are reported within 20 s")
            .expect("the member runs");
        if let Problem::StartOffset {
            partition, token, ..
        } = problem
        {
            reported.push((partition, token));
        }
    }
    assert_eq!(
        reported,
        vec![(tp.clone(), message.token()), (tp.clone(), message.token())],
        "both failures reported for the claim"
    );
    let _ = member.close().await.expect("m2 closes");
}

/// With the `none` initial-offset policy and nothing committed, the
/// partition is reported and not fetched until the application seeks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_offset_none_waits_for_a_seek() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("no-offset");
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, 10).await;
    let zookeeper = ZooKeeper::new("no-offset").await;
    let group = common::group("no-offset");
    let tp = TopicPartition::new(&topic, 0);
    let config = common::config_for(&group, "m1", &topic).with_initial_offset(InitialOffset::None);
    let member = GroupMember::builder(config)
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(zookeeper.backend())
        .await
        .expect("joins");
    let (member, streams) = member.split();
    let (mut messages, mut events, mut errors) = (
        streams.messages.expect("a member with Kafka"),
        streams.events,
        streams.errors,
    );
    let (assigned, _) = event_where(&mut events, WAIT, "the claim", |e| {
        matches!(e, AssignmentEvent::Assigned { .. })
    })
    .await;
    let AssignmentEvent::Assigned {
        partition,
        from,
        token,
    } = assigned
    else {
        unreachable!("matched above")
    };
    assert_eq!((partition, from), (tp.clone(), FetchFrom::Unset));
    loop {
        let problem = tokio::time::timeout(WAIT, errors.next())
            .await
            .expect("NoOffset reported within 20 s")
            .expect("the member runs");
        if let Problem::Kafka(KafkaError::NoOffset { partition }) = problem {
            assert_eq!(partition, tp);
            break;
        }
    }
    assert_eq!(
        member.position(&tp).await.expect("position"),
        (token, None),
        "no position before the seek"
    );
    // An absence cannot be awaited: a bounded second with no message is
    // the check that nothing is fetched before the seek.
    if let Ok(message) = tokio::time::timeout(Duration::from_secs(1), messages.next()).await {
        panic!("handed out before any seek: {message:?}");
    }

    member.seek(tp.clone(), token, 2).await.expect("seeks");
    for expected in 2..10 {
        let message = next_message(&mut messages).await;
        assert_eq!(message.offset(), expected, "from the seek on");
        message.ack();
    }
    let report = member.close().await.expect("closes");
    assert!(report.all_written(), "{report:?}");
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(10));
}

/// A killed member's error stream ends with why; a closed member's ends
/// with no such item (on the embedded store: this is about the streams).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_ends_its_error_stream_with_the_reason() {
    let _turn = crate::turns::shared().await;
    let store = common::memory::Memory::new();
    let group = common::group("ended");
    let start = |name: &str| {
        GroupMember::builder(common::config(&group, name))
            .partitions([(common::TOPIC.to_owned(), 2)].into())
            .auto_drain(true)
            .join(store.backend())
    };
    /// Every problem until the stream ends.
    async fn rest(mut errors: tenure::tokio::Errors) -> Vec<Problem> {
        let mut all = Vec::new();
        loop {
            match tokio::time::timeout(WAIT, errors.next()).await {
                Ok(Some(problem)) => all.push(problem),
                Ok(None) => return all,
                Err(_) => panic!("the error stream did not end within 20 s: {all:?}"),
            }
        }
    }

    let killed = start("m1").await.expect("m1 joins");
    let mut view = killed.watch_view();
    tokio::time::timeout(WAIT, view.wait_for(|v| v.registered))
        .await
        .expect("m1 registers within 20 s")
        .expect("m1's view is published");
    let (handle, streams) = killed.split();
    handle.kill();
    let problems = rest(streams.errors).await;
    match problems.as_slice() {
        [before @ .., Problem::Ended(MemberEnd::Killed)] => assert!(
            !before.iter().any(|p| matches!(p, Problem::Ended(_))),
            "ended twice: {problems:?}"
        ),
        _ => panic!("the last problem is not Ended(Killed): {problems:?}"),
    }

    let closed = start("m2").await.expect("m2 joins");
    let mut view = closed.watch_view();
    tokio::time::timeout(WAIT, view.wait_for(|v| v.registered))
        .await
        .expect("m2 registers within 20 s")
        .expect("m2's view is published");
    let (handle, streams) = closed.split();
    let _ = handle.close().await.expect("m2 closes");
    let problems = rest(streams.errors).await;
    assert!(
        !problems.iter().any(|p| matches!(p, Problem::Ended(_))),
        "a closed member's errors say it ended: {problems:?}"
    );
}

/// A KafkaConfig whose members call an application stuck after `stall`.
fn stalling_after(stall: Duration) -> KafkaConfig {
    let mut config = KafkaConfig::new(&kafka::bootstrap());
    config.max_processing_stall = Some(stall);
    config
}

/// Waits until every partition of `topic` below `partitions` has `count`
/// committed in `group`.
async fn all_committed(
    zookeeper: &ZooKeeper,
    group: &str,
    topic: &str,
    partitions: u32,
    count: i64,
) {
    let deadline = tokio::time::Instant::now() + common::SESSION + WAIT;
    for p in 0..partitions {
        let tp = TopicPartition::new(topic, p);
        while zookeeper.committed(group, &tp).await != Some(count) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "partition {p} never fully committed: {:?}",
                zookeeper.committed(group, &tp).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reads `errors` until a `ProcessingStalled` comes, within [`WAIT`].
async fn stalled(
    errors: &mut tenure::tokio::Errors,
) -> (TopicPartition, tenure::core::FencingToken, Duration) {
    loop {
        match tokio::time::timeout(WAIT, errors.next()).await {
            Ok(Some(Problem::ProcessingStalled {
                partition,
                token,
                stalled_for,
            })) => return (partition, token, stalled_for),
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the error stream ended with no ProcessingStalled"),
            Err(_) => panic!("no ProcessingStalled within {WAIT:?}"),
        }
    }
}

/// An application that stops taking messages (a deadlock, a hung call):
/// once its messages have waited `max_processing_stall`, its member says
/// so, leaves the group and ends saying why, and another member takes every
/// partition and consumes it to the end; what the stuck application
/// acknowledges afterwards commits nothing, and the token it holds is older
/// than the claim the partition moved to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_application_is_noticed_and_its_partitions_move_on() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("stuck");
    kafka::create_topic(&client, &topic, 4).await;
    for p in 0..4 {
        kafka::produce(&client, &topic, p, 20).await;
    }
    let zookeeper = ZooKeeper::new("stuck").await;
    let group = common::group("stuck");
    let stall = Duration::from_secs(2);

    // Alone, the stuck member claims every partition; its application
    // takes one message and nothing after it.
    let stuck = GroupMember::builder(common::config_for(&group, "stuck", &topic))
        .kafka(stalling_after(stall))
        .join(zookeeper.backend())
        .await
        .expect("the stuck member joins");
    let (stuck, streams) = stuck.split();
    let mut stuck_messages = streams.messages.expect("a member with Kafka");
    let mut stuck_errors = streams.errors;
    let held = next_message(&mut stuck_messages).await;

    // A member that processes everything it is given.
    let healthy = GroupMember::builder(common::config_for(&group, "healthy", &topic))
        .kafka(stalling_after(stall))
        .join(zookeeper.backend())
        .await
        .expect("the healthy member joins");
    let (healthy, streams) = healthy.split();
    let mut messages = streams.messages.expect("a member with Kafka");
    let consumer = tokio::spawn(async move {
        let mut tokens = BTreeMap::new();
        while let Some(message) = messages.next().await {
            tokens.insert(message.partition(), message.token());
            message.ack();
        }
        tokens
    });

    let (partition, _, stalled_for) = stalled(&mut stuck_errors).await;
    assert!(stalled_for >= stall, "called stuck after {stalled_for:?}");
    assert_eq!(partition.topic.as_ref(), topic, "{partition}");
    assert_eq!(
        tokio::time::timeout(WAIT + common::SESSION, stuck.ended()).await,
        Ok(MemberEnd::ProcessingStalled),
        "the stuck member left and says why"
    );
    all_committed(&zookeeper, &group, &topic, 4, 20).await;

    // The stuck application wakes up: its acknowledgement commits nothing,
    // and what it writes elsewhere is fenced by a token older than the
    // claim that consumed the partition after it.
    let (held_partition, held_offset, held_token) = (held.partition(), held.offset(), held.token());
    held.ack();
    drop(stuck_messages);
    let tp = TopicPartition::new(&topic, held_partition);
    assert_eq!(zookeeper.committed(&group, &tp).await, Some(20));
    let report = healthy.close().await.expect("the healthy member closes");
    assert!(report.all_written(), "{report:?}");
    let tokens = tokio::time::timeout(WAIT, consumer)
        .await
        .expect("the healthy stream ends")
        .expect("the consumer");
    assert!(
        tokens.get(&held_partition).is_some_and(|t| *t > held_token),
        "partition {held_partition} (held at {held_offset} under {held_token:?}) moved to a newer claim: {tokens:?}"
    );
}

/// With a stream per partition, a stall counts per partition: an
/// application that reads every partition but one is stuck on that one,
/// and its member leaves the group all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partition_stream_left_unread_is_a_stuck_application() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("stuck-stream");
    kafka::create_topic(&client, &topic, 2).await;
    for p in 0..2 {
        kafka::produce(&client, &topic, p, 10).await;
    }
    let zookeeper = ZooKeeper::new("stuck-stream").await;
    let group = common::group("stuck-stream");
    let member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(stalling_after(Duration::from_secs(2)))
        .per_partition_streams(true)
        .join(zookeeper.backend())
        .await
        .expect("join");
    let (member, mut streams) = member.split();
    let mut partition_streams = streams
        .partition_streams
        .take()
        .expect("streams per partition");
    let mut left_unread = None;
    let mut reader = None;
    for _ in 0..2 {
        let stream = tokio::time::timeout(WAIT, partition_streams.next())
            .await
            .expect("a stream per partition")
            .expect("a stream");
        if stream.partition.partition == 0 {
            left_unread = Some(stream);
        } else {
            let mut stream = stream;
            reader = Some(tokio::spawn(async move {
                while let Some(message) = stream.next().await {
                    message.ack();
                }
            }));
        }
    }
    let (partition, _, _) = stalled(&mut streams.errors).await;
    assert_eq!(
        partition.partition, 0,
        "the partition whose stream waits unread"
    );
    assert_eq!(
        tokio::time::timeout(WAIT + common::SESSION, member.ended()).await,
        Ok(MemberEnd::ProcessingStalled)
    );
    assert_eq!(
        zookeeper
            .committed(&group, &TopicPartition::new(&topic, 1))
            .await,
        Some(10),
        "the partition read to its end was committed as the member left"
    );
    drop(left_unread);
    if let Some(reader) = reader {
        let _ = tokio::time::timeout(WAIT, reader).await;
    }
}
