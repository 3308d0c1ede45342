//! A member on a follower of the 3-node ZooKeeper ensemble of
//! `scripts/services`, cut off from its leader just after the member's
//! heartbeat was answered: the follower has counted that heartbeat, but
//! reports it to the leader, which alone expires sessions, only with its
//! answer to the leader's next ping (every half tick), which the cut stops.
//! The leader then counts the session down from the activity before. A
//! member that took the answer for the leader's word would hand out
//! messages after the leader ended its session, while another member
//! already consumes the partition. The member here is a separate OS
//! process (`consumer-under-test`), audited message by message. The test
//! takes its turn alone (`crate::turns`): every client of the ensemble
//! feels a cut.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::core::records::Layout;
use tenure::core::MemberId;
use tenure::tokio::{GroupMember, KafkaConfig};
use tenure::zookeeper::ZooKeeperBackend;
use tenure_testkit::zookeeper_server as server;
use tenure_tests as common;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use common::cluster::Cluster;
use common::kafka;

use crate::consumer_process::{read_events, signal, spawn_consumer, wall_ms, HandedOut};

/// The 3-node ZooKeeper ensemble of `scripts/services`.
const CLUSTER: Cluster = Cluster::ZooKeeper;

/// The member's session: the default, with the default suspension margin.
const SESSION: Duration = Duration::from_secs(10);

/// Tries at most, each with a fresh group: a cut lands within the window
/// (before the leader's next ping reaches the follower) only when running
/// the cut takes less than what is left of the half tick.
const TRIES: u32 = 4;

/// How long after its assignment a member's lease leans on its
/// heartbeats alone, not on its session's opening and first writes.
const STEADY: Duration = Duration::from_secs(6);

/// ZooKeeper's opcode of `sync`, the request that opens each heartbeat.
const SYNC: i32 = 9;

/// A member on a follower, idle, its partition held. The follower is cut
/// from its leader the moment the member's heartbeat `sync` is answered
/// (seen on the wire by a forwarder in front of the follower), and messages
/// start to arrive. Another member, on the majority, joins and takes the
/// partition once the leader has ended the first member's session. No
/// message may be handed out by the first member after the second one
/// handed out its first, and its lease must end before the leader's count
/// does, by the suspension margin (a fifth of the session) at least: the
/// member hands out only until what the leader is sure to have counted,
/// plus the session, less the margin. A try counts as landing in the
/// window when the leader ended the
/// session (the registration went) sooner than a session after that
/// heartbeat: it then had not counted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_on_a_follower_cut_off_after_its_heartbeat_hands_out_nothing_past_its_session() {
    let _turn = crate::turns::alone().await;
    let client = kafka::client().await;
    let mut landed = Vec::new();
    for attempt in 1..=TRIES {
        let topic = kafka::topic("follower-session");
        kafka::create_topic(&client, &topic, 1).await;
        let outcome = one_try(&client, &topic, attempt).await;
        eprintln!(
            "try {attempt}: the leader ended a's session {} ms and b took the partition {} ms \
             after a's heartbeat was answered; a handed out {} message(s) after the cut, the \
             last {:?} ms after that answer",
            outcome.ended_after_heartbeat_ms,
            outcome.taken_after_heartbeat_ms,
            outcome.handed_out_after_cut,
            outcome.last_handed_out_after_heartbeat_ms,
        );
        if outcome.ended_after_heartbeat_ms < SESSION.as_millis() {
            landed.push(attempt);
            break;
        }
    }
    assert!(
        !landed.is_empty(),
        "none of {TRIES} cuts landed before the follower reported the heartbeat: \
         the test saw nothing of the window it is for"
    );
}

/// What one try saw.
struct Outcome {
    /// From the heartbeat's answer to the leader's end of the session.
    ended_after_heartbeat_ms: u128,
    /// From the heartbeat's answer to the second member's first message.
    taken_after_heartbeat_ms: u128,
    /// From the heartbeat's answer to the first member's last message.
    last_handed_out_after_heartbeat_ms: Option<u128>,
    /// Messages the first member handed out after the cut.
    handed_out_after_cut: usize,
}

async fn one_try(client: &Arc<rskafka::client::Client>, topic: &str, attempt: u32) -> Outcome {
    let leader = CLUSTER.wait_for_leader();
    let follower = Cluster::follower_of(leader);
    // After a cut heals, a node serves again only once it has synced with
    // its leader.
    serving(&CLUSTER.server(follower)).await;
    let all = CLUSTER.servers().join(",");
    let chroot = server::fresh_chroot_at(&all, "follower-session").await;
    let group = common::group("follower-session");
    let mut tap = SyncTap::start(&CLUSTER.server(follower)).await;

    let mut args = Vec::new();
    for (flag, value) in [
        ("--store", "zookeeper".to_owned()),
        ("--address", format!("{}{chroot}", tap.address)),
        ("--kafka", kafka::bootstrap()),
        ("--group", group.clone()),
        ("--topic", topic.to_owned()),
        ("--member", "a".to_owned()),
        ("--session-ms", SESSION.as_millis().to_string()),
        ("--delay-ms", "1".to_owned()),
    ] {
        args.extend([flag.to_owned(), value]);
    }
    let mut a = spawn_consumer(&args);
    read_events(&mut a);
    let assigned = tokio::time::timeout(Duration::from_secs(30), a.events.recv())
        .await
        .unwrap_or_else(|_| panic!("try {attempt}: a was assigned nothing within 30 s"))
        .unwrap_or_else(|| panic!("try {attempt}: the consumer process exited"));
    assert_eq!(
        (assigned.kind.as_str(), assigned.partition),
        ("assigned", 0),
        "try {attempt}: a's first assignment change"
    );

    // A heartbeat's answer once a's lease leans on its heartbeats rather
    // than on the session's opening, then the cut at once.
    let steady = assigned.at_ms + STEADY.as_millis();
    let heartbeat_ms = loop {
        let answered = tokio::time::timeout(SESSION, tap.sync_answers.recv())
            .await
            .unwrap_or_else(|_| panic!("try {attempt}: a sent no heartbeat within its session"))
            .unwrap_or_else(|| panic!("try {attempt}: the forwarder stopped"));
        if answered >= steady {
            break answered;
        }
    };
    let cut = CLUSTER.cut_link(follower, leader);
    let cut_ms = wall_ms();

    // When the leader ends a's session: its registration goes.
    let majority: Vec<String> = (1..=3u8)
        .filter(|n| *n != follower)
        .map(|n| CLUSTER.server(n))
        .collect();
    let on_majority = format!("{}{chroot}", majority.join(","));
    let watching = server::client(&on_majority).await;
    let member = MemberId::new("a").expect("a member id");
    let registration = Layout::new("", &group).member(&member);
    let (stat, watcher) = watching
        .check_and_watch_stat(&registration)
        .await
        .unwrap_or_else(|e| panic!("try {attempt}: watch a's registration: {e}"));
    assert!(
        stat.is_some(),
        "try {attempt}: a's registration is gone already"
    );
    let session_ended = tokio::spawn(async move {
        let _ = watcher.changed().await;
        wall_ms()
    });

    // Messages arrive for a from now on, and b, on the majority, is ready.
    let producing = {
        let client = client.clone();
        let topic = topic.to_owned();
        tokio::spawn(async move {
            loop {
                kafka::produce(&client, &topic, 0, 20).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let backend = ZooKeeperBackend::new(on_majority);
    let mut b = GroupMember::builder(common::config_for(&group, "b", topic))
        .kafka(KafkaConfig::new(&kafka::bootstrap()))
        .join(backend)
        .await
        .unwrap_or_else(|e| panic!("try {attempt}: b cannot join: {e}"));
    let taken = tokio::time::timeout(SESSION * 3, b.next_message())
        .await
        .unwrap_or_else(|_| panic!("try {attempt}: b consumed nothing within 30 s"))
        .unwrap_or_else(|| panic!("try {attempt}: b's messages ended"));
    let taken_ms = wall_ms();
    let ended_ms = tokio::time::timeout(SESSION, session_ended)
        .await
        .unwrap_or_else(|_| panic!("try {attempt}: b consumes, but a's registration stays"))
        .unwrap_or_else(|e| panic!("try {attempt}: the watch of a's registration: {e}"));
    taken.ack();
    let b_token = taken.token().0;
    let b_consumes = tokio::spawn(async move {
        while let Some(message) = b.next_message().await {
            message.ack();
        }
    });

    // a's lease ends within a session of the heartbeat whatever it
    // counted; what it hands out until well after that is its whole story
    // under the claim. Nothing can be awaited: what is checked is that
    // nothing more happens.
    let until = heartbeat_ms + SESSION.as_millis() + 1_000;
    let mut from_a: Vec<HandedOut> = Vec::new();
    loop {
        let left = until.saturating_sub(wall_ms());
        if left == 0 {
            break;
        }
        let wait = Duration::from_millis(u64::try_from(left).unwrap_or(u64::MAX));
        match tokio::time::timeout(wait, a.messages.recv()).await {
            Ok(Some(message)) => from_a.push(message),
            Ok(None) | Err(_) => break,
        }
    }
    signal(&a.child, "KILL");
    let _ = a.child.wait();
    b_consumes.abort();
    producing.abort();
    drop(cut);

    let late: Vec<&HandedOut> = from_a.iter().filter(|m| m.at_ms >= taken_ms).collect();
    assert!(
        late.is_empty(),
        "try {attempt}: a, on follower {follower} cut from leader {leader} \
         {} ms after its heartbeat's answer, handed out {} message(s) after b took \
         the partition under claim {b_token} ({} ms after that answer): {late:?}",
        cut_ms.saturating_sub(heartbeat_ms),
        late.len(),
        taken_ms.saturating_sub(heartbeat_ms),
    );
    // The guarantee itself: a member hands out only until what the leader
    // is sure to have counted, plus the session, less the margin. The
    // leader ends the session no sooner than its count plus the session.
    let margin = (SESSION / 5).as_millis();
    let past_lease: Vec<&HandedOut> = from_a
        .iter()
        .filter(|m| m.at_ms + margin >= ended_ms)
        .collect();
    assert!(
        past_lease.is_empty(),
        "try {attempt}: a handed out {} message(s) within the suspension margin ({margin} ms) \
         of the moment the leader ended its session ({} ms after its heartbeat's answer): \
         its lease ran on past what the leader had counted: {past_lease:?}",
        past_lease.len(),
        ended_ms.saturating_sub(heartbeat_ms),
    );
    Outcome {
        ended_after_heartbeat_ms: ended_ms.saturating_sub(heartbeat_ms),
        taken_after_heartbeat_ms: taken_ms.saturating_sub(heartbeat_ms),
        last_handed_out_after_heartbeat_ms: from_a
            .last()
            .map(|m| m.at_ms.saturating_sub(heartbeat_ms)),
        handed_out_after_cut: from_a.iter().filter(|m| m.at_ms >= cut_ms).count(),
    }
}

/// Waits until the server at `address` serves a client of its own (a
/// session opened and a `sync` answered): within 30 s, or the test fails.
async fn serving(address: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let connecting = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(address);
        let synced = tokio::time::timeout(Duration::from_secs(2), async {
            let client = connecting.await.ok()?;
            client.sync("/").await.ok()
        })
        .await;
        if let Ok(Some(())) = synced {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ZooKeeper node {address} does not serve 30 s after its cut healed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A forwarder in front of one ZooKeeper server that reads the client's
/// requests and the server's replies frame by frame, and says, in wall
/// clock milliseconds, when the reply to a `sync` passes to the client.
struct SyncTap {
    address: SocketAddr,
    sync_answers: mpsc::UnboundedReceiver<u128>,
    acceptor: JoinHandle<()>,
}

impl SyncTap {
    async fn start(server: &str) -> SyncTap {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the forwarder");
        let address = listener.local_addr().expect("its address");
        let (answers, sync_answers) = mpsc::unbounded_channel();
        let server = server.to_owned();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(&server).await else {
                    continue;
                };
                let syncs = Arc::new(Mutex::new(HashSet::new()));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = upstream.into_split();
                let requests = syncs.clone();
                tokio::spawn(forward(client_read, server_write, move |frame| {
                    // A request: xid, then opcode.
                    if let (Some(xid), Some(SYNC)) = (int_at(frame, 0), int_at(frame, 4)) {
                        if let Ok(mut syncs) = requests.lock() {
                            syncs.insert(xid);
                        }
                    }
                }));
                let answers = answers.clone();
                tokio::spawn(forward(server_read, client_write, move |frame| {
                    // A reply: xid, then zxid and error.
                    let answered = int_at(frame, 0)
                        .is_some_and(|xid| syncs.lock().is_ok_and(|mut s| s.remove(&xid)));
                    if answered {
                        let _ = answers.send(wall_ms());
                    }
                }));
            }
        });
        SyncTap {
            address,
            sync_answers,
            acceptor,
        }
    }
}

impl Drop for SyncTap {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

/// Copies `from` to `to`, showing `frame` every length-prefixed frame
/// after the first (the session's connect request or response, which has
/// no header).
async fn forward(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frame: impl FnMut(&[u8]),
) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buffer[..n]);
        while let Some(length) = int_at(&pending, 0) {
            let end = 4 + usize::try_from(length).unwrap_or(0);
            if pending.len() < end {
                break;
            }
            if !first {
                frame(&pending[4..end]);
            }
            first = false;
            pending.drain(..end);
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// The big-endian `i32` at `at` in `bytes`, if there is one.
fn int_at(bytes: &[u8], at: usize) -> Option<i32> {
    let word = bytes.get(at..at + 4)?;
    Some(i32::from_be_bytes(word.try_into().ok()?))
}
