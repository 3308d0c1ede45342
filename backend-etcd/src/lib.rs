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
//! backend, each command in its own task so that commands pipeline. Every
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
mod ops;
mod security;
mod session;
mod watches;

pub use admin::EtcdAdmin;
pub use security::EtcdSecurity;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::{Event, MemberId, MemberInfo, SessionId, StoreRequest, TopicPartition};
use tenure_tokio::session::{
    check_start, submit, Registrations, Running, SessionState, SharedState, StoreSession,
};
use tenure_tokio::{Backend, BackendError, Joining, SessionTicket};

/// How long [`Backend::start`] waits for a server to grant the first lease
/// when no other bound is set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "/tenure";

/// How long [`Backend::shutdown`] waits for the server to revoke the lease.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The shortest request timeout derived from the session timeout.
const MIN_REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

// Test hooks are public only with the `testing` feature, which the
// workspace's tests turn on: production builds cannot set them.
#[cfg(feature = "testing")]
pub use tenure_tokio::session::Hooks;
#[cfg(not(feature = "testing"))]
use tenure_tokio::session::Hooks;

/// A [`Backend`] that keeps a group member's records in etcd.
///
/// Built with [`EtcdBackend::new`] and the builder methods; the first lease
/// is granted in [`Backend::start`]. After a lease expires the backend grants
/// a new one by itself.
#[derive(Debug)]
pub struct EtcdBackend {
    config: Config,
    running: Option<Running<Shared>>,
}

/// What a (re)connection needs.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    /// The endpoints as given (comma-separated), for errors and logs.
    pub(crate) endpoints: String,
    pub(crate) prefix: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// `None`: derived from the session timeout.
    pub(crate) request_timeout: Option<Duration>,
    /// Credentials and TLS, for a secured cluster.
    pub(crate) security: EtcdSecurity,
    pub(crate) hooks: Hooks,
    /// Requests sent to etcd so far, across leases.
    pub(crate) requests: Arc<AtomicU64>,
    /// Static membership: a lease outlives the backend (nothing revokes it
    /// when the backend is dropped), for a restarted process to resume.
    pub(crate) detached: bool,
}

impl Config {
    /// How the store is named in errors and logs.
    pub(crate) fn store(&self) -> String {
        match self.security.user_name() {
            Some(user) => format!("etcd at {} as {user}", self.endpoints),
            None => format!("etcd at {}", self.endpoints),
        }
    }

    /// The lease TTL to ask for: the session timeout in whole seconds,
    /// rounded up, at least 1.
    pub(crate) fn ttl_secs(&self) -> i64 {
        let t = self.session_timeout;
        let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
        i64::try_from(secs.max(1)).unwrap_or(i64::MAX)
    }

    /// How long one request may go unanswered before it fails with
    /// `ConnectionLoss`.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
            .unwrap_or_else(|| (self.session_timeout / 2).max(MIN_REQUEST_TIMEOUT))
    }

    pub(crate) fn endpoint_list(&self) -> Vec<String> {
        self.endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// The live lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    /// The lease id.
    pub(crate) lease: i64,
    /// The lease id as the core's session id.
    pub(crate) session: SessionId,
    /// The TTL the server granted.
    pub(crate) ttl: Duration,
}

impl Current {
    pub(crate) fn new(lease: i64, granted_secs: i64) -> Current {
        Current {
            lease,
            session: SessionId(lease as u64),
            ttl: Duration::from_secs(u64::try_from(granted_secs).unwrap_or(0)),
        }
    }
}

impl StoreSession for Current {
    fn id(&self) -> SessionId {
        self.session
    }
}

/// The keys of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    base: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, group: &str) -> Keys {
        Keys {
            base: format!("{}/{group}", prefix.trim_end_matches('/')),
        }
    }

    /// The prefix of every key of the group (with its trailing `/`).
    pub(crate) fn all(&self) -> String {
        format!("{}/", self.base)
    }

    /// The prefix of every member registration (with its trailing `/`).
    pub(crate) fn members(&self) -> String {
        format!("{}/members/", self.base)
    }

    /// A member's registration.
    pub(crate) fn member(&self, id: &MemberId) -> String {
        format!("{}/members/{id}", self.base)
    }

    /// The partitions of the owner records among `keys`.
    pub(crate) fn owned_partitions(&self, keys: &[Vec<u8>]) -> Vec<TopicPartition> {
        let owners = format!("{}/owners/", self.base);
        keys.iter()
            .filter_map(|key| {
                let key = std::str::from_utf8(key).ok()?;
                let (topic, partition) = key.strip_prefix(&owners)?.split_once('/')?;
                Some(TopicPartition::new(topic, partition.parse().ok()?))
            })
            .collect()
    }

    /// A partition's owner record.
    pub(crate) fn owner(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/owners/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// A partition's committed offset.
    pub(crate) fn offset(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/offsets/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }
}

/// State shared by the backend, its command tasks and the lease follower.
///
/// Claims, releases and commits of a partition hold its lock (see
/// [`tenure_tokio::session::execute`]). Each of those is a single
/// transaction, so no interleaving can break one; the lock keeps them in
/// submission order (a commit submitted before a release reaches the server
/// before it), as on ZooKeeper. The lease's last renewal is what
/// [`SessionState::last_heard`] tracks here: a lease lives TTL after its
/// last renewal, and other requests do not renew it.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) keys: Keys,
    pub(crate) member: MemberInfo,
    /// The client; it reconnects by itself and outlives leases.
    pub(crate) client: etcd_client::Client,
    /// The one watch stream that carries every watch, across leases.
    pub(crate) watches: watches::Watches,
    pub(crate) state: SessionState<Current>,
    /// The registrations as last read and the revision they were read at,
    /// for the next read to read only those changed since.
    pub(crate) registrations: std::sync::Mutex<Option<(i64, Registrations)>>,
}

impl SharedState for Shared {
    type Session = Current;

    fn state(&self) -> &SessionState<Current> {
        &self.state
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("config", &self.config)
            .field("keys", &self.keys)
            .field("member", &self.member.id)
            .field("current", &self.state.current())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Counts requests sent to etcd.
    pub(crate) fn count(&self, requests: u64) {
        self.config.requests.fetch_add(requests, Ordering::Relaxed);
    }
}

impl EtcdBackend {
    /// A backend for the etcd cluster at `endpoints`: one or more URLs,
    /// comma-separated (`http://host:2379,http://host2:2379`; a bare
    /// `host:port` means `http://`).
    pub fn new(endpoints: impl Into<String>) -> Self {
        EtcdBackend {
            config: Config {
                endpoints: endpoints.into(),
                prefix: DEFAULT_PREFIX.to_owned(),
                // The member's, set when it starts the backend.
                session_timeout: Duration::ZERO,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                request_timeout: None,
                security: EtcdSecurity::new(),
                hooks: Hooks::default(),
                requests: Arc::new(AtomicU64::new(0)),
                detached: false,
            },
            running: None,
        }
    }

    /// The key prefix under which groups live (default [`DEFAULT_PREFIX`]);
    /// the group's keys are under `<prefix>/<group>/`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// How long [`Backend::start`] (and each new lease after an expiry)
    /// waits for a server (default [`DEFAULT_CONNECT_TIMEOUT`]). The lease
    /// grant is tried up to three times within it, each try with a third
    /// of it, while no server answers: a try that reached a node cut off
    /// from the quorum gives way to one that may reach another.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// Credentials and TLS for a secured cluster (default: none, plaintext).
    /// A user or password etcd refuses, or a server certificate the CA did
    /// not sign, fails [`Backend::start`] with `BackendError::Denied`.
    pub fn security(mut self, security: EtcdSecurity) -> Self {
        self.config.security = security;
        self
    }

    /// How long a request may go unanswered before it fails with
    /// `StoreError::ConnectionLoss` (default: half the session timeout, at
    /// least one second).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = Some(timeout);
        self
    }

    /// Delays for reproducing races in tests; see [`Hooks`] (feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn hooks(mut self, hooks: Hooks) -> Self {
        self.config.hooks = hooks;
        self
    }

    /// A counter of the requests this backend's commands send to etcd (for
    /// benchmarks and metrics; lease keep-alives are not counted); it keeps
    /// counting after the backend moves into a runtime.
    pub fn request_counter(&self) -> Arc<AtomicU64> {
        self.config.requests.clone()
    }
}

#[async_trait]
impl Backend for EtcdBackend {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        check_start(self.running.is_some(), joining.session_timeout)?;
        self.config.session_timeout = joining.session_timeout;
        let endpoints = self.config.endpoint_list();
        if endpoints.is_empty() {
            return Err(BackendError::Config(format!(
                "{}: no endpoint given",
                self.config.store()
            )));
        }
        if let Some(problem) = endpoints.iter().find_map(|e| endpoint_problem(e)) {
            return Err(BackendError::Config(format!(
                "{}: {problem}",
                self.config.store()
            )));
        }
        self.config.detached = joining.static_membership;
        let keys = Keys::new(&self.config.prefix, &joining.group);
        let before = Instant::now();
        let resume = joining.resume.as_ref().map(|ticket| ticket.id);
        let (client, current, held) = session::connect(&self.config, &endpoints, resume).await?;
        let claims_held = held.map(|held| keys.owned_partitions(&held));
        let (watches, watching) = watches::Watches::new(watches::Link {
            client: client.clone(),
            request_timeout: self.config.request_timeout(),
            requests: self.config.requests.clone(),
        });
        // It ends by itself once the backend and every watch are gone.
        tokio::spawn(watching);
        let shared = Arc::new(Shared {
            config: self.config.clone(),
            keys,
            member: joining.member,
            client,
            watches,
            state: SessionState::new(joining.events, current, before),
            registrations: std::sync::Mutex::new(None),
        });
        tracing::info!(
            store = %self.config.store(),
            lease = %format_args!("{:x}", current.lease),
            ttl = ?current.ttl,
            "etcd lease granted"
        );
        shared.state.send(Event::SessionEstablished {
            session: current.session,
        });
        if let Some(partitions) = claims_held {
            // The claims the previous process left under the lease: the
            // member keeps those it is assigned and releases the others.
            tracing::info!(
                lease = %format_args!("{:x}", current.lease),
                claims = partitions.len(),
                "etcd lease resumed from a previous process"
            );
            shared.state.send(Event::ClaimsHeld { partitions });
        }
        let follower = tokio::spawn(session::follow(shared.clone()));
        self.running = Some(Running::new(shared, follower));
        Ok(())
    }

    fn ticket(&self) -> Option<SessionTicket> {
        let current = self.running.as_ref()?.shared().state.current()?;
        Some(SessionTicket {
            id: current.lease,
            secret: Vec::new(),
        })
    }

    async fn detach(&mut self) {
        if !self.config.detached {
            return self.shutdown().await;
        }
        let Some(running) = self.running.take() else {
            return;
        };
        // Nothing keeps the lease alive any more: it runs out, unless a
        // restarted process resumes it first.
        if let Some(current) = running.stop().await {
            tracing::info!(
                lease = %format_args!("{:x}", current.lease),
                "etcd lease left to run out, for a restarted process to resume"
            );
        }
    }

    fn submit(&mut self, command: StoreRequest) {
        submit(
            self.running.as_mut(),
            command,
            ops::execute,
            ops::execute_batch,
        );
    }

    async fn shutdown(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let mut client = running.shared().client.clone();
        let Some(current) = running.stop().await else {
            return;
        };
        // Revoking the lease deletes its keys now, not a TTL from now.
        match tokio::time::timeout(CLOSE_TIMEOUT, client.lease_revoke(current.lease)).await {
            Ok(Ok(_)) => {
                tracing::info!(lease = %format_args!("{:x}", current.lease), "etcd lease revoked")
            }
            Ok(Err(error)) => tracing::warn!(
                %error,
                "etcd did not revoke the lease; its keys vanish when it expires"
            ),
            Err(_) => tracing::warn!(
                "etcd did not revoke the lease within {CLOSE_TIMEOUT:?}; \
                 its keys vanish when it expires"
            ),
        }
    }
}

/// What is wrong with an endpoint URL, if anything. The client itself would
/// take a port that is not a number for no port at all (and dial port 80).
fn endpoint_problem(endpoint: &str) -> Option<String> {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    let authority = rest.split('/').next().unwrap_or(rest);
    let (host, port) = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => (host, Some(port.strip_prefix(':').unwrap_or(port))),
            None => return Some(format!("invalid endpoint {endpoint:?}: unclosed '['")),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Some(format!("invalid endpoint {endpoint:?}: no host"));
    }
    match port.map(str::parse::<u16>) {
        Some(Ok(0)) | Some(Err(_)) => Some(format!(
            "invalid endpoint {endpoint:?}: the port is not a number from 1 to 65535"
        )),
        _ => None,
    }
}

impl Drop for EtcdBackend {
    fn drop(&mut self) {
        let Some(running) = self.running.take() else {
            return;
        };
        let mut client = running.shared().client.clone();
        let current = running.abort();
        if self.config.detached {
            // A static member dropped without a close is a crash: its lease
            // is left for a restarted process to resume.
            return;
        }
        // Without shutdown, revoke in the background if a runtime is still
        // there; otherwise the lease simply expires.
        if let (Some(current), Ok(handle)) = (current, tokio::runtime::Handle::try_current()) {
            handle.spawn(async move {
                let _ =
                    tokio::time::timeout(CLOSE_TIMEOUT, client.lease_revoke(current.lease)).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{endpoint_problem, Keys, DEFAULT_PREFIX};
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

    #[test]
    fn endpoints_are_checked() {
        for good in [
            "http://127.0.0.1:2379",
            "https://etcd:2379",
            "etcd:2379",
            "http://[::1]:2379",
            "http://etcd",
        ] {
            assert_eq!(endpoint_problem(good), None, "{good}");
        }
        for bad in [
            "127.0.0.1:notaport",
            "http://etcd:0",
            "http://:2379",
            "http://[::1:2379",
            "http://etcd:99999",
        ] {
            assert!(endpoint_problem(bad).is_some(), "{bad}");
        }
    }
}
