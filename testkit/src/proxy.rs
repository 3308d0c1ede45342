//! A TCP proxy in front of a server (ZooKeeper, etcd, a Kafka listener)
//! that a test can stall or cut, to make the client lose its connection
//! (and, held long enough, its session or lease), or that puts a distance
//! between the client and the server (a benchmark's round trip).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mode {
    /// Bytes flow; otherwise they wait in the kernel buffers.
    forward: bool,
    /// Bytes from the server flow too; otherwise only the client's do,
    /// and the server's answers wait in the kernel buffers.
    answers: bool,
    /// New connections are taken; otherwise closed at once.
    accept: bool,
    /// Connections of an older generation are closed.
    generation: u64,
    /// How long each chunk of bytes waits, either way, before it goes on.
    delay: Duration,
}

impl Mode {
    /// Whether bytes going `direction` flow in this mode.
    fn lets(self, direction: Direction) -> bool {
        match direction {
            Direction::Up => self.forward,
            Direction::Down => self.forward && self.answers,
        }
    }
}

/// The proxy; it stops when dropped.
pub struct Proxy {
    /// Where clients connect (`127.0.0.1:port`).
    pub address: SocketAddr,
    mode: watch::Sender<Mode>,
    acceptor: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding a fresh local port to `server` (`host:port`).
    pub async fn start(server: &str) -> Proxy {
        Proxy::start_at("127.0.0.1:0", server).await
    }

    /// Starts forwarding `listen` (`host:port`) to `server`: for a server
    /// that tells its clients to come back to a fixed address (a Kafka
    /// listener that advertises the proxy's port).
    pub async fn start_at(listen: &str, server: &str) -> Proxy {
        let listener = TcpListener::bind(listen)
            .await
            .unwrap_or_else(|e| panic!("bind the proxy at {listen}: {e}"));
        let address = listener.local_addr().expect("proxy address");
        let (mode, watching) = watch::channel(Mode {
            forward: true,
            answers: true,
            accept: true,
            generation: 0,
            delay: Duration::ZERO,
        });
        let server = server.to_owned();
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = watching.clone();
                if !mode.borrow().accept {
                    drop(client);
                    continue;
                }
                tokio::spawn(pipe(client, server.clone(), mode));
            }
        });
        Proxy {
            address,
            mode,
            acceptor,
        }
    }

    /// Starts forwarding a fresh local port to `server`, each chunk of
    /// bytes either way going on `one_way` after the proxy read it: a
    /// request and its answer take `2 × one_way` more than they would.
    pub async fn start_delayed(server: &str, one_way: Duration) -> Proxy {
        let proxy = Proxy::start(server).await;
        proxy.delay(one_way);
        proxy
    }

    /// From now on, each chunk of bytes read either way goes on `one_way`
    /// after it was read, in order, however many are on their way: a link
    /// of that length, not a server that slow. Chunks already on their way
    /// keep the delay they were read with. The other modes apply as well:
    /// a stalled, deaf or cut proxy holds or drops a chunk whose time has
    /// come as it would a chunk just read.
    pub fn delay(&self, one_way: Duration) {
        self.mode.send_modify(|m| m.delay = one_way);
    }

    /// Bytes stop flowing both ways; connections stay open.
    pub fn stall(&self) {
        self.mode.send_modify(|m| m.forward = false);
    }

    /// Bytes flow to the server and none come back: requests are carried
    /// out and their answers never arrive (until [`Proxy::up`], which
    /// closes the connections they wait on).
    pub fn deaf(&self) {
        self.mode.send_modify(|m| m.answers = false);
    }

    /// Closes every connection and refuses new ones.
    pub fn down(&self) {
        self.mode.send_modify(|m| {
            m.forward = false;
            m.accept = false;
            m.generation += 1;
        });
    }

    /// Closes every connection (stalled ones included) and forwards new ones.
    pub fn up(&self) {
        self.mode.send_modify(|m| {
            m.forward = true;
            m.answers = true;
            m.accept = true;
            m.generation += 1;
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.down();
    }
}

async fn pipe(client: TcpStream, server: String, mode: watch::Receiver<Mode>) {
    let generation = mode.borrow().generation;
    let Ok(upstream) = TcpStream::connect(&server).await else {
        return;
    };
    // A link sends what it is given: the proxy's own sockets must not hold
    // a small chunk back until the last one is acknowledged (Nagle), which
    // a client's delayed acknowledgements made 40 ms once chunks came apart
    // in time. (Clients that leave Nagle on keep it on their own socket.)
    for socket in [&client, &upstream] {
        if socket.set_nodelay(true).is_err() {
            return;
        }
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    // Each direction waits on its own: bytes held back one way (an answer
    // read as the proxy went deaf) must not hold back the other way's.
    // The connection closes, both halves dropped, once either ends.
    tokio::select! {
        () = carry(client_read, server_write, mode.clone(), generation, Direction::Up) => {}
        () = carry(server_read, client_write, mode, generation, Direction::Down) => {}
    }
}

/// Starts a proxy of one-way delay `one_way` in front of the one server
/// `address` names, and returns it with the address that reaches the
/// server through it: a benchmark's store at a distance. `address` is
/// `host:port`, with or without a scheme before it (etcd's `http://`)
/// and a path after it (a ZooKeeper chroot), both kept.
pub async fn at_distance(address: &str, one_way: Duration) -> Result<(Proxy, String), String> {
    let (scheme, rest) = match address.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), address),
    };
    let (server, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if server.is_empty() || server.contains(',') {
        return Err(format!(
            "{address:?}: a delayed proxy stands in front of one server, not {server:?}"
        ));
    }
    let proxy = Proxy::start_delayed(server, one_way).await;
    let through = format!("{scheme}{}{path}", proxy.address);
    Ok((proxy, through))
}

/// How many chunks may be on their way in one direction of a connection
/// before the proxy stops reading: enough for a link of tens of
/// milliseconds at the rates the tests and benchmarks reach (a chunk is up
/// to 16 KiB), while a stalled reader still leaves bytes in the kernel's
/// buffers, where a client sees its writes block.
const IN_FLIGHT: usize = 1024;

/// Carries bytes going `direction` from `from` to `to` while the mode lets
/// them, until either side closes or the connection's generation ends.
///
/// A reader takes chunks in and stamps each with the moment it is due; a
/// writer sends each on at that moment. The two run apart so that chunks
/// on their way overlap, as on a long link: a chunk read at `t` goes on at
/// `t + delay` however many were read before it, not after their delays
/// in turn. Without a delay a chunk is due as it is read.
async fn carry(
    from: OwnedReadHalf,
    to: OwnedWriteHalf,
    mode: watch::Receiver<Mode>,
    generation: u64,
    direction: Direction,
) {
    let (queue, queued) = mpsc::channel(IN_FLIGHT);
    let reading = take_in(from, queue, mode.clone(), generation, direction);
    let writing = send_on(queued, to, mode, generation, direction);
    tokio::pin!(reading, writing);
    tokio::select! {
        () = &mut writing => {}
        // The source closed: what was read before still goes on (an answer
        // sent just before the server closed), then the writer ends, the
        // queue being empty and closed.
        () = &mut reading => writing.await,
    }
}

/// Reads chunks going `direction` while the mode lets them and queues
/// each with the moment it is due, until the source closes, the writer
/// ends or the connection's generation ends.
async fn take_in(
    mut from: OwnedReadHalf,
    queue: mpsc::Sender<(Instant, Vec<u8>)>,
    mut mode: watch::Receiver<Mode>,
    generation: u64,
    direction: Direction,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let current = *mode.borrow_and_update();
        if current.generation != generation {
            return;
        }
        tokio::select! {
            changed = mode.changed() => if changed.is_err() { return },
            read = from.read(&mut buffer), if current.lets(direction) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let due = Instant::now() + mode.borrow().delay;
                    if !passes(&mut mode, generation, direction).await
                        || queue.send((due, buffer[..n].to_vec())).await.is_err()
                    {
                        return;
                    }
                }
            },
        }
    }
}

/// Writes each queued chunk to `to` once it is due and the mode lets it,
/// until the queue closes and is empty, `to` fails or the connection's
/// generation ends.
async fn send_on(
    mut queued: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    generation: u64,
    direction: Direction,
) {
    while let Some((due, chunk)) = queued.recv().await {
        if !arrives(&mut mode, generation, due).await
            || !passes(&mut mode, generation, direction).await
            || to.write_all(&chunk).await.is_err()
        {
            return;
        }
    }
}

/// Waits until `due`: false if the connection's generation ends first (a
/// cut link drops what is on it at once).
async fn arrives(mode: &mut watch::Receiver<Mode>, generation: u64, due: Instant) -> bool {
    // Without a delay, nothing to wait for (nor an alarm to set).
    if Instant::now() >= due {
        return mode.borrow().generation == generation;
    }
    let mut rung = alarm(due);
    loop {
        if mode.borrow_and_update().generation != generation {
            return false;
        }
        tokio::select! {
            // An alarm lost with its thread rings at once rather than never.
            _ = &mut rung => return true,
            changed = mode.changed() => if changed.is_err() { return false },
        }
    }
}

/// A receiver that completes at `due`, to within tens of microseconds.
///
/// Tokio's timers count whole milliseconds and round a deadline up to the
/// next one: a 0.5 ms delay took 1 to 2 ms, and a 1 ms round trip through
/// the proxy 3.5 ms. One thread of the process keeps every pending alarm
/// and sleeps until the earliest, as precisely as the kernel wakes a
/// thread.
fn alarm(due: Instant) -> oneshot::Receiver<()> {
    static ALARMS: OnceLock<std::sync::mpsc::Sender<(Instant, oneshot::Sender<()>)>> =
        OnceLock::new();
    let (ring, rung) = oneshot::channel();
    let alarms = ALARMS.get_or_init(|| {
        let (set, alarms) = std::sync::mpsc::channel();
        // If the thread cannot start, every alarm rings at once: its
        // sender is dropped below, the receiver completes with an error.
        let _ = std::thread::Builder::new()
            .name("proxy-alarms".to_owned())
            .spawn(move || ring_alarms(alarms));
        set
    });
    // A send fails only if the thread is gone: the alarm rings at once.
    let _ = alarms.send((due, ring));
    rung
}

/// The alarms' thread: rings each alarm at its moment, for ever.
fn ring_alarms(alarms: std::sync::mpsc::Receiver<(Instant, oneshot::Sender<()>)>) {
    // By moment, then order of setting (two alarms may share a moment).
    let mut pending: BTreeMap<(Instant, u64), oneshot::Sender<()>> = BTreeMap::new();
    let mut set = 0u64;
    loop {
        let now = Instant::now();
        while let Some(entry) = pending.first_entry() {
            if entry.key().0 > now {
                break;
            }
            // The writer may have gone (its connection closed).
            let _ = entry.remove().send(());
        }
        let next = match pending.first_key_value() {
            Some(((due, _), _)) => alarms.recv_timeout(due.saturating_duration_since(now)),
            None => alarms
                .recv()
                .map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((due, ring)) => {
                pending.insert((due, set), ring);
                set += 1;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Which way bytes go through a connection of the proxy.
#[derive(Clone, Copy)]
enum Direction {
    /// From the client to the server.
    Up,
    /// From the server to the client: an answer.
    Down,
}

/// Whether bytes just read may go on, once the mode allows it: false when
/// the connection is to close. The mode is looked at again after the read,
/// because the read may have taken bytes written after the mode changed (a
/// doomed member's goodbye, sent once the proxy is down, must never reach
/// the server); while it holds them back, they wait as they would in the
/// kernel's buffers.
async fn passes(mode: &mut watch::Receiver<Mode>, generation: u64, direction: Direction) -> bool {
    loop {
        let current = *mode.borrow_and_update();
        if current.generation != generation {
            return false;
        }
        if current.lets(direction) {
            return true;
        }
        if mode.changed().await.is_err() {
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How long the server side waits for bytes that must not come.
    const QUIET: Duration = Duration::from_millis(50);

    /// A client's bytes written once the proxy is down (a killed member's
    /// goodbye) never reach the server. The pipe's wait for bytes and its
    /// wait for a new mode can both be ready when it wakes; it must not
    /// forward what it read then. Many rounds, since each is a race.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bytes_written_after_down_never_reach_the_server() {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server_address = server.local_addr().expect("address").to_string();
        let mut forwarded = 0;
        for round in 0..200 {
            let proxy = Proxy::start(&server_address).await;
            let mut client = TcpStream::connect(proxy.address).await.expect("connect");
            let (mut upstream, _) = server.accept().await.expect("accept");
            // The connection works before the cut.
            client.write_all(b"hello").await.expect("write");
            let mut hello = [0u8; 5];
            upstream.read_exact(&mut hello).await.expect("read");

            proxy.down();
            // Refused writes are fine: the proxy may have closed already.
            let _ = client.write_all(b"goodbye").await;
            let mut late = [0u8; 16];
            match tokio::time::timeout(QUIET, upstream.read(&mut late)).await {
                Ok(Ok(n)) if n > 0 => {
                    forwarded += 1;
                    eprintln!("round {round}: {n} bytes reached the server after down");
                }
                _ => {}
            }
        }
        assert_eq!(forwarded, 0, "rounds that let bytes through after down");
    }

    /// A deaf proxy still carries the client's bytes to the server, even
    /// while it holds an answer it read as it went deaf: a request sent
    /// then is carried out, and only its answer is lost. (A pipe that
    /// waited in one place for both directions held the requests back
    /// too, so that a lost batch was sometimes never made.) Many rounds,
    /// since the answer's read and the new mode race.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_reach_the_server_while_an_answer_is_held() {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server_address = server.local_addr().expect("address").to_string();
        for round in 0..200 {
            let proxy = Proxy::start(&server_address).await;
            let mut client = TcpStream::connect(proxy.address).await.expect("connect");
            let (mut upstream, _) = server.accept().await.expect("accept");
            client.write_all(b"hello").await.expect("write");
            let mut hello = [0u8; 5];
            upstream.read_exact(&mut hello).await.expect("read");

            // An answer on its way as the proxy goes deaf.
            upstream.write_all(b"answer").await.expect("write");
            proxy.deaf();
            client.write_all(b"request").await.expect("write");
            let mut request = [0u8; 7];
            let carried =
                tokio::time::timeout(Duration::from_secs(2), upstream.read_exact(&mut request))
                    .await;
            assert!(
                matches!(carried, Ok(Ok(_))),
                "round {round}: a request sent to a deaf proxy never reached the server"
            );
            assert_eq!(&request, b"request", "round {round}");
        }
    }

    /// An upstream server that sends back whatever it reads, on each
    /// connection, until the connection closes.
    async fn echo_server() -> String {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = server.local_addr().expect("address").to_string();
        tokio::spawn(async move {
            while let Ok((mut connection, _)) = server.accept().await {
                tokio::spawn(async move {
                    let (mut reading, mut writing) = connection.split();
                    let _ = tokio::io::copy(&mut reading, &mut writing).await;
                });
            }
        });
        address
    }

    /// A request and its answer through a proxy of one-way delay `d` take
    /// at least `2d`, each time, and come back whole and in order (a
    /// megabyte is many chunks on their way at once).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_round_trip_through_a_delayed_proxy_takes_twice_the_delay() {
        let one_way = Duration::from_millis(40);
        let proxy = Proxy::start_delayed(&echo_server().await, one_way).await;
        let mut client = TcpStream::connect(proxy.address).await.expect("connect");
        for round in 0..3u8 {
            let started = Instant::now();
            client.write_all(&[round; 8]).await.expect("write");
            let mut answer = [0u8; 8];
            client.read_exact(&mut answer).await.expect("read");
            let took = started.elapsed();
            assert_eq!(answer, [round; 8]);
            assert!(
                took >= 2 * one_way,
                "round {round}: a round trip took {took:?}, under twice the one-way delay {one_way:?}"
            );
        }

        let sent: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
        let (mut reading, mut writing) = client.into_split();
        let writer = tokio::spawn({
            let sent = sent.clone();
            async move { writing.write_all(&sent).await.map(|()| writing) }
        });
        let mut received = vec![0u8; sent.len()];
        reading.read_exact(&mut received).await.expect("read");
        writer.await.expect("writer").expect("write");
        assert!(
            received == sent,
            "the echo came back out of order or changed"
        );
    }

    /// Chunks on their way overlap: writes spaced closer than the delay
    /// each arrive a delay after they were sent. A proxy that waited out
    /// each chunk's delay before reading the next (or before writing the
    /// next) would hold the later ones for up to twice the delay, or `n`
    /// times it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_in_a_row_are_on_their_way_at_once() {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server_address = server.local_addr().expect("address").to_string();
        let one_way = Duration::from_millis(100);
        let proxy = Proxy::start_delayed(&server_address, one_way).await;
        let mut client = TcpStream::connect(proxy.address).await.expect("connect");
        let (mut upstream, _) = server.accept().await.expect("accept");

        let n = 30u32;
        let receiving = tokio::spawn(async move {
            let mut arrived = Vec::new();
            for _ in 0..n {
                let mut message = [0u8; 4];
                upstream.read_exact(&mut message).await.expect("read");
                arrived.push((u32::from_be_bytes(message), Instant::now()));
            }
            arrived
        });
        let mut sent = Vec::new();
        for i in 0..n {
            sent.push(Instant::now());
            client.write_all(&i.to_be_bytes()).await.expect("write");
            // Apart, so that the proxy reads them as chunks of their own,
            // over several delays.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let arrived = receiving.await.expect("receiver");
        for (i, (message, at)) in arrived.iter().enumerate() {
            assert_eq!(*message, i as u32, "out of order");
            let after = at.saturating_duration_since(sent[i]);
            assert!(
                after >= one_way,
                "message {i} arrived {after:?} after it was sent, under the delay"
            );
            assert!(
                // Room for a loaded machine; waiting out the delays of the
                // chunks before would take twice the delay and more.
                after < one_way * 19 / 10,
                "message {i} of {n} arrived {after:?} after it was sent: \
                 it waited for the delays of the chunks before it"
            );
        }
    }

    /// Answers that follow each other closely each arrive a delay after
    /// they were sent, also once the connection goes back and forth (where
    /// a client delays its acknowledgements, and a proxy's socket that
    /// waits for them before sending the next small chunk held it 40 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_in_a_row_are_not_held_for_acknowledgements() {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server_address = server.local_addr().expect("address").to_string();
        let one_way = Duration::from_millis(10);
        let proxy = Proxy::start_delayed(&server_address, one_way).await;
        let mut client = TcpStream::connect(proxy.address).await.expect("connect");
        let (mut upstream, _) = server.accept().await.expect("accept");
        // The server sends each answer as it is written, as ZooKeeper's
        // and etcd's do: what holds one back is then the proxy's.
        upstream.set_nodelay(true).expect("nodelay");
        for round in 0..10u8 {
            client.write_all(&[round]).await.expect("write");
            let mut request = [0u8; 1];
            upstream.read_exact(&mut request).await.expect("read");
            let first = Instant::now();
            upstream.write_all(&[round]).await.expect("write");
            // The next answer goes apart from the first, as a server's
            // answers to separate requests do.
            tokio::time::sleep(Duration::from_millis(2)).await;
            let second = Instant::now();
            upstream.write_all(&[round]).await.expect("write");
            let mut answers = [0u8; 2];
            client.read_exact(&mut answers[..1]).await.expect("read");
            let first_after = first.elapsed();
            client.read_exact(&mut answers[1..]).await.expect("read");
            let second_after = second.elapsed();
            assert!(
                // Room for a loaded machine, short of the 40 ms a held
                // chunk waits for a delayed acknowledgement.
                second_after < one_way + Duration::from_millis(25),
                "round {round}: the second answer arrived {second_after:?} after it was sent \
                 (the first {first_after:?})"
            );
        }
    }

    /// A stalled proxy holds what is already on its way too: a chunk read
    /// before the stall does not arrive when its delay is over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stall_holds_the_bytes_on_their_way() {
        let server = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let server_address = server.local_addr().expect("address").to_string();
        let one_way = Duration::from_millis(200);
        let proxy = Proxy::start_delayed(&server_address, one_way).await;
        let mut client = TcpStream::connect(proxy.address).await.expect("connect");
        let (mut upstream, _) = server.accept().await.expect("accept");

        client.write_all(b"held").await.expect("write");
        // The proxy's read is not seen from outside: a quarter of the delay
        // is ample for it to have taken the chunk (were it not, the stall
        // would hold it in the kernel's buffers, and the test would pass
        // without testing the held chunk).
        tokio::time::sleep(one_way / 4).await;
        proxy.stall();
        let mut late = [0u8; 4];
        let arrived = tokio::time::timeout(one_way + QUIET, upstream.read(&mut late)).await;
        assert!(
            !matches!(arrived, Ok(Ok(n)) if n > 0),
            "bytes on their way went through a stalled proxy"
        );
    }

    /// The address through the proxy keeps what surrounds the server's.
    #[tokio::test]
    async fn an_address_at_a_distance_keeps_its_scheme_and_path() {
        let one_way = Duration::from_millis(1);
        for (address, before, after) in [
            ("127.0.0.1:9", "", ""),
            ("http://127.0.0.1:9", "http://", ""),
            ("127.0.0.1:9/tenure-bench", "", "/tenure-bench"),
        ] {
            let (proxy, through) = at_distance(address, one_way).await.expect("a proxy");
            assert_eq!(through, format!("{before}{}{after}", proxy.address));
        }
        for address in ["127.0.0.1:9,127.0.0.1:10", "http://", "/chroot"] {
            assert!(at_distance(address, one_way).await.is_err(), "{address}");
        }
    }
}
