//! The 3-node ZooKeeper ensemble and the 3-node etcd cluster of
//! `scripts/services`: which node leads, and one node killed and started
//! again, by the script that runs them.

use std::process::Command;

/// The script that starts, kills and restarts the servers.
const SERVICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");

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

    /// One node fault at a time on this cluster, among the tests of one
    /// binary (they run at once): two nodes down would leave no quorum.
    pub async fn exclusive(self) -> tokio::sync::MutexGuard<'static, ()> {
        static ZOOKEEPER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        static ETCD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        match self {
            Cluster::ZooKeeper => ZOOKEEPER.lock().await,
            Cluster::Etcd => ETCD.lock().await,
        }
    }
}
