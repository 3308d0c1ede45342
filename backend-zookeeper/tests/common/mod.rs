//! Test harness: a real ZooKeeper (address in `TENURE_ZOOKEEPER`), one chroot
//! per test, and backends driven directly with made-up request ids.

#![allow(dead_code)]

use tenure_testkit::driver;
pub use tenure_testkit::proxy;
use tenure_testkit::zookeeper_server as server;

use std::time::Duration;

use tenure_zookeeper::{Hooks, ZooKeeperBackend};
use zookeeper_client as zk;

/// The session timeout of the sandbox's members.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

pub use driver::{info, partition, start_alone, GROUP, TOPIC};
pub use server::{address, client as raw_client};

/// A started ZooKeeper backend and the events it sent.
pub type Driver = driver::Driver<ZooKeeperBackend>;

/// One test's corner of the server.
pub struct Sandbox {
    /// The connect string with the test's chroot.
    pub connect: String,
    /// The test's chroot.
    pub chroot: String,
    /// A client inside the chroot, for looking at and tampering with znodes.
    pub raw: zk::Client,
}

impl Sandbox {
    /// Creates a fresh chroot `/tenure-test-<name>-<nanos>`.
    pub async fn new(name: &str) -> Sandbox {
        let (address, chroot) = server::fresh_chroot(name).await;
        let connect = format!("{address}{chroot}");
        let raw = raw_client(&connect).await;
        Sandbox {
            connect,
            chroot,
            raw,
        }
    }

    pub fn owner_path(&self, partition: u32) -> String {
        format!("/consumers/{GROUP}/owners/{TOPIC}/{partition}")
    }

    pub fn offset_path(&self, partition: u32) -> String {
        format!("/consumers/{GROUP}/offsets/{TOPIC}/{partition}")
    }

    pub fn member_path(&self, member: &str) -> String {
        format!("/consumers/{GROUP}/ids/{member}")
    }

    /// Starts a backend for `member` in this sandbox.
    pub async fn member(&self, member: &str) -> Driver {
        self.member_with(member, Hooks::default()).await
    }

    /// Starts a backend for `member` with test hooks.
    pub async fn member_with(&self, member: &str, hooks: Hooks) -> Driver {
        let backend = ZooKeeperBackend::new(self.connect.clone()).hooks(hooks);
        Driver::start("zookeeper", backend, info(member), SESSION_TIMEOUT).await
    }
}
