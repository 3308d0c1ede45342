//! etcd backend for tenure: carries the core's store commands to etcd and
//! brings results, watch notifications and session changes back as core
//! events.
//!
//! A member's session is an etcd lease whose TTL is the session timeout
//! (whole seconds, rounded up); the backend keeps it alive itself, about
//! every TTL/3. Its keys live under `<prefix>/<group>` (prefix `/tenure`
//! unless set with [`EtcdBackend::prefix`]):
//! - `members/<member>`: the member's JSON registration (the same JSON as
//!   Kafka 0.8's ZooKeeper consumer), attached to the lease;
//! - `owners/<topic>/<partition>`: the owner's member id, attached to the
//!   lease;
//! - `offsets/<topic>/<partition>`: the next offset to consume as ASCII
//!   decimal, with no lease.
//!
//! Every command is one etcd request (a transaction where it must look
//! before it writes), carried out with the semantics of the simulator's
//! reference adapter (`tenure_core::model::adapter`) and of the ZooKeeper
//! backend; the runtime's session loop ([`tenure_tokio::store`]) does the
//! rest: this crate is its
//! [`Connector`](tenure_tokio::store::Connector) and
//! [`StoreClient`](tenure_tokio::store::StoreClient) for etcd. Every
//! watch the commands leave behind (the membership's, and one on each owner
//! key a claimant waits for) rides on the backend's one watch stream, which
//! etcd multiplexes: a member waiting for thousands of partitions costs the
//! server one stream, not thousands.
//!
//! The fencing token of a claim is the owner key's `create_revision`. An
//! offset commit is a transaction that writes only if the owner key still has
//! that create_revision *and* our lease: a member whose lease expired (or
//! whose claim was released and re-made by anyone) can never commit.
//!
//! Building needs `protoc` and the protobuf well-known types (Debian:
//! `protobuf-compiler` and `libprotobuf-dev`). etcd 3.4 or later.
//!
//! ```no_run
//! use std::time::Duration;
//! use tenure_etcd::EtcdBackend;
//!
//! let backend = EtcdBackend::new("http://etcd1:2379,http://etcd2:2379")
//!     .connect_timeout(Duration::from_secs(10));
//! # drop(backend);
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod admin;
mod client;
mod errors;
mod group;
mod keeper;
mod keys;
mod ops;
mod security;
mod session;
mod watches;

pub use admin::EtcdAdmin;
pub use security::EtcdSecurity;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tenure_core::StoreRequest;
use tenure_tokio::store::{RequestCounts, StoreBackend};
use tenure_tokio::{Backend, BackendError, Joining, SessionTicket};

use crate::session::Config;
pub use crate::session::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX};

// Test hooks are public only with the `testing` feature, which the
// workspace's tests turn on: production builds cannot set them.
#[cfg(feature = "testing")]
pub use tenure_tokio::store::Hooks;

/// A [`Backend`] that keeps a group member's records in etcd.
///
/// Built with [`EtcdBackend::new`] and the builder methods; the first lease
/// is granted in [`Backend::start`]. After a lease expires the backend grants
/// a new one by itself.
#[derive(Debug)]
pub struct EtcdBackend(StoreBackend<Config>);

impl EtcdBackend {
    /// A backend for the etcd cluster at `endpoints`: one or more URLs,
    /// comma-separated (`http://host:2379,http://host2:2379`; a bare
    /// `host:port` means `http://`).
    pub fn new(endpoints: impl Into<String>) -> Self {
        EtcdBackend(StoreBackend::new(Config::new(endpoints.into())))
    }

    fn config(&mut self) -> &mut Config {
        self.0.connector_mut()
    }

    /// The key prefix under which groups live (default [`DEFAULT_PREFIX`]);
    /// the group's keys are under `<prefix>/<group>/`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config().prefix = prefix.into();
        self
    }

    /// How long [`Backend::start`] (and each new lease after an expiry)
    /// waits for a server (default [`DEFAULT_CONNECT_TIMEOUT`]). The lease
    /// grant is tried up to three times within it, each try with a third
    /// of it, while no server answers: a try that reached a node cut off
    /// from the quorum gives way to one that may reach another.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config().connect_timeout = timeout;
        self
    }

    /// Credentials and TLS for a secured cluster (default: none, plaintext).
    /// A user or password etcd refuses, or a server certificate the CA did
    /// not sign, fails [`Backend::start`] with `BackendError::Denied`.
    pub fn security(mut self, security: EtcdSecurity) -> Self {
        self.config().security = security;
        self
    }

    /// How long a request may go unanswered before it fails with
    /// `StoreError::ConnectionLoss` (default: half the session timeout, at
    /// least one second).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config().request_timeout = Some(timeout);
        self
    }

    /// Delays for reproducing races in tests; see [`Hooks`] (feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.config().hooks = hooks;
        self
    }

    /// A counter of the requests this backend's commands send to etcd (for
    /// benchmarks and metrics; lease keep-alives are not counted); it keeps
    /// counting after the backend moves into a runtime.
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
impl Backend for EtcdBackend {
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

#[cfg(test)]
mod tests {
    use crate::keys::Keys;
    use crate::DEFAULT_PREFIX;
    use tenure_core::{MemberId, TopicPartition};

    /// The keys are part of the record format (docs/stores.md, "Record
    /// formats and versions"): members of other versions read them.
    #[test]
    fn keys_are_pinned() {
        let keys = Keys::new(DEFAULT_PREFIX, "g");
        let partition = TopicPartition::new("orders", 3);
        let member = MemberId::new("m1").expect("a valid member id");
        assert_eq!(keys.all(), "/tenure/g/");
        assert_eq!(keys.members(), "/tenure/g/members/");
        assert_eq!(keys.member(&member), "/tenure/g/members/m1");
        assert_eq!(keys.owner(&partition), "/tenure/g/owners/orders/3");
        assert_eq!(keys.offset(&partition), "/tenure/g/offsets/orders/3");
        assert_eq!(
            Keys::new("/apps/", "g").owned_partitions(&[
                b"/apps/g/owners/orders/3".to_vec(),
                b"/apps/g/offsets/orders/3".to_vec(),
            ]),
            [partition]
        );
    }
}
