//! A run's group: its member processes, each behind its own proxy to the
//! store, started and closed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::signals::signal;
use crate::store::{Store, OFFSETS_TABLE};
use crate::transcript::{read_member, SharedLog};
use tenure_chaos_lines::wall_ms;

/// A member process and its proxy.
pub struct Running {
    pub process: Child,
    pub proxy: Child,
    /// When it was killed, if it was.
    pub killed_at: Option<u64>,
    /// The store node it connects to alone (`--connect one`), 1-based.
    pub node: Option<u8>,
    /// When it was started.
    pub started_at: Instant,
}

impl Running {
    /// Whether the member process has ended (killed, left, or failed);
    /// collects its exit if so, so that it does not linger as a zombie.
    pub fn has_ended(&mut self) -> bool {
        !matches!(self.process.try_wait(), Ok(None))
    }
}

/// Which of the store's nodes a member connects to, as `--connect` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Connect {
    /// Every node: the client moves to another when its node fails.
    All,
    /// One node each, in turn (m1 to node 1, m2 to node 2, ...); a member
    /// that starts during a partition connects to a node of the majority.
    One,
    /// Every other member to one node each, in turn (m1 to node 1, m3 to
    /// node 2, ...), the rest (m2, m4, ...) to every node: both kinds in
    /// one run.
    Mixed,
}

/// `--sink postgres`: the members are the `exactly_once_postgres` example.
#[derive(Clone)]
pub struct SinkSetup {
    /// The example's binary.
    pub exe: PathBuf,
    /// `TENURE_POSTGRES`.
    pub postgres: String,
    /// This run's table of rows.
    pub table: String,
}

impl SinkSetup {
    pub fn locate(seed: u64) -> Result<SinkSetup, String> {
        let exe = example("exactly_once_postgres")?;
        let postgres = std::env::var("TENURE_POSTGRES").map_err(|_| {
            "TENURE_POSTGRES is not set: start the servers with \
             `eval \"$(scripts/services start)\"`"
                .to_owned()
        })?;
        Ok(SinkSetup {
            exe,
            postgres,
            table: format!("chaos_{seed}_{}", wall_ms()),
        })
    }
}

/// The facade's example `name`, which cargo builds into `examples/` of the
/// directory this program's binary is in (`target/<profile>/`); an error
/// naming the command that builds it if it is not there.
fn example(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("where is this program? {e}"))?;
    let profile_dir = exe.parent().unwrap_or(Path::new("."));
    let path = profile_dir.join("examples").join(name);
    if path.is_file() {
        return Ok(path);
    }
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => String::new(),
        Some("release") => " --release".to_owned(),
        Some(other) => format!(" --profile {other}"),
    };
    Err(format!(
        "--sink postgres runs {} as its members, and it is not built: \
         `cargo build{profile} --features etcd,postgres --example {name}`",
        path.display()
    ))
}

pub struct Run {
    pub store: Store,
    pub kafka: String,
    pub group: String,
    pub topic: String,
    pub session_ms: u64,
    pub members: BTreeMap<String, Running>,
    pub log: SharedLog,
    /// Windows in which the store was down, wall ms.
    pub outages: Vec<(u64, u64)>,
    /// The partitions between the store's nodes, as made.
    pub partitions: Vec<crate::partition::Window>,
    /// Which nodes the members connect to.
    pub connect: Connect,
    /// Members started so far, to give the next its node in turn.
    pub started: usize,
    /// `--previous`: the previous release's chaos tool.
    pub previous: Option<PathBuf>,
    /// The members that run the previous release until their upgrade.
    pub upgrades_due: std::collections::BTreeSet<String>,
    /// `--sink postgres`.
    pub sink: Option<SinkSetup>,
    /// `--ordering`.
    pub ordering: crate::Ordering,
}

impl Run {
    /// Starts member `id` behind a proxy of its own, and waits until it
    /// joined (30 s at most). A member that cannot join, because the store
    /// does not answer it in time during a store fault (its start is
    /// bounded: it exits saying so), is started again, 5 times at most:
    /// that is the store's fault, not the member's.
    pub async fn start_member(&mut self, id: &str) -> Result<(), String> {
        let mut attempt = 1;
        loop {
            match self.start_member_once(id).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < 5 => {
                    println!("          {e}; starting it again");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Err(e) => return Err(format!("{e}, {attempt} times")),
            }
        }
    }

    /// One attempt of `start_member`; on failure, its processes are gone.
    async fn start_member_once(&mut self, id: &str) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut proxy = Command::new(&exe)
            .args(["proxy", "--to", &self.store.servers.join(",")])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a proxy: {e}"))?;
        let mut line = String::new();
        let stdout = proxy.stdout.take().ok_or("the proxy has no stdout")?;
        let mut reader = BufReader::new(stdout);
        reader
            .read_line(&mut line)
            .map_err(|e| format!("proxy: {e}"))?;
        let proxied: Vec<&str> = line.trim().split(',').collect();
        // `--connect one`: every member to one node, in turn; `mixed`: the
        // even-numbered starts to every node, the others (the first among
        // them) to one.
        let turn = match self.connect {
            Connect::All => None,
            Connect::One => Some(self.started),
            Connect::Mixed => self.started.is_multiple_of(2).then_some(self.started / 2),
        };
        let node = turn.map(|turn| {
            let minority = self.minority_now();
            let nodes = proxied.len().max(1);
            (0..nodes)
                .map(|i| 1 + ((turn + i) % nodes) as u8)
                .find(|n| !minority.contains(n))
                .unwrap_or(1)
        });
        self.started += 1;
        let address = match node {
            None => self.store.connect_string(line.trim()),
            Some(n) => self
                .store
                .connect_string(proxied.get(usize::from(n) - 1).copied().unwrap_or_default()),
        };
        let mut command = match &self.sink {
            None => {
                let program = match &self.previous {
                    Some(previous) if self.upgrades_due.contains(id) => previous.clone(),
                    _ => exe.clone(),
                };
                let mut command = Command::new(program);
                command.arg("member");
                if self.ordering == crate::Ordering::Key {
                    command.args(["--ordering", "key"]);
                }
                command
            }
            Some(sink) => {
                // Well under the session: a member stopped inside a
                // transaction holds the next owner's fence no longer.
                let idle_ms = (self.session_ms / 4).clamp(100, 1_000);
                let mut command = Command::new(&sink.exe);
                command
                    .args(["--postgres", &sink.postgres, "--table", &sink.table])
                    .args(["--offsets-table", OFFSETS_TABLE, "--work-ms", "200"])
                    .args(["--idle-in-transaction-ms", &idle_ms.to_string()]);
                command
            }
        };
        let mut process = command
            .args(["--store", self.store.kind.name(), "--address", &address])
            .args([
                "--kafka",
                &self.kafka,
                "--group",
                &self.group,
                "--topic",
                &self.topic,
            ])
            .args(["--member", id, "--session-ms", &self.session_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start member {id}: {e}"))?;
        let stdout = process.stdout.take().ok_or("the member has no stdout")?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let log = self.log.clone();
        let member = id.to_owned();
        std::thread::spawn(move || read_member(member, stdout, log, ready_tx));
        let joined = match tokio::time::timeout(Duration::from_secs(30), ready_rx).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(format!("member {id} exited before joining")),
            Err(_) => Err(format!("member {id} did not join within 30 s")),
        };
        if let Err(e) = joined {
            let _ = process.kill();
            let _ = process.wait();
            let _ = proxy.kill();
            let _ = proxy.wait();
            return Err(e);
        }
        self.members.insert(
            id.to_owned(),
            Running {
                process,
                proxy,
                killed_at: None,
                node,
                started_at: Instant::now(),
            },
        );
        Ok(())
    }

    /// Upgrades member `id`: it closes (SIGTERM) and, once it exited (30 s
    /// at most, then it is killed), starts again from this release under
    /// the same id.
    pub async fn upgrade(&mut self, id: &str) -> Result<(), String> {
        let mut running = self
            .members
            .remove(id)
            .ok_or(format!("the schedule upgrades {id}, which is not running"))?;
        signal(&running.process, "TERM");
        wait_or_kill(id, &mut running.process).await;
        let _ = running.proxy.kill();
        let _ = running.proxy.wait();
        self.upgrades_due.remove(id);
        self.start_member(id).await
    }

    /// Lets go of what the members that ended (killed, left) leave
    /// behind: their exits are collected and their proxies stopped, so
    /// that an hour's run does not pile up finished processes and idle
    /// proxies. Their records stay, for the audit.
    pub fn reap(&mut self) {
        for running in self.members.values_mut() {
            if running.has_ended() {
                // Once collected, its pid may be reused: never signalled
                // again (`has_ended` keeps every later look away from it).
                let _ = running.proxy.kill();
                let _ = running.proxy.wait();
            }
        }
    }

    /// Closes the group: every live member closes (SIGTERM) and commits;
    /// one that has not within 30 s is killed. Returns when it started.
    pub async fn close_group(&mut self) -> u64 {
        let closing_at = wall_ms();
        for running in self.members.values_mut() {
            if running.killed_at.is_none() && !running.has_ended() {
                signal(&running.process, "TERM");
            }
        }
        for (id, running) in self.members.iter_mut() {
            wait_or_kill(id, &mut running.process).await;
            let _ = running.proxy.kill();
            let _ = running.proxy.wait();
        }
        closing_at
    }
}

/// Waits until member `id`'s process exits; one that has not within 30 s
/// is killed.
async fn wait_or_kill(id: &str, process: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match process.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            _ => {
                eprintln!("chaos: member {id} did not close within 30 s: killed");
                let _ = process.kill();
                let _ = process.wait();
                return;
            }
        }
    }
}
