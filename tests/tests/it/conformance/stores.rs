//! The three stores under test, behind one trait: each test gets a store of
//! its own (a fresh `MemoryStore`, a fresh ZooKeeper chroot, a fresh etcd
//! key prefix), members started on it, and a way to tamper with it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use etcd_client::Client as EtcdClient;
use tenure::core::records::{parse_offset, Layout};
use tenure::core::{FencingToken, MemberId, Offset, SessionId};
use tenure::etcd::EtcdBackend;
use tenure::tokio::{Backend, BackendError, Joining, MemoryBackend, MemoryStore};
use tenure::zookeeper::ZooKeeperBackend;
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use zookeeper_client as zk;

use super::harness::{partition, Driver};
use super::proxy::Proxy;
use super::{etcd_server, zookeeper_server};

/// The session timeout of ordinary members: long enough never to lapse
/// during a test.
pub const SESSION: Duration = Duration::from_secs(10);
/// The session timeout of members whose session a test ends.
pub const SHORT_SESSION: Duration = Duration::from_secs(2);

/// Where the stores legitimately (or, for the in-memory store, knowingly)
/// part ways; each scenario asserts the common contract and branches only
/// on these.
#[derive(Clone, Copy, Debug)]
pub struct Quirks {
    /// An unreadable member registration is reported as
    /// `Event::StoreProblem` (ZooKeeper, etcd) besides being left out of
    /// `MembersResult`; the in-memory adapter only leaves it out.
    pub reports_corrupt_registrations: bool,
    /// `WatchOwner` on an absent record still leaves a watch behind, which
    /// fires `OwnerDeleted` when the record is next *created* (ZooKeeper's
    /// `exists` watch, and the model's copy of it); etcd sets no watch when
    /// the record is absent.
    pub absent_owner_watch_fires_on_create: bool,
    /// After its session expires, the backend opens a new one and sends
    /// `SessionEstablished` (the contract of `Backend`); every store does
    /// now, the flag stays so a store that stops doing it is caught.
    pub reopens_session_after_expiry: bool,
    /// A command under a session that expired is answered (with
    /// `SessionExpired` or `NotOwner`), as the contract says.
    pub answers_commands_after_expiry: bool,
    /// A single claim that asks for the committed offset reads it (etcd,
    /// in its transaction); `false` where it leaves the read to the member
    /// (ZooKeeper, whose claims read nothing, and the model), whose reads
    /// then go together.
    pub single_claim_reads_offset: bool,
    /// Claims sent together read their offsets with them (etcd, in the
    /// batch's own transaction); `false` where they leave the reads to the
    /// member (ZooKeeper), or nothing goes in batches (the in-memory store
    /// answers each request in place, as a single one).
    pub batch_claims_read_offset: bool,
    /// The most requests a step's batches may take on the wire; `None`
    /// where nothing is sent (the in-memory store answers in place).
    pub batch_requests: Option<BatchRequests>,
}

/// The most requests the batches of the `batches` scenario may take: one
/// request per batch of a kind (at most 120 in a batch), and on ZooKeeper
/// a multi-read before the writes, and for a refused batch of claims the
/// read of who holds what and the free ones claimed again.
#[derive(Clone, Copy, Debug)]
pub struct BatchRequests {
    /// 300 claims, one partition held by another member.
    pub claims: u64,
    /// 300 offset reads.
    pub reads: u64,
    /// 131 commits, one under a stale token and one of another's partition.
    pub commits: u64,
    /// Their 131 releases.
    pub releases: u64,
    /// One release carrying its final commit, over an offset stored
    /// already (the `final_commits` scenario).
    pub final_commit: u64,
    /// Seven releases in one go, five carrying a final commit.
    pub final_commits: u64,
    /// One claim reading its offset (the `claims_read_offsets` scenario).
    pub claim_reading: u64,
    /// Ten claims reading their offsets in one go, none held.
    pub claims_reading: u64,
    /// Ten claims reading their offsets in one go, one held.
    pub claims_reading_held: u64,
}

/// Which of a group's records to look at directly.
#[derive(Clone, Copy, Debug)]
pub enum Which<'a> {
    /// A member's registration.
    Member(&'a str),
    /// A partition's owner record.
    Owner(u32),
}

/// A record as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Its data.
    pub data: Vec<u8>,
    /// The session it belongs to (an ephemeral znode's owner, a key's
    /// lease), if any.
    pub session: Option<SessionId>,
    /// Its creation: what a claim's fencing token is (czxid,
    /// create_revision).
    pub created: FencingToken,
}

/// Ends a member's session on the server while the member's backend lives
/// on, as when a member goes silent (a network partition, a long pause).
#[async_trait]
pub trait EndSession: Send {
    /// Starts ending `session`: the store expires it within about the
    /// session timeout, and the member's backend can learn it.
    async fn end(&mut self, session: SessionId);
    /// Lets the member reach the store again (a no-op where nothing was
    /// cut).
    async fn restore(&mut self);
}

/// A store under test.
#[async_trait]
pub trait Store: Send + Sync {
    /// Which store, for messages.
    fn name(&self) -> &'static str;
    fn quirks(&self) -> Quirks;
    /// A backend for one more member (not started).
    fn backend(&self, member: &str) -> Box<dyn Backend>;
    /// A backend with a session of `session_timeout` whose session the
    /// test can end on the server.
    async fn mortal_backend(&self, member: &str) -> (Box<dyn Backend>, Box<dyn EndSession>);
    /// The path or key a `StoreError::Corrupt` names for an offset.
    fn offset_path(&self, group: &str, p: u32) -> String;
    /// Writes garbage as the committed offset of partition `p`.
    async fn corrupt_offset(&self, group: &str, p: u32);
    /// Writes garbage as the registration of `member`.
    async fn corrupt_registration(&self, group: &str, member: &str);
    /// The member id in the owner record of `p`, looked at directly.
    async fn owner(&self, group: &str, p: u32) -> Option<String>;
    /// The committed offset of `p`, looked at directly (`None` if absent
    /// or unreadable).
    async fn committed(&self, group: &str, p: u32) -> Option<Offset>;
    /// A record of `group`, looked at directly; `None` if absent.
    async fn record(&self, group: &str, which: Which<'_>) -> Option<Stored>;
    /// Writes `data` as the committed offset of `p`, making its parents.
    async fn put_offset(&self, group: &str, p: u32, data: &[u8]);
    /// A backend whose requests are counted (the counter), or `None`
    /// where nothing goes on a wire.
    fn counted_backend(&self, member: &str) -> (Box<dyn Backend>, Option<Arc<AtomicU64>>);
    /// A backend behind a proxy the test controls; `None` where there is
    /// no connection to cut (the in-memory store).
    async fn proxied_backend(&self, member: &str) -> Option<(Box<dyn Backend>, Proxy)>;

    /// A started member.
    async fn member(&self, member: &str) -> Driver {
        Driver::start(self.name(), self.backend(member), member, SESSION).await
    }

    /// A started member, and the count of its requests where there is one.
    async fn counted(&self, member: &str) -> (Driver, Option<Arc<AtomicU64>>) {
        let (backend, counter) = self.counted_backend(member);
        let driver = Driver::start(self.name(), backend, member, SESSION).await;
        (driver, counter)
    }

    /// A started member whose session the test can end.
    async fn mortal(&self, member: &str) -> Driver {
        let (backend, ender) = self.mortal_backend(member).await;
        let mut driver = Driver::start(self.name(), backend, member, SHORT_SESSION).await;
        driver.ender = Some(ender);
        driver
    }
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

// ------------------------------------------------------------------ memory

/// The embedded in-memory store (the simulator's model).
pub struct Memory {
    store: MemoryStore,
}

impl Memory {
    pub async fn new(_test: &str) -> Memory {
        Memory {
            store: MemoryStore::new(),
        }
    }
}

/// A current-thread runtime on a thread of its own, which a test can freeze
/// (block its only thread) to silence the tasks running on it.
struct SideRuntime {
    handle: Handle,
    _stop: oneshot::Sender<()>,
}

impl SideRuntime {
    fn new() -> SideRuntime {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a side runtime");
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        // Runs until the sender is dropped.
        std::thread::spawn(move || {
            let _ = runtime.block_on(stopped);
        });
        SideRuntime {
            handle,
            _stop: stop,
        }
    }
}

/// A memory member started on a side runtime, so that its keep-alive task
/// (spawned by `start`) lives there and stops when the runtime is frozen:
/// the member goes silent, like a paused process, while its backend lives.
struct MemoryOnSideRuntime {
    inner: Option<MemoryBackend>,
    side: Arc<SideRuntime>,
}

#[async_trait]
impl Backend for MemoryOnSideRuntime {
    async fn start(&mut self, joining: Joining) -> Result<(), BackendError> {
        let mut inner = self.inner.take().expect("started once");
        let (inner, result) = self
            .side
            .handle
            .spawn(async move {
                let result = inner.start(joining).await;
                (inner, result)
            })
            .await
            .expect("start on the side runtime");
        self.inner = Some(inner);
        result
    }

    fn submit(&mut self, command: tenure::core::StoreRequest) {
        self.inner.as_mut().expect("started").submit(command)
    }

    async fn shutdown(&mut self) {
        if let Some(inner) = self.inner.as_mut() {
            inner.shutdown().await;
        }
    }
}

/// Freezes the member's side runtime for longer than its session timeout:
/// another member's keep-alive reaps the session meanwhile, and when the
/// runtime thaws the member's own keep-alive finds it gone.
struct Freeze {
    side: Arc<SideRuntime>,
    session_timeout: Duration,
}

#[async_trait]
impl EndSession for Freeze {
    async fn end(&mut self, _session: SessionId) {
        let frozen = self.session_timeout * 2 + Duration::from_millis(500);
        self.side.handle.spawn(async move {
            std::thread::sleep(frozen);
        });
    }

    async fn restore(&mut self) {}
}

#[async_trait]
impl Store for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn quirks(&self) -> Quirks {
        Quirks {
            reports_corrupt_registrations: false,
            absent_owner_watch_fires_on_create: true,
            reopens_session_after_expiry: true,
            answers_commands_after_expiry: true,
            single_claim_reads_offset: false,
            batch_claims_read_offset: false,
            batch_requests: None,
        }
    }

    fn backend(&self, _member: &str) -> Box<dyn Backend> {
        Box::new(self.store.backend())
    }

    async fn mortal_backend(&self, _member: &str) -> (Box<dyn Backend>, Box<dyn EndSession>) {
        let side = Arc::new(SideRuntime::new());
        let backend = MemoryOnSideRuntime {
            inner: Some(self.store.backend()),
            side: side.clone(),
        };
        let ender = Freeze {
            side,
            session_timeout: SHORT_SESSION,
        };
        (Box::new(backend), Box::new(ender))
    }

    fn offset_path(&self, group: &str, p: u32) -> String {
        Layout::new("", group).offset(&partition(p))
    }

    async fn corrupt_offset(&self, group: &str, p: u32) {
        self.store
            .put_raw_for_test(&self.offset_path(group, p), b"garbage");
    }

    async fn corrupt_registration(&self, group: &str, member: &str) {
        let path =
            Layout::new("", group).member(&MemberId::new(member).expect("a valid member id"));
        self.store.put_raw_for_test(&path, b"not json");
    }

    async fn owner(&self, group: &str, p: u32) -> Option<String> {
        self.store.owner(group, &partition(p))
    }

    async fn committed(&self, group: &str, p: u32) -> Option<Offset> {
        self.store.committed(group, &partition(p))
    }

    async fn record(&self, group: &str, which: Which<'_>) -> Option<Stored> {
        let (data, session, created) = self.store.record_for_test(&layout_path(group, which))?;
        Some(Stored {
            data,
            session,
            created: FencingToken(created),
        })
    }

    async fn put_offset(&self, group: &str, p: u32, data: &[u8]) {
        self.store
            .put_raw_for_test(&self.offset_path(group, p), data);
    }

    fn counted_backend(&self, member: &str) -> (Box<dyn Backend>, Option<Arc<AtomicU64>>) {
        (self.backend(member), None)
    }

    async fn proxied_backend(&self, _member: &str) -> Option<(Box<dyn Backend>, Proxy)> {
        None
    }
}

/// The path of a record in Kafka 0.8's layout (ZooKeeper's and the
/// in-memory store's).
fn layout_path(group: &str, which: Which<'_>) -> String {
    let layout = Layout::new("", group);
    match which {
        Which::Member(member) => layout.member(&MemberId::new(member).expect("a valid member id")),
        Which::Owner(p) => layout.owner(&partition(p)),
    }
}

// --------------------------------------------------------------- ZooKeeper

/// A fresh chroot on the real ZooKeeper.
pub struct ZooKeeper {
    address: String,
    chroot: String,
    raw: zk::Client,
}

impl ZooKeeper {
    pub async fn new(test: &str) -> ZooKeeper {
        let (address, chroot) = zookeeper_server::fresh_chroot(test).await;
        let raw = zookeeper_server::client(&format!("{address}{chroot}")).await;
        ZooKeeper {
            address,
            chroot,
            raw,
        }
    }

    async fn put_persistent(&self, path: &str, data: &[u8]) {
        let parent = &path[..path.rfind('/').expect("an absolute path")];
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        self.raw
            .mkdir(parent, &persistent)
            .await
            .expect("create the parents");
        self.raw
            .create(path, data, &persistent)
            .await
            .expect("write garbage");
    }
}

/// Cuts the member's connection (a proxy in between) for as long as the
/// test likes: the server expires the session after its timeout, and the
/// member's client concludes the same from the silence.
struct Cut(Proxy);

#[async_trait]
impl EndSession for Cut {
    async fn end(&mut self, _session: SessionId) {
        self.0.down();
    }

    async fn restore(&mut self) {
        self.0.up();
    }
}

#[async_trait]
impl Store for ZooKeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn quirks(&self) -> Quirks {
        Quirks {
            reports_corrupt_registrations: true,
            absent_owner_watch_fires_on_create: true,
            reopens_session_after_expiry: true,
            answers_commands_after_expiry: true,
            single_claim_reads_offset: false,
            batch_claims_read_offset: false,
            // A `multi` per batch of a kind, a multi-read before commits and
            // releases; for the refused batch of claims, a multi-read of its
            // owners and one batch of its free partitions; and, on a server
            // that answers a multi's creates without their stat
            // (ZOOKEEPER-4026, before 3.9), a multi-read of the tokens for
            // each batch made.
            batch_requests: Some(BatchRequests {
                claims: 8,
                reads: 3,
                commits: 4,
                releases: 4,
                // A multi-read of the owner records and offsets, then one
                // multi.
                final_commit: 2,
                final_commits: 2,
                // The offsets are left to the member: the create, the
                // multi (and the tokens read back before 3.9); refused,
                // the read of who holds what and the free ones claimed
                // again the same way.
                claim_reading: 1,
                claims_reading: 2,
                claims_reading_held: 4,
            }),
        }
    }

    fn backend(&self, _member: &str) -> Box<dyn Backend> {
        Box::new(
            ZooKeeperBackend::new(format!("{}{}", self.address, self.chroot))
                .hooks(tenure::zookeeper::Hooks::default()),
        )
    }

    async fn mortal_backend(&self, _member: &str) -> (Box<dyn Backend>, Box<dyn EndSession>) {
        let proxy = Proxy::start(&self.address).await;
        let backend = ZooKeeperBackend::new(format!("{}{}", proxy.address, self.chroot));
        (Box::new(backend), Box::new(Cut(proxy)))
    }

    fn offset_path(&self, group: &str, p: u32) -> String {
        // Paths are reported inside the chroot.
        Layout::new("", group).offset(&partition(p))
    }

    async fn corrupt_offset(&self, group: &str, p: u32) {
        self.put_persistent(&self.offset_path(group, p), b"garbage")
            .await;
    }

    async fn corrupt_registration(&self, group: &str, member: &str) {
        let path =
            Layout::new("", group).member(&MemberId::new(member).expect("a valid member id"));
        self.put_persistent(&path, b"not json").await;
    }

    async fn owner(&self, group: &str, p: u32) -> Option<String> {
        let path = Layout::new("", group).owner(&partition(p));
        match self.raw.get_data(&path).await {
            Ok((data, _)) => Some(String::from_utf8(data).expect("a UTF-8 member id")),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("read {path}: {e}"),
        }
    }

    async fn committed(&self, group: &str, p: u32) -> Option<Offset> {
        let path = self.offset_path(group, p);
        match self.raw.get_data(&path).await {
            Ok((data, _)) => parse_offset(&path, &data).ok(),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("read {path}: {e}"),
        }
    }
    async fn record(&self, group: &str, which: Which<'_>) -> Option<Stored> {
        let path = layout_path(group, which);
        match self.raw.get_data(&path).await {
            Ok((data, stat)) => Some(Stored {
                data,
                session: (stat.ephemeral_owner != 0)
                    .then_some(SessionId(stat.ephemeral_owner as u64)),
                created: FencingToken(stat.czxid as u64),
            }),
            Err(zk::Error::NoNode) => None,
            Err(e) => panic!("read {path}: {e}"),
        }
    }

    async fn put_offset(&self, group: &str, p: u32, data: &[u8]) {
        self.put_persistent(&self.offset_path(group, p), data).await;
    }

    fn counted_backend(&self, _member: &str) -> (Box<dyn Backend>, Option<Arc<AtomicU64>>) {
        let backend = ZooKeeperBackend::new(format!("{}{}", self.address, self.chroot));
        let counter = backend.request_counter();
        (Box::new(backend), Some(counter))
    }

    async fn proxied_backend(&self, _member: &str) -> Option<(Box<dyn Backend>, Proxy)> {
        let proxy = Proxy::start(&self.address).await;
        let backend = ZooKeeperBackend::new(format!("{}{}", proxy.address, self.chroot));
        Some((Box::new(backend), proxy))
    }
}

// -------------------------------------------------------------------- etcd

/// A fresh key prefix on the real etcd.
pub struct Etcd {
    endpoint: String,
    prefix: String,
    raw: EtcdClient,
}

impl Etcd {
    pub async fn new(test: &str) -> Etcd {
        let endpoint = etcd_server::endpoint();
        let raw = etcd_server::client(&endpoint).await;
        Etcd {
            endpoint,
            prefix: format!("/tenure-conf-{test}-{}", nanos()),
            raw,
        }
    }

    fn key(&self, group: &str, kind: &str, rest: &str) -> String {
        format!("{}/{group}/{kind}/{rest}", self.prefix)
    }

    async fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut raw = self.raw.clone();
        let response = raw.get(key, None).await.expect("read a key");
        response.kvs().first().map(|kv| kv.value().to_vec())
    }

    async fn put(&self, key: &str, data: &[u8]) {
        let mut raw = self.raw.clone();
        raw.put(key, data, None).await.expect("write garbage");
    }

    fn backend_at(&self, endpoint: &str) -> EtcdBackend {
        EtcdBackend::new(endpoint)
            .prefix(self.prefix.clone())
            .hooks(tenure::etcd::Hooks::default())
    }
}

/// Revokes the member's lease behind its back: its keys go at once, and
/// its next keep-alive learns the lease is gone.
struct Revoke(EtcdClient);

#[async_trait]
impl EndSession for Revoke {
    async fn end(&mut self, session: SessionId) {
        self.0
            .lease_revoke(session.0 as i64)
            .await
            .expect("revoke the member's lease");
    }

    async fn restore(&mut self) {}
}

#[async_trait]
impl Store for Etcd {
    fn name(&self) -> &'static str {
        "etcd"
    }

    fn quirks(&self) -> Quirks {
        Quirks {
            reports_corrupt_registrations: true,
            absent_owner_watch_fires_on_create: false,
            reopens_session_after_expiry: true,
            answers_commands_after_expiry: true,
            single_claim_reads_offset: true,
            batch_claims_read_offset: true,
            // One transaction per batch of a kind, each request nested in
            // its own (etcd takes 128 operations in one by default).
            batch_requests: Some(BatchRequests {
                claims: 3,
                reads: 3,
                commits: 2,
                releases: 2,
                final_commit: 1,
                final_commits: 1,
                // The read is in the claim's transaction.
                claim_reading: 1,
                claims_reading: 1,
                claims_reading_held: 1,
            }),
        }
    }

    fn backend(&self, _member: &str) -> Box<dyn Backend> {
        Box::new(self.backend_at(&self.endpoint))
    }

    async fn mortal_backend(&self, _member: &str) -> (Box<dyn Backend>, Box<dyn EndSession>) {
        let backend = self.backend_at(&self.endpoint);
        (Box::new(backend), Box::new(Revoke(self.raw.clone())))
    }

    fn offset_path(&self, group: &str, p: u32) -> String {
        let tp = partition(p);
        self.key(group, "offsets", &format!("{}/{}", tp.topic, tp.partition))
    }

    async fn corrupt_offset(&self, group: &str, p: u32) {
        self.put(&self.offset_path(group, p), b"garbage").await;
    }

    async fn corrupt_registration(&self, group: &str, member: &str) {
        self.put(&self.key(group, "members", member), b"not json")
            .await;
    }

    async fn owner(&self, group: &str, p: u32) -> Option<String> {
        let tp = partition(p);
        let key = self.key(group, "owners", &format!("{}/{}", tp.topic, tp.partition));
        let data = self.get(&key).await?;
        Some(String::from_utf8(data).expect("a UTF-8 member id"))
    }

    async fn committed(&self, group: &str, p: u32) -> Option<Offset> {
        let key = self.offset_path(group, p);
        let data = self.get(&key).await?;
        parse_offset(&key, &data).ok()
    }
    async fn record(&self, group: &str, which: Which<'_>) -> Option<Stored> {
        let key = match which {
            Which::Member(member) => self.key(group, "members", member),
            Which::Owner(p) => {
                let tp = partition(p);
                self.key(group, "owners", &format!("{}/{}", tp.topic, tp.partition))
            }
        };
        let mut raw = self.raw.clone();
        let response = raw.get(key.as_str(), None).await.expect("read a key");
        response.kvs().first().map(|kv| Stored {
            data: kv.value().to_vec(),
            session: (kv.lease() != 0).then_some(SessionId(kv.lease() as u64)),
            created: FencingToken(kv.create_revision() as u64),
        })
    }

    async fn put_offset(&self, group: &str, p: u32, data: &[u8]) {
        self.put(&self.offset_path(group, p), data).await;
    }

    fn counted_backend(&self, _member: &str) -> (Box<dyn Backend>, Option<Arc<AtomicU64>>) {
        let backend = self.backend_at(&self.endpoint);
        let counter = backend.request_counter();
        (Box::new(backend), Some(counter))
    }

    async fn proxied_backend(&self, _member: &str) -> Option<(Box<dyn Backend>, Proxy)> {
        let proxy = Proxy::start(self.endpoint.trim_start_matches("http://")).await;
        // A request the proxy swallows fails within a second, not half a
        // session.
        let backend = self
            .backend_at(&format!("http://{}", proxy.address))
            .request_timeout(Duration::from_secs(1));
        Some((Box::new(backend), proxy))
    }
}
