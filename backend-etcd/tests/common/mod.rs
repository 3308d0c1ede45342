//! Test harness: a real etcd (address in `TENURE_ETCD`), one key prefix per
//! test, and backends driven directly with made-up request ids.

#![allow(dead_code, unused_imports)]

use tenure_testkit::driver;
use tenure_testkit::etcd_server as server;
pub use tenure_testkit::proxy;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, KeyValue};
use tenure_core::SessionId;
use tenure_etcd::{EtcdBackend, Hooks};

/// The session timeout of the sandbox's members.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

pub use driver::{info, partition, start_alone, EVENT_TIMEOUT, GROUP, TOPIC};
pub use server::{client as raw_client, endpoint as address};

/// A started etcd backend and the events it sent.
pub type Driver = driver::Driver<EtcdBackend>;

/// One test's corner of the server.
pub struct Sandbox {
    /// The server's address.
    pub address: String,
    /// The test's key prefix.
    pub prefix: String,
    /// A client of the server, for looking at and tampering with keys.
    pub raw: Client,
}

impl Sandbox {
    /// A fresh prefix `/tenure-test-<name>-<nanos>`.
    pub async fn new(name: &str) -> Sandbox {
        let address = address();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        let raw = raw_client(&address).await;
        Sandbox {
            address,
            prefix: format!("/tenure-test-{name}-{nanos}"),
            raw,
        }
    }

    pub fn owner_key(&self, partition: u32) -> String {
        format!("{}/{GROUP}/owners/{TOPIC}/{partition}", self.prefix)
    }

    pub fn offset_key(&self, partition: u32) -> String {
        format!("{}/{GROUP}/offsets/{TOPIC}/{partition}", self.prefix)
    }

    pub fn member_key(&self, member: &str) -> String {
        format!("{}/{GROUP}/members/{member}", self.prefix)
    }

    /// The key-value pair at `key`, if any.
    pub async fn get(&self, key: &str) -> Option<KeyValue> {
        let mut raw = self.raw.clone();
        let mut response = raw.get(key, None).await.expect("read a key");
        response.take_kvs().into_iter().next()
    }

    /// A backend in this sandbox, not started.
    pub fn backend(&self, address: &str) -> EtcdBackend {
        EtcdBackend::new(address).prefix(self.prefix.clone())
    }

    /// A proxy in front of the server, and a backend in this sandbox (not
    /// started) that reaches the server through it.
    pub async fn behind_proxy(&self, request_timeout: Duration) -> (proxy::Proxy, EtcdBackend) {
        let upstream = self
            .address
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let proxy = proxy::Proxy::start(&upstream).await;
        let backend = self
            .backend(&format!("http://{}", proxy.address))
            .request_timeout(request_timeout);
        (proxy, backend)
    }

    /// Starts a backend for `member` in this sandbox.
    pub async fn member(&self, member: &str) -> Driver {
        self.member_with(member, Hooks::default()).await
    }

    /// Starts a backend for `member` with test hooks.
    pub async fn member_with(&self, member: &str, hooks: Hooks) -> Driver {
        let backend = self.backend(&self.address).hooks(hooks);
        Driver::start("etcd", backend, info(member), SESSION_TIMEOUT).await
    }
}

/// The lease id behind a session id.
pub fn lease(session: SessionId) -> i64 {
    session.0 as i64
}
