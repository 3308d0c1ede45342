//! `tenure serve` as the tests run it: a process of its own, read over
//! HTTP, and members that consume (or stop acknowledging) beside it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::admin::overview::{GroupHealth, Overview};
use tenure::tokio::{Backend, GroupMember, KafkaConfig, MemberHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::kafka;

/// How long anything awaited here may take: several Kafka refreshes and a
/// session timeout, on a loaded 2-core machine.
pub const WAIT: Duration = Duration::from_secs(40);

/// The `tenure` binary at `binary` (an integration test's
/// `env!("CARGO_BIN_EXE_tenure-under-test")`), without the environment's
/// TENURE_* variables: only the flags count.
pub fn tenure_command(binary: &str) -> Command {
    let mut command = Command::new(binary);
    for (name, _) in std::env::vars() {
        if name.starts_with("TENURE_") {
            command.env_remove(name);
        }
    }
    command
}

/// A `tenure serve` process, stopped when dropped.
pub struct Serve {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Serve {
    /// Starts `tenure serve` (the binary at `binary`) on `store` (flags)
    /// with Kafka at `bootstrap`, refreshing every 300 ms over a window of
    /// 4 samples, with the `extra` flags.
    pub fn start(binary: &str, store: &[String], bootstrap: &str, extra: &[&str]) -> Serve {
        let mut command = tenure_command(binary);
        command
            .args(store)
            .args(["--bootstrap", bootstrap, "--timeout", "10", "serve"])
            .args(["--listen", "127.0.0.1:0", "--kafka-interval", "PT0.3S"])
            .args(["--window", "4", "--unowned-after", "1s"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start tenure serve");
        let stderr = child.stderr.take().expect("its stderr");
        let (found, address) = std::sync::mpsc::channel();
        let log = Arc::new(Mutex::new(String::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let rest = line
                    .strip_prefix("tenure serve: listening on http://")
                    .or_else(|| line.strip_prefix("tenure serve: listening on https://"));
                if let Some(rest) = rest {
                    let _ = found.send(rest.trim_end_matches('/').to_owned());
                }
                let mut log = kept.lock().expect("log");
                log.push_str(&line);
                log.push('\n');
            }
        });
        let address = match address.recv_timeout(Duration::from_secs(30)) {
            Ok(address) => address.parse().expect("an address"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "tenure serve did not say where it listens; its stderr:\n{}",
                    log.lock().expect("log")
                )
            }
        };
        Serve {
            child,
            address,
            stderr: log,
        }
    }

    /// What it wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().expect("log").clone()
    }

    /// GET `path`: the status and the body.
    pub async fn get(&self, path: &str) -> (u16, String) {
        get(self.address, path, None).await
    }

    /// `/v1/groups`, read into the serde type.
    pub async fn overview(&self) -> Overview {
        let (status, body) = self.get("/v1/groups").await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not an Overview ({e}): {body}"))
    }

    /// Reads the overview until `done` holds for it.
    pub async fn until(&self, what: &str, done: impl Fn(&Overview) -> bool) -> Overview {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let overview = self.overview().await;
            if done(&overview) {
                return overview;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "{what}: not within {WAIT:?}; last overview: {}\nserve's stderr:\n{}",
                    serde_json::to_string_pretty(&overview).unwrap_or_default(),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A GET over HTTP/1.0 (no chunks, the connection closes at the end).
pub async fn get(address: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect to tenure serve");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n{auth}\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("an answer in time")
        .expect("read the answer");
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text}"));
    (status, body.to_owned())
}

/// The group named `group` of an overview.
pub fn group_of<'a>(overview: &'a Overview, group: &str) -> Option<&'a GroupHealth> {
    overview.group(group)
}

/// A member of `group` on `topic`, which acknowledges every message it is
/// given while `acking` holds, on a task of its own.
pub struct Consumer {
    /// The member.
    pub handle: MemberHandle,
    acking: Arc<std::sync::atomic::AtomicBool>,
}

impl Consumer {
    /// Joins `group` as `member`, consuming `topic`.
    pub async fn join(
        backend: Box<dyn Backend>,
        group: &str,
        member: &str,
        topic: &str,
    ) -> Consumer {
        let member = GroupMember::builder(crate::config_for(group, member, topic))
            .kafka(KafkaConfig::new(&kafka::bootstrap()))
            .join(backend)
            .await
            .unwrap_or_else(|e| panic!("{member} cannot join: {e}"));
        let (handle, streams) = member.split();
        let acking = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let on = acking.clone();
        let mut messages = streams.messages.expect("a member with Kafka has messages");
        tokio::spawn(async move {
            // Messages not acknowledged are held, never dropped: their
            // partition's committed offset stays where it is.
            let mut held = Vec::new();
            while let Some(message) = messages.next().await {
                if on.load(std::sync::atomic::Ordering::SeqCst) {
                    message.ack();
                } else {
                    held.push(message);
                }
            }
        });
        Consumer { handle, acking }
    }

    /// From now on, holds every message it is given unacknowledged.
    pub fn stop_acking(&self) {
        self.acking
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}
