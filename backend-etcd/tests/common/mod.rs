//! Test harness: a real etcd (address in `TENURE_ETCD`), one key prefix per
//! test, and backends driven directly with made-up request ids.

#![allow(dead_code)]

// The same proxy the ZooKeeper tests use: it only forwards bytes.
#[path = "../../../backend-zookeeper/tests/common/proxy.rs"]
pub mod proxy;

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, KeyValue};
use tenure_core::{Command, Event, MemberId, MemberInfo, RequestId, SessionId, TopicPartition};
use tenure_etcd::{EtcdBackend, Hooks};
use tenure_tokio::Backend;
use tokio::sync::mpsc;

/// How long any one expected event may take.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

pub const GROUP: &str = "g";
pub const TOPIC: &str = "t";

const HOW_TO_START: &str = "start one with `eval \"$(scripts/services start etcd)\"` \
     (scripts/services start sets TENURE_ETCD) and run the tests again";

/// The server's address; fails the test if it is not set.
pub fn address() -> String {
    match std::env::var("TENURE_ETCD") {
        Ok(a) if !a.trim().is_empty() => a.trim().to_owned(),
        _ => panic!("TENURE_ETCD is not set: these tests need a real etcd; {HOW_TO_START}"),
    }
}

/// A client of the whole server; fails the test if the server does not
/// answer.
pub async fn raw_client(address: &str) -> Client {
    let connecting = async {
        let mut client = Client::connect([address], None).await?;
        client.status().await?;
        Ok::<_, etcd_client::Error>(client)
    };
    match tokio::time::timeout(Duration::from_secs(5), connecting).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => panic!("etcd at {address} does not answer ({e}); {HOW_TO_START}"),
        Err(_) => panic!("etcd at {address} does not answer within 5s; {HOW_TO_START}"),
    }
}

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
        EtcdBackend::new(address)
            .prefix(self.prefix.clone())
            .session_timeout(Duration::from_secs(10))
    }

    /// Starts a backend for `member` in this sandbox.
    pub async fn member(&self, member: &str) -> Driver {
        self.member_with(member, Hooks::default()).await
    }

    /// Starts a backend for `member` with test hooks.
    pub async fn member_with(&self, member: &str, hooks: Hooks) -> Driver {
        let backend = self.backend(&self.address).hooks(hooks);
        Driver::start(backend, info(member)).await
    }
}

pub fn info(member: &str) -> MemberInfo {
    MemberInfo {
        id: MemberId::new(member).expect("valid member id"),
        topics: BTreeSet::from([TOPIC.to_owned()]),
        strategy: "sticky".to_owned(),
    }
}

pub fn partition(p: u32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// The lease id behind a session id.
pub fn lease(session: SessionId) -> i64 {
    session.0 as i64
}

/// A started backend and the events it sent.
pub struct Driver {
    pub backend: EtcdBackend,
    pub info: MemberInfo,
    pub session: SessionId,
    events: mpsc::UnboundedReceiver<Event>,
    /// Events received while waiting for another one.
    pending: VecDeque<Event>,
    next_id: u64,
}

impl Driver {
    pub async fn start(mut backend: EtcdBackend, info: MemberInfo) -> Driver {
        let (tx, events) = mpsc::unbounded_channel();
        if let Err(e) = backend.start(GROUP, &info, tx).await {
            panic!("backend does not start ({e}); {HOW_TO_START}");
        }
        let mut driver = Driver {
            backend,
            info,
            session: SessionId(0),
            events,
            pending: VecDeque::new(),
            next_id: 1,
        };
        driver.session = driver
            .wait_for("SessionEstablished", |e| match e {
                Event::SessionEstablished { session } => Some(*session),
                _ => None,
            })
            .await;
        driver
    }

    pub fn id(&mut self) -> RequestId {
        let id = RequestId(self.next_id);
        self.next_id += 1;
        id
    }

    /// Waits for the first event `pick` accepts; keeps the others for later.
    pub async fn wait_for<T>(
        &mut self,
        what: &str,
        mut pick: impl FnMut(&Event) -> Option<T>,
    ) -> T {
        if let Some(i) = self.pending.iter().position(|e| pick(e).is_some()) {
            let event = self.pending.remove(i).expect("index in range");
            return pick(&event).expect("picked before");
        }
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Err(_) => panic!(
                    "no {what} within {EVENT_TIMEOUT:?}; other events: {:?}",
                    self.pending
                ),
                Ok(None) => panic!("event channel closed while waiting for {what}"),
                Ok(Some(event)) => match pick(&event) {
                    Some(found) => return found,
                    None => self.pending.push_back(event),
                },
            }
        }
    }

    /// Whether an event `pick` accepts has arrived already (no waiting).
    pub fn has(&mut self, mut pick: impl FnMut(&Event) -> bool) -> bool {
        while let Ok(event) = self.events.try_recv() {
            self.pending.push_back(event);
        }
        self.pending.iter().any(&mut pick)
    }

    /// Submits the command `make` builds from a fresh id and this session;
    /// returns the id.
    pub fn submit(&mut self, make: impl FnOnce(RequestId, SessionId) -> Command) -> RequestId {
        let id = self.id();
        let command = make(id, self.session);
        self.backend.submit(command);
        id
    }

    /// Waits for the result event of request `id`.
    pub async fn result(&mut self, id: RequestId) -> Event {
        self.wait_for(&format!("result of {id:?}"), |e| {
            (e.request_id() == Some(id)).then(|| e.clone())
        })
        .await
    }

    pub async fn register(&mut self) -> Event {
        let member = self.info.clone();
        let id = self.submit(|id, session| Command::Register {
            id,
            session,
            member,
        });
        self.result(id).await
    }

    pub async fn watch_members(&mut self) -> Vec<String> {
        let id = self.submit(|id, session| Command::WatchMembers { id, session });
        match self.result(id).await {
            Event::MembersResult {
                result: Ok(members),
                ..
            } => {
                let mut ids: Vec<String> = members
                    .into_iter()
                    .map(|m| m.id.as_str().to_owned())
                    .collect();
                ids.sort();
                ids
            }
            other => panic!("WatchMembers answered {other:?}"),
        }
    }

    pub async fn heartbeat(&mut self) -> Event {
        let id = self.submit(|id, session| Command::Heartbeat { id, session });
        self.result(id).await
    }

    pub async fn claim(&mut self, p: u32) -> Event {
        let id = self.submit(|id, session| Command::Claim {
            id,
            session,
            partition: partition(p),
        });
        self.result(id).await
    }

    pub async fn release(&mut self, p: u32, token: Option<tenure_core::FencingToken>) -> Event {
        let id = self.submit(|id, session| Command::Release {
            id,
            session,
            partition: partition(p),
            token,
        });
        self.result(id).await
    }

    pub async fn commit(&mut self, p: u32, offset: i64, token: tenure_core::FencingToken) -> Event {
        let id = self.submit(|id, session| Command::CommitOffset {
            id,
            session,
            partition: partition(p),
            offset,
            token,
        });
        self.result(id).await
    }

    pub async fn read_offset(&mut self, p: u32) -> Event {
        let id = self.submit(|id, session| Command::ReadOffset {
            id,
            session,
            partition: partition(p),
        });
        self.result(id).await
    }

    pub async fn watch_owner(&mut self, p: u32) -> Event {
        let id = self.submit(|id, session| Command::WatchOwner {
            id,
            session,
            partition: partition(p),
        });
        self.result(id).await
    }
}
