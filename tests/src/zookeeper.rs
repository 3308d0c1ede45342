//! The real ZooKeeper of `scripts/services` as a store under test, one
//! chroot per test.

use std::time::Duration;

use async_trait::async_trait;
use tenure::core::records::{parse_offset, Layout};
use tenure::core::{MemberId, Offset, TopicPartition};
use tenure::tokio::Backend;
use tenure::zookeeper::ZooKeeperBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zookeeper_client as zk;

use super::Stores;

use super::proxy;

use server::client;
use tenure_testkit::zookeeper_server as server;

/// One test's chroot on the real server.
pub struct ZooKeeper {
    address: String,
    chroot: String,
    connect: String,
    raw: zk::Client,
}

impl ZooKeeper {
    /// A backend that reaches the server through a proxy the test can
    /// stall or cut.
    pub async fn through_proxy(&self) -> (ZooKeeperBackend, proxy::Proxy) {
        let proxy = proxy::Proxy::start(&self.address).await;
        let connect = format!("{}{}", proxy.address, self.chroot);
        (ZooKeeperBackend::new(connect), proxy)
    }

    /// The connect string of the test's chroot (`host:port/chroot`).
    pub fn connect_string(&self) -> &str {
        &self.connect
    }

    /// A client of the test's chroot, for looking at znodes directly.
    pub fn raw(&self) -> &zk::Client {
        &self.raw
    }

    /// A chroot of its own on the 3-node ensemble of `scripts/services`.
    /// Members are given every node and the client picks one at random
    /// (it shuffles its servers); node `first` is the one a doomed
    /// member's proxy stands in front of.
    pub async fn on_cluster(test: &str, first: u8) -> ZooKeeper {
        let mut servers = super::cluster::Cluster::ZooKeeper.servers();
        let at = usize::from(first.saturating_sub(1)) % servers.len();
        servers.rotate_left(at);
        let all = servers.join(",");
        let chroot = server::fresh_chroot_at(&all, test).await;
        let connect = format!("{all}{chroot}");
        let raw = client(&connect).await;
        ZooKeeper {
            // Proxies (a doomed member's) stand in front of the first node.
            address: servers[0].clone(),
            chroot,
            connect,
            raw,
        }
    }

    pub async fn new(test: &str) -> ZooKeeper {
        let (address, chroot) = server::fresh_chroot(test).await;
        let connect = format!("{address}{chroot}");
        let raw = client(&connect).await;
        ZooKeeper {
            address,
            chroot,
            connect,
            raw,
        }
    }

    /// The data and stat of `path`, as of every write acknowledged before
    /// the call: on an ensemble the test's own client may sit on another
    /// node than the member that wrote, and a follower can lag behind
    /// what its leader already acknowledged, so the read follows a sync.
    async fn read(&self, path: &str) -> Option<(Vec<u8>, zk::Stat)> {
        self.raw.sync(path).await.ok()?;
        self.raw.get_data(path).await.ok()
    }
}

#[async_trait]
impl Stores for ZooKeeper {
    fn backend(&self) -> Box<dyn Backend> {
        Box::new(ZooKeeperBackend::new(self.connect.clone()))
    }

    async fn doomed(&self) -> (Box<dyn Backend>, Box<dyn FnOnce() + Send>) {
        // Through a proxy that can be cut: the dying member's goodbye
        // (closing its session) never reaches the server, as with a crash.
        let proxy = proxy::Proxy::start(&self.address).await;
        let connect = format!("{}{}", proxy.address, self.chroot);
        let backend = Box::new(ZooKeeperBackend::new(connect));
        (backend, Box::new(move || proxy.down()))
    }

    async fn owner(&self, group: &str, partition: &TopicPartition) -> Option<String> {
        let path = Layout::new("", group).owner(partition);
        let (data, _) = self.read(&path).await?;
        String::from_utf8(data).ok()
    }

    async fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Offset> {
        let path = Layout::new("", group).offset(partition);
        let (data, _) = self.read(&path).await?;
        parse_offset(&path, &data).ok()
    }

    /// Asks the server itself (the `cons` four-letter command lists every
    /// connection with its session id and negotiated timeout).
    async fn granted_session_timeout(&self, group: &str, member: &str) -> Option<Duration> {
        let path = Layout::new("", group).member(&MemberId::new(member).ok()?);
        let (_, stat) = self.read(&path).await?;
        let sid = format!("sid=0x{:x},", stat.ephemeral_owner);
        let mut stream = TcpStream::connect(&self.address).await.ok()?;
        stream.write_all(b"cons").await.ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let line = answer.lines().find(|line| line.contains(&sid))?;
        let to = line
            .split(['(', ',', ')'])
            .find_map(|f| f.strip_prefix("to="))?;
        Some(Duration::from_millis(to.parse().ok()?))
    }
}
