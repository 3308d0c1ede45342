//! The real etcd of `scripts/services` as a store under test, one key
//! prefix per test.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use etcd_client::Client;
use tenure::core::records::parse_offset;
use tenure::core::{Offset, TopicPartition};
use tenure::etcd::EtcdBackend;
use tenure::tokio::Backend;

use super::Stores;

use super::proxy;

use tenure_testkit::etcd_server as server;

/// One test's prefix on the real etcd.
pub struct Etcd {
    endpoint: String,
    prefix: String,
    raw: Client,
}

impl Etcd {
    pub async fn new(test: &str) -> Etcd {
        Etcd::at(server::endpoint(), test).await
    }

    /// A prefix of its own on the etcd at `endpoint` (comma-separated for
    /// a cluster).
    async fn at(endpoint: String, test: &str) -> Etcd {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let prefix = format!("/tenure-test-{test}-{nanos}");
        let raw = server::client(&endpoint).await;
        Etcd {
            endpoint,
            prefix,
            raw,
        }
    }

    /// A prefix of its own on the 3-node cluster of `scripts/services`;
    /// members are given every endpoint.
    pub async fn on_cluster(test: &str) -> Etcd {
        Etcd::at(super::cluster::Cluster::Etcd.servers().join(","), test).await
    }

    /// The same prefix, its members still given every endpoint of `self`,
    /// but read by the test's own checks through `endpoint` alone: for
    /// checks that must not ask a node cut off from the quorum.
    pub async fn read_through(&self, endpoint: &str) -> Etcd {
        Etcd {
            endpoint: self.endpoint.clone(),
            prefix: self.prefix.clone(),
            raw: server::client(endpoint).await,
        }
    }

    /// The server's endpoint (`http://host:port`), or every endpoint of a
    /// cluster, comma-separated.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The test's key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A backend that reaches etcd through a proxy the test can stall or cut.
    pub async fn through_proxy(&self) -> (EtcdBackend, proxy::Proxy) {
        let proxy = proxy::Proxy::start(&self.first_address()).await;
        let backend =
            EtcdBackend::new(format!("http://{}", proxy.address)).prefix(self.prefix.clone());
        (backend, proxy)
    }

    /// The first server's `host:port`, for a proxy in front of it.
    fn first_address(&self) -> String {
        let first = self.endpoint.split(',').next().unwrap_or_default();
        first.trim_start_matches("http://").to_owned()
    }

    /// A client of the real etcd, for looking at keys directly.
    pub fn raw(&self) -> Client {
        self.raw.clone()
    }

    /// The key of `partition`'s `kind` record (`owners`, `offsets`).
    pub fn key(&self, group: &str, kind: &str, partition: &TopicPartition) -> String {
        format!(
            "{}/{group}/{kind}/{}/{}",
            self.prefix, partition.topic, partition.partition
        )
    }

    async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut raw = self.raw.clone();
        let response = raw.get(key, None).await.ok()?;
        response.kvs().first().map(|kv| kv.value().to_vec())
    }
}

#[async_trait]
impl Stores for Etcd {
    fn backend(&self) -> Box<dyn Backend> {
        Box::new(EtcdBackend::new(self.endpoint.clone()).prefix(self.prefix.clone()))
    }

    async fn doomed(&self) -> (Box<dyn Backend>, Box<dyn FnOnce() + Send>) {
        // Through a proxy that can be cut: the dying member's lease is
        // never revoked, it has to lapse, as after a crash.
        let proxy = proxy::Proxy::start(&self.first_address()).await;
        let backend = Box::new(
            EtcdBackend::new(format!("http://{}", proxy.address)).prefix(self.prefix.clone()),
        );
        (backend, Box::new(move || proxy.down()))
    }

    async fn owner(&self, group: &str, partition: &TopicPartition) -> Option<String> {
        let data = self.get(&self.key(group, "owners", partition)).await?;
        String::from_utf8(data).ok()
    }

    async fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Offset> {
        let key = self.key(group, "offsets", partition);
        let data = self.get(&key).await?;
        parse_offset(&key, &data).ok()
    }

    /// Asks the server for the TTL it granted the lease the registration
    /// is attached to.
    async fn granted_session_timeout(&self, group: &str, member: &str) -> Option<Duration> {
        let mut raw = self.raw.clone();
        let key = format!("{}/{group}/members/{member}", self.prefix);
        let response = raw.get(key, None).await.ok()?;
        let lease = response.kvs().first()?.lease();
        let alive = raw.lease_time_to_live(lease, None).await.ok()?;
        Some(Duration::from_secs(
            u64::try_from(alive.granted_ttl()).ok()?,
        ))
    }
}
