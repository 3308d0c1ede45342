//! The store of a run: where its nodes are, how to speak to it, and
//! `scripts/services`, which starts, restarts and kills its nodes.

use std::process::{Command, Stdio};
use std::time::Duration;

use tenure::admin::{self, GroupAdmin};
use tenure::etcd::EtcdAdmin;
use tenure::zookeeper::ZooKeeperAdmin;

/// `scripts/services`.
const SERVICES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/services");

/// The etcd prefix of `chaos member`.
pub const CHAOS_PREFIX: &str = "/tenure-chaos";

/// The etcd prefix of the `exactly_once_postgres` example.
pub const EXACTLY_ONCE_PREFIX: &str = "/tenure-exactly-once";

/// The offsets table the `exactly_once_postgres` example writes by default.
pub const OFFSETS_TABLE: &str = "tenure_offsets";

/// A coordination store, as `--store` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreKind {
    #[value(name = "zookeeper")]
    ZooKeeper,
    Etcd,
}

impl StoreKind {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::ZooKeeper => "zookeeper",
            StoreKind::Etcd => "etcd",
        }
    }
}

/// Where the store is and how to speak to it.
pub struct Store {
    pub kind: StoreKind,
    pub nodes: u8,
    /// Its nodes, `host:port`.
    pub servers: Vec<String>,
}

impl Store {
    /// The store of `scripts/services` of that kind and size, from its
    /// variable.
    pub fn from_env(kind: StoreKind, nodes: u8) -> Result<Store, String> {
        let var = match (kind, nodes) {
            (StoreKind::ZooKeeper, 1) => "TENURE_ZOOKEEPER",
            (StoreKind::ZooKeeper, _) => "TENURE_ZOOKEEPER_CLUSTER",
            (StoreKind::Etcd, 1) => "TENURE_ETCD",
            (StoreKind::Etcd, _) => "TENURE_ETCD_CLUSTER",
        };
        let value = std::env::var(var).map_err(|_| {
            format!("{var} is not set: start the servers with `eval \"$(scripts/services start)\"`")
        })?;
        let servers = value
            .split(',')
            .map(|s| s.trim().trim_start_matches("http://").to_owned())
            .collect();
        Ok(Store {
            kind,
            nodes,
            servers,
        })
    }

    /// What the servers run with that bears on failover, for the run's
    /// header: the etcd cluster's pre-vote, as `scripts/services` exports
    /// it.
    pub fn settings_note(&self) -> String {
        match (self.kind, self.nodes) {
            (StoreKind::Etcd, nodes) if nodes > 1 => format!(
                " pre_vote={}",
                std::env::var("TENURE_ETCD_CLUSTER_PRE_VOTE")
                    .unwrap_or_else(|_| "unknown".to_owned())
            ),
            _ => String::new(),
        }
    }

    /// The service name `scripts/services` knows it by.
    pub fn service(&self) -> &'static str {
        match (self.kind, self.nodes) {
            (StoreKind::ZooKeeper, 1) => "zookeeper",
            (StoreKind::ZooKeeper, _) => "zkcluster",
            (StoreKind::Etcd, 1) => "etcd",
            (StoreKind::Etcd, _) => "etcdcluster",
        }
    }

    /// The connect string through the proxy listening at `proxied`.
    pub fn connect_string(&self, proxied: &str) -> String {
        match self.kind {
            StoreKind::Etcd => proxied
                .split(',')
                .map(|a| format!("http://{a}"))
                .collect::<Vec<_>>()
                .join(","),
            StoreKind::ZooKeeper => proxied.to_owned(),
        }
    }

    /// An admin of the store; on etcd, of the groups under `prefix`.
    pub async fn admin(&self, prefix: &str) -> Result<Box<dyn GroupAdmin>, String> {
        let timeout = Duration::from_secs(10);
        Ok(match self.kind {
            StoreKind::ZooKeeper => Box::new(
                ZooKeeperAdmin::connect(&self.servers.join(","), timeout)
                    .await
                    .map_err(|e| e.to_string())?,
            ),
            StoreKind::Etcd => {
                let endpoints: Vec<String> =
                    self.servers.iter().map(|s| format!("http://{s}")).collect();
                Box::new(
                    EtcdAdmin::connect(&endpoints.join(","), prefix, timeout)
                        .await
                        .map_err(|e| e.to_string())?,
                )
            }
        })
    }

    /// The offsets `group` committed in the store for each of the
    /// `partitions` partitions of `topic` (0 where none), read by an admin
    /// of the groups under `prefix`.
    pub async fn committed(
        &self,
        prefix: &str,
        group: &str,
        topic: &str,
        partitions: usize,
    ) -> Result<Vec<i64>, String> {
        let admin = self
            .admin(prefix)
            .await
            .map_err(|e| format!("no admin of the store: {e}"))?;
        let described = admin::describe(admin.as_ref(), group, None)
            .await
            .map_err(|e| format!("cannot describe the group: {e}"))?;
        Ok((0..partitions as u32)
            .map(|p| {
                described
                    .partitions
                    .iter()
                    .find(|d| d.partition.partition == p && *d.partition.topic == *topic)
                    .and_then(|d| d.committed)
                    .unwrap_or(0)
            })
            .collect())
    }
}

/// Runs `scripts/services` with `args`; its failure is the run's.
pub async fn services(args: &[&str]) -> Result<String, String> {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let output = Command::new(SERVICES)
            .args(&args)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {SERVICES}: {e}"))?;
        if !output.status.success() {
            return Err(format!("`scripts/services {}` failed", args.join(" ")));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    })
    .await
    .map_err(|e| e.to_string())?
}
