//! The 3-node ZooKeeper ensemble and the 3-node etcd cluster of
//! `scripts/services`: which node leads, one node killed and started
//! again, and one node cut off from the others, by the script that runs
//! them.

use std::process::Command;

/// The script that starts, kills and restarts the servers.
const SERVICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");

/// How long a cluster may take to elect a leader after a fault.
const LEADER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// One of the 3-node stores.
#[derive(Clone, Copy, Debug)]
pub enum Cluster {
    /// `zkcluster`: `TENURE_ZOOKEEPER_CLUSTER`.
    ZooKeeper,
    /// `etcdcluster`: `TENURE_ETCD_CLUSTER`.
    Etcd,
}

/// Which node a test takes down.
#[derive(Clone, Copy, Debug)]
pub enum Node {
    /// The leader of the ensemble or cluster, when the fault strikes.
    Leader,
    /// The node with this number (1–3).
    Number(u8),
}

impl Cluster {
    fn service(self) -> &'static str {
        match self {
            Cluster::ZooKeeper => "zkcluster",
            Cluster::Etcd => "etcdcluster",
        }
    }

    /// The addresses of its nodes, in node order (etcd: with `http://`).
    pub fn servers(self) -> Vec<String> {
        let var = match self {
            Cluster::ZooKeeper => "TENURE_ZOOKEEPER_CLUSTER",
            Cluster::Etcd => "TENURE_ETCD_CLUSTER",
        };
        match std::env::var(var) {
            Ok(list) if !list.trim().is_empty() => {
                list.split(',').map(|s| s.trim().to_owned()).collect()
            }
            _ => panic!(
                "{var} is not set: this test needs the 3-node {} of scripts/services; start it \
                 with `eval \"$(scripts/services start)\"`, or run scripts/test",
                self.service()
            ),
        }
    }

    /// The address of node `number` (1–3).
    pub fn server(self, number: u8) -> String {
        let servers = self.servers();
        let index = usize::from(number.saturating_sub(1));
        servers
            .get(index)
            .cloned()
            .unwrap_or_else(|| panic!("{} has no node {number}", self.service()))
    }

    /// The number of a node that does not lead: the first other than
    /// `leader`.
    pub fn follower_of(leader: u8) -> u8 {
        (1..=3u8).find(|n| *n != leader).unwrap_or(1)
    }

    fn run(self, args: &[&str]) -> String {
        let output = Command::new(SERVICES)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {SERVICES}: {e}"));
        assert!(
            output.status.success(),
            "`scripts/services {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The number of the node that leads now.
    pub fn leader(self) -> u8 {
        let said = self.run(&["leader", self.service()]);
        said.parse()
            .unwrap_or_else(|_| panic!("`scripts/services leader` said {said:?}"))
    }

    /// The number of the node that leads, once one does: after a fault, an
    /// election may be under way for a while.
    pub fn wait_for_leader(self) -> u8 {
        let deadline = std::time::Instant::now() + LEADER_WAIT;
        loop {
            let output = Command::new(SERVICES)
                .args(["leader", self.service()])
                .output()
                .unwrap_or_else(|e| panic!("cannot run {SERVICES}: {e}"));
            let said = String::from_utf8_lossy(&output.stdout);
            if let (true, Ok(leader)) = (output.status.success(), said.trim().parse()) {
                return leader;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no node of {} leads after {LEADER_WAIT:?}: {}",
                self.service(),
                String::from_utf8_lossy(&output.stderr)
            );
            // `scripts/services leader` asks every node once; an election
            // takes a few of etcd's heartbeats.
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }

    /// Kills `node` (SIGKILL) and returns its number, once it is gone.
    pub fn kill(self, node: Node) -> u8 {
        let number = match node {
            Node::Leader => self.leader(),
            Node::Number(n) => n,
        };
        self.run(&["node", self.service(), "kill", &number.to_string()]);
        number
    }

    /// Starts node `number` again on its data, once it answers.
    pub fn start(self, number: u8) {
        self.run(&["node", self.service(), "start", &number.to_string()]);
    }

    /// Cuts node `number` off from the other two (their peer traffic is
    /// dropped both ways; clients still reach every node), until the
    /// returned guard is dropped. Needs root, as `scripts/services link`
    /// does.
    pub fn cut_off(self, number: u8) -> CutOff {
        for other in (1..=3u8).filter(|n| *n != number) {
            self.cut(number, other);
        }
        CutOff { cluster: self }
    }

    /// Cuts the link between nodes `one` and `other` alone (a partial
    /// partition: each still reaches the third node, and clients reach
    /// every node), until the returned guard is dropped. Needs root.
    pub fn cut_link(self, one: u8, other: u8) -> CutOff {
        self.cut(one, other);
        CutOff { cluster: self }
    }

    fn cut(self, one: u8, other: u8) {
        self.run(&[
            "link",
            self.service(),
            "cut",
            &one.to_string(),
            &other.to_string(),
        ]);
    }
}

/// A node cut off from the others ([`Cluster::cut_off`]): every link is
/// healed when it is dropped, a failed test's included, and the drop
/// returns once a node leads again (a cut node may have called elections
/// that the heal lets disrupt the leader).
#[derive(Debug)]
pub struct CutOff {
    cluster: Cluster,
}

impl Drop for CutOff {
    fn drop(&mut self) {
        let healed = Command::new(SERVICES)
            .args(["link", self.cluster.service(), "heal"])
            .output();
        match healed {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "`scripts/services link {} heal` failed: {}",
                self.cluster.service(),
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(e) => eprintln!("cannot run {SERVICES}: {e}"),
        }
        if !std::thread::panicking() {
            self.cluster.wait_for_leader();
        }
    }
}
