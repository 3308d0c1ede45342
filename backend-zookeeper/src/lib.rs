//! ZooKeeper backend for tenure: carries the core's store commands to
//! ZooKeeper and brings results, watch notifications and session changes
//! back as core events.
//!
//! The znodes are those of Kafka 0.8's ZooKeeper consumer (and of the Go
//! `consumergroup` package), under `<chroot>/consumers/<group>`:
//! - `ids/<member>`: ephemeral, the member's JSON registration;
//! - `owners/<topic>/<partition>`: ephemeral, the owner's member id;
//! - `offsets/<topic>/<partition>`: persistent, the next offset to consume as
//!   ASCII decimal.
//!
//! Every command is carried out as the simulator's reference adapter
//! (`tenure_core::model::adapter`) carries it out, in ZooKeeper requests
//! (`multi`s for the claims, commits and releases a step gathers); the
//! runtime's session loop ([`tenure_tokio::store`]) does the rest: this
//! crate is its [`Connector`](tenure_tokio::store::Connector) and
//! [`StoreClient`](tenure_tokio::store::StoreClient) for ZooKeeper.
//!
//! The fencing token of a claim is the owner node's `czxid`; an offset commit
//! is a multi-op guarded by a version check of the owner node. ZooKeeper 3.5
//! or later is required (the client asks for the created node's stat).
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_zookeeper::ZooKeeperBackend;
//!
//! let backend = ZooKeeperBackend::new("zk1:2181,zk2:2181/kafka")
//!     .connect_timeout(Duration::from_secs(10));
//! # drop(backend);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod admin;
mod client;
mod group;
mod ops;
mod security;
mod session;

pub use admin::ZooKeeperAdmin;
pub use security::{Digest, ZooKeeperSecurity};

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::StoreRequest;
use tenure_tokio::store::{RequestCounts, StoreBackend};
use tenure_tokio::{Backend, BackendError, Joining, SessionTicket};

use crate::session::Config;
pub use crate::session::DEFAULT_CONNECT_TIMEOUT;

// Test hooks are public only with the `testing` feature, which the
// workspace's tests turn on: production builds cannot set them.
#[cfg(feature = "testing")]
pub use tenure_tokio::store::Hooks;

/// A [`Backend`] that keeps a group member's records in ZooKeeper.
///
/// Built with [`ZooKeeperBackend::new`] and the builder methods; the session
/// opens in [`Backend::start`]. After a session expires the backend opens a
/// new one by itself (an expired ZooKeeper session cannot be revived).
#[derive(Debug)]
pub struct ZooKeeperBackend(StoreBackend<Config>);

impl ZooKeeperBackend {
    /// A backend for the ZooKeeper ensemble at `connect_string`:
    /// `host:port[,host:port...][/chroot]`. The chroot, if any, must exist.
    pub fn new(connect_string: impl Into<String>) -> Self {
        ZooKeeperBackend(StoreBackend::new(Config::new(connect_string.into())))
    }

    /// How long [`Backend::start`] (and each reconnection after a session
    /// expiry) waits for a server to open a session (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.0.connector_mut().connect_timeout = timeout;
        self
    }

    /// Credentials and TLS for a secured ensemble (see
    /// [`ZooKeeperSecurity`] for the ACLs a digest brings).
    pub fn security(mut self, security: ZooKeeperSecurity) -> Self {
        self.0.connector_mut().security = security;
        self
    }

    /// Delays for reproducing races in tests; see [`Hooks`] (feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.0.connector_mut().hooks = hooks;
        self
    }

    /// A counter of the requests this backend sends to ZooKeeper (for
    /// benchmarks and metrics); it keeps counting after the backend moves
    /// into a runtime.
    pub fn request_counter(&self) -> Arc<AtomicU64> {
        self.0.connector().requests.total_counter()
    }

    /// The same requests by kind, with the member's commands they carried
    /// out (for benchmarks: where the requests go).
    pub fn request_counts(&self) -> Arc<RequestCounts> {
        self.0.connector().requests.clone()
    }
}

#[async_trait]
impl Backend for ZooKeeperBackend {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        self.0.start(joining).await
    }

    fn submit(&mut self, command: StoreRequest) {
        self.0.submit(command)
    }

    async fn shutdown(&mut self) {
        self.0.shutdown().await
    }

    fn ticket(&self) -> Option<SessionTicket> {
        self.0.ticket()
    }

    async fn detach(&mut self) {
        self.0.detach().await
    }
}
