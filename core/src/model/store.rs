//! An in-memory store with ZooKeeper's semantics: a tree of nodes with
//! versions and transaction ids, sessions that own ephemeral nodes, one-shot
//! watches and atomic multi-operations.
//!
//! The model is deterministic so that a simulation replays exactly from its
//! seed: it never reads a clock (every time is passed in as an [`Instant`]),
//! draws no random numbers (faults are injected around it, not inside), and
//! keeps everything in ordered maps so that every list it returns has the
//! same order on every run.
//!
//! Sessions end only when told to: by [`Store::close_session`],
//! [`Store::expire_session`] or [`Store::expire_due`]. A session whose
//! deadline has passed but which was not expired yet is still alive for
//! reads and writes; it can no longer be renewed by [`Store::touch`], though,
//! so no ordering of calls can bring a session back from beyond its
//! deadline.
//!
//! Writes return the [`WatchEvent`]s they fired; the caller delivers them.
//! Transaction ids count changes to the tree: opening, renewing and closing
//! a session without ephemeral nodes leaves [`Store::zxid`] unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::types::SessionId;

/// How long a created node lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CreateMode {
    /// The node stays until it is deleted.
    Persistent,
    /// The node is deleted when the session that created it ends.
    Ephemeral,
}

/// The metadata of a node, as ZooKeeper reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The transaction that created the node; it grows with every creation,
    /// so a node deleted and created again gets a larger one (a fencing
    /// token).
    pub czxid: u64,
    /// The transaction that last changed the node's data (its creation if
    /// the data never changed).
    pub mzxid: u64,
    /// How many times the node's data was set since its creation.
    pub version: u32,
    /// How many times a child of the node was created or deleted.
    pub cversion: u32,
    /// The session owning the node if it is ephemeral.
    pub ephemeral_owner: Option<SessionId>,
    /// How many children the node has now.
    pub num_children: u32,
}

/// Why a store operation was refused. A refused operation changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// A node already exists at the path.
    #[error("a node already exists at the path")]
    NodeExists,
    /// The node, or the parent a new node needs, does not exist.
    #[error("the node or its parent does not exist")]
    NoNode,
    /// The node's version is not the expected one.
    #[error("the node's version is not the expected one")]
    BadVersion,
    /// The node still has children.
    #[error("the node has children")]
    NotEmpty,
    /// The parent of the new node is ephemeral.
    #[error("an ephemeral node cannot have children")]
    NoChildrenForEphemerals,
    /// The session was closed or expired (or never existed).
    #[error("the session has expired or was closed")]
    SessionExpired,
    /// The path is not an absolute, normalised node path, or names the root
    /// where the root cannot be used.
    #[error("the path is not a valid node path for this operation")]
    BadPath,
}

/// What happened to the node a watch was set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchEventKind {
    /// The node was created (only a watch set on a missing node sees this).
    NodeCreated,
    /// The node was deleted.
    NodeDeleted,
    /// The node's data was set.
    NodeDataChanged,
    /// A child of the node was created or deleted.
    NodeChildrenChanged,
}

/// A fired watch, to be delivered to the session that set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchEvent {
    /// The session that set the watch.
    pub session: SessionId,
    /// The path the watch was set on.
    pub path: String,
    /// What happened.
    pub kind: WatchEventKind,
}

/// One operation of a [`Store::multi`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Creates a node, as [`Store::create`].
    Create {
        /// The new node's path.
        path: String,
        /// Its data.
        data: Vec<u8>,
        /// Whether it is ephemeral.
        mode: CreateMode,
    },
    /// Deletes a node, as [`Store::delete`].
    Delete {
        /// The node's path.
        path: String,
        /// The version the node must have, if any.
        version: Option<u32>,
    },
    /// Sets a node's data, as [`Store::set_data`].
    SetData {
        /// The node's path.
        path: String,
        /// The new data.
        data: Vec<u8>,
        /// The version the node must have, if any.
        version: Option<u32>,
    },
    /// Fails the whole multi unless the node exists with this version.
    Check {
        /// The node's path.
        path: String,
        /// The version the node must have.
        version: u32,
    },
}

/// The result of one successful operation of a [`Store::multi`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpResult {
    /// The node was created; its metadata.
    Created(Stat),
    /// The node was deleted.
    Deleted,
    /// The node's data was set; its new metadata.
    Set(Stat),
    /// The node had the expected version.
    Checked,
}

#[derive(Clone, Debug)]
struct Node {
    data: Vec<u8>,
    czxid: u64,
    mzxid: u64,
    version: u32,
    cversion: u32,
    ephemeral_owner: Option<SessionId>,
    children: BTreeSet<String>,
}

impl Node {
    fn stat(&self) -> Stat {
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            version: self.version,
            cversion: self.cversion,
            ephemeral_owner: self.ephemeral_owner,
            num_children: u32::try_from(self.children.len()).unwrap_or(u32::MAX),
        }
    }
}

#[derive(Clone, Debug)]
struct Session {
    timeout: Duration,
    deadline: Instant,
    ephemerals: BTreeSet<String>,
}

/// Which watch table a trigger looks in: ZooKeeper keeps data watches (set
/// by getData and exists) apart from child watches (set by getChildren).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Table {
    Data,
    Child,
}

/// A change that may fire watches. Writes record triggers and fire them only
/// once the whole write has succeeded, so a multi that is rolled back never
/// consumes a one-shot watch.
#[derive(Clone, Debug)]
struct Trigger {
    table: Table,
    path: String,
    kind: WatchEventKind,
}

/// How to take back one change of a write in progress. Logging inverse
/// changes keeps a multi's rollback proportional to what it touched rather
/// than to the size of the tree.
#[derive(Debug)]
enum Undo {
    Created {
        path: String,
    },
    Deleted {
        path: String,
        node: Node,
    },
    DataSet {
        path: String,
        data: Vec<u8>,
        mzxid: u64,
        version: u32,
    },
    ChildrenChanged {
        path: String,
        cversion: u32,
    },
}

/// The in-memory store: the node tree, the sessions and the watches.
#[derive(Clone, Debug)]
pub struct Store {
    nodes: BTreeMap<String, Node>,
    sessions: BTreeMap<SessionId, Session>,
    data_watches: BTreeMap<String, BTreeSet<SessionId>>,
    child_watches: BTreeMap<String, BTreeSet<SessionId>>,
    zxid: u64,
    last_session: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

/// Checks that `path` is absolute, has no trailing slash (except the root),
/// no empty, `.` or `..` elements, and no control characters (ZooKeeper
/// refuses those too).
fn validate_path(path: &str) -> Result<(), OpError> {
    if path == "/" {
        return Ok(());
    }
    let rest = path.strip_prefix('/').ok_or(OpError::BadPath)?;
    for element in rest.split('/') {
        if element.is_empty() || element == "." || element == ".." {
            return Err(OpError::BadPath);
        }
    }
    if path.chars().any(char::is_control) {
        return Err(OpError::BadPath);
    }
    Ok(())
}

/// Splits a valid non-root path into its parent's path and its own name.
fn split_path(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(0) | None => ("/", path.get(1..).unwrap_or("")),
        Some(i) => (&path[..i], &path[i + 1..]),
    }
}

/// `now + timeout`, saturating instead of overflowing: a session with an
/// absurdly long timeout simply never expires in practice.
fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    let mut span = timeout;
    loop {
        if let Some(deadline) = now.checked_add(span) {
            return deadline;
        }
        span /= 2;
    }
}

impl Store {
    /// An empty store: only the root `/` exists, and no session.
    pub fn new() -> Store {
        let root = Node {
            data: Vec::new(),
            czxid: 0,
            mzxid: 0,
            version: 0,
            cversion: 0,
            ephemeral_owner: None,
            children: BTreeSet::new(),
        };
        Store {
            nodes: BTreeMap::from([("/".to_owned(), root)]),
            sessions: BTreeMap::new(),
            data_watches: BTreeMap::new(),
            child_watches: BTreeMap::new(),
            zxid: 0,
            last_session: 0,
        }
    }

    // ----- sessions -------------------------------------------------------

    /// Opens a session that expires at `now + timeout` unless renewed. Ids
    /// are 1, 2, 3… and never reused, so a stale id can never act for a
    /// newer session.
    pub fn open_session(&mut self, now: Instant, timeout: Duration) -> SessionId {
        self.last_session = self.last_session.saturating_add(1);
        let id = SessionId(self.last_session);
        self.sessions.insert(
            id,
            Session {
                timeout,
                deadline: deadline_after(now, timeout),
                ephemerals: BTreeSet::new(),
            },
        );
        id
    }

    /// Renews the session (a ping or any request from its client): its
    /// deadline becomes `now + timeout`. The deadline never moves backwards,
    /// so a late-delivered ping cannot shorten it. A session at or past its
    /// deadline is refused with `SessionExpired` even if it was not expired
    /// yet, because the server would have expired it by then.
    pub fn touch(&mut self, session: SessionId, now: Instant) -> Result<(), OpError> {
        let s = self
            .sessions
            .get_mut(&session)
            .ok_or(OpError::SessionExpired)?;
        if s.deadline <= now {
            return Err(OpError::SessionExpired);
        }
        s.deadline = s.deadline.max(deadline_after(now, s.timeout));
        Ok(())
    }

    /// A new leader takes over: every open session's timeout restarts from
    /// `now`, as ZooKeeper's new leader restarts them and etcd's extends
    /// its leases. A session already past its deadline is left to expire:
    /// as if the old leader had ended it before it was lost, which only
    /// ends it sooner.
    pub fn restart_timeouts(&mut self, now: Instant) {
        for session in self.sessions() {
            let _past_deadline = self.touch(session, now).is_err();
        }
    }

    /// Whether the session is open: opened and neither closed nor expired.
    /// Passing the deadline alone does not end it; see [`Store::expire_due`].
    pub fn session_alive(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session)
    }

    /// When the session expires unless renewed; `None` if it is not alive.
    pub fn session_deadline(&self, session: SessionId) -> Option<Instant> {
        self.sessions.get(&session).map(|s| s.deadline)
    }

    /// The open sessions, in id order.
    pub fn sessions(&self) -> Vec<SessionId> {
        self.sessions.keys().copied().collect()
    }

    /// The paths of the ephemeral nodes the session owns, sorted; empty if
    /// the session is not alive.
    pub fn ephemerals(&self, session: SessionId) -> Vec<String> {
        self.sessions
            .get(&session)
            .map(|s| s.ephemerals.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Closes the session as its client asks: its watches are dropped and
    /// its ephemeral nodes deleted now, in path order, each deletion a
    /// transaction of its own. Returns the watches of other sessions that
    /// fired; nothing if the session was not alive.
    pub fn close_session(&mut self, session: SessionId) -> Vec<WatchEvent> {
        self.end_session(session)
    }

    /// Expires the session now, as the server does when it stops hearing
    /// from the client. Same effects as [`Store::close_session`].
    pub fn expire_session(&mut self, session: SessionId) -> Vec<WatchEvent> {
        self.end_session(session)
    }

    /// Expires every session whose deadline is at or before `now`, earliest
    /// deadline first (ties by id), and returns the watches that fired.
    pub fn expire_due(&mut self, now: Instant) -> Vec<WatchEvent> {
        let mut due: Vec<(Instant, SessionId)> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(&id, s)| (s.deadline, id))
            .collect();
        due.sort();
        let mut events = Vec::new();
        for (_, id) in due {
            events.extend(self.end_session(id));
        }
        events
    }

    /// The earliest deadline among open sessions: when
    /// [`Store::expire_due`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.sessions.values().map(|s| s.deadline).min()
    }

    fn end_session(&mut self, session: SessionId) -> Vec<WatchEvent> {
        let Some(ended) = self.sessions.remove(&session) else {
            return Vec::new();
        };
        // Dropped before the deletions so that the ended session is never
        // told about its own ephemerals going away.
        for table in [&mut self.data_watches, &mut self.child_watches] {
            table.retain(|_, watchers| {
                watchers.remove(&session);
                !watchers.is_empty()
            });
        }
        let mut undo = Vec::new();
        let mut triggers = Vec::new();
        for path in &ended.ephemerals {
            // Ephemeral nodes have no children and their parents outlive
            // them, so deleting them one by one cannot fail; if the model
            // were ever inconsistent, skipping a node beats panicking.
            let _ = self.apply_delete(path, None, &mut undo, &mut triggers);
        }
        self.fire(triggers)
    }

    // ----- writes ---------------------------------------------------------

    /// Creates a node at `path` with `data`; an ephemeral node is owned by
    /// `session`. Fires data watches on the node (`NodeCreated`) and child
    /// watches on its parent.
    pub fn create(
        &mut self,
        session: SessionId,
        path: &str,
        data: Vec<u8>,
        mode: CreateMode,
    ) -> Result<(Stat, Vec<WatchEvent>), OpError> {
        self.write(session, |store, undo, triggers| {
            store.apply_create(session, path, data, mode, undo, triggers)
        })
    }

    /// Creates every missing ancestor of `path` (not `path` itself) as an
    /// empty persistent node. An ancestor that already exists counts as
    /// success, so members racing to create the same tree all succeed.
    pub fn create_parents(
        &mut self,
        session: SessionId,
        path: &str,
    ) -> Result<Vec<WatchEvent>, OpError> {
        let ((), events) = self.write(session, |store, undo, triggers| {
            validate_path(path)?;
            let ends = path.match_indices('/').map(|(i, _)| i).skip(1);
            for end in ends {
                let ancestor = &path[..end];
                match store.apply_create(
                    session,
                    ancestor,
                    Vec::new(),
                    CreateMode::Persistent,
                    undo,
                    triggers,
                ) {
                    Ok(_) | Err(OpError::NodeExists) => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })?;
        Ok(events)
    }

    /// Deletes the node at `path`, if it has `version` when one is given.
    /// Fires data and child watches on the node (`NodeDeleted`) and child
    /// watches on its parent.
    pub fn delete(
        &mut self,
        session: SessionId,
        path: &str,
        version: Option<u32>,
    ) -> Result<Vec<WatchEvent>, OpError> {
        let ((), events) = self.write(session, |store, undo, triggers| {
            store.apply_delete(path, version, undo, triggers)
        })?;
        Ok(events)
    }

    /// Replaces the data of the node at `path`, if it has `version` when one
    /// is given. Fires data watches on the node (`NodeDataChanged`).
    pub fn set_data(
        &mut self,
        session: SessionId,
        path: &str,
        data: Vec<u8>,
        version: Option<u32>,
    ) -> Result<(Stat, Vec<WatchEvent>), OpError> {
        self.write(session, |store, undo, triggers| {
            store.apply_set_data(path, data, version, undo, triggers)
        })
    }

    /// Applies `ops` in order as one atomic step: either all succeed, each
    /// write with its own transaction id, or none is applied and the error
    /// names the index of the first op that failed. Later ops see the
    /// effects of earlier ones. A session that is not alive fails at index
    /// 0. Watches fire only if the whole multi succeeds. A `Check` changes
    /// nothing, so it takes no transaction id.
    pub fn multi(
        &mut self,
        session: SessionId,
        ops: Vec<Op>,
    ) -> Result<(Vec<OpResult>, Vec<WatchEvent>), (usize, OpError)> {
        self.check_session(session).map_err(|e| (0, e))?;
        let mut triggers = Vec::new();
        let results = self.atomically(|store, undo| {
            let mut results = Vec::with_capacity(ops.len());
            for (index, op) in ops.into_iter().enumerate() {
                let result = match op {
                    Op::Create { path, data, mode } => store
                        .apply_create(session, &path, data, mode, undo, &mut triggers)
                        .map(OpResult::Created),
                    Op::Delete { path, version } => store
                        .apply_delete(&path, version, undo, &mut triggers)
                        .map(|()| OpResult::Deleted),
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => store
                        .apply_set_data(&path, data, version, undo, &mut triggers)
                        .map(OpResult::Set),
                    Op::Check { path, version } => store
                        .apply_check(&path, version)
                        .map(|()| OpResult::Checked),
                };
                results.push(result.map_err(|e| (index, e))?);
            }
            Ok(results)
        })?;
        Ok((results, self.fire(triggers)))
    }

    fn check_session(&self, session: SessionId) -> Result<(), OpError> {
        if self.sessions.contains_key(&session) {
            Ok(())
        } else {
            Err(OpError::SessionExpired)
        }
    }

    /// Runs `write` for `session` as one transaction: refused if the
    /// session is not alive, taken back whole if it fails, and the watches
    /// it triggers fired only once it has succeeded.
    fn write<T>(
        &mut self,
        session: SessionId,
        write: impl FnOnce(&mut Store, &mut Vec<Undo>, &mut Vec<Trigger>) -> Result<T, OpError>,
    ) -> Result<(T, Vec<WatchEvent>), OpError> {
        self.check_session(session)?;
        let mut triggers = Vec::new();
        let value = self.atomically(|store, undo| write(store, undo, &mut triggers))?;
        Ok((value, self.fire(triggers)))
    }

    /// Runs `write` and takes back everything it changed if it fails.
    fn atomically<T, E>(
        &mut self,
        write: impl FnOnce(&mut Store, &mut Vec<Undo>) -> Result<T, E>,
    ) -> Result<T, E> {
        let zxid = self.zxid;
        let mut undo = Vec::new();
        let result = write(self, &mut undo);
        if result.is_err() {
            self.rollback(undo);
            self.zxid = zxid;
        }
        result
    }

    fn rollback(&mut self, undo: Vec<Undo>) {
        for step in undo.into_iter().rev() {
            match step {
                Undo::Created { path } => {
                    if let Some(node) = self.nodes.remove(&path) {
                        self.forget_ephemeral(node.ephemeral_owner, &path);
                    }
                    let (parent, name) = split_path(&path);
                    if let Some(parent) = self.nodes.get_mut(parent) {
                        parent.children.remove(name);
                    }
                }
                Undo::Deleted { path, node } => {
                    if let Some(owner) = node.ephemeral_owner {
                        if let Some(s) = self.sessions.get_mut(&owner) {
                            s.ephemerals.insert(path.clone());
                        }
                    }
                    let (parent, name) = split_path(&path);
                    if let Some(parent) = self.nodes.get_mut(parent) {
                        parent.children.insert(name.to_owned());
                    }
                    self.nodes.insert(path, node);
                }
                Undo::DataSet {
                    path,
                    data,
                    mzxid,
                    version,
                } => {
                    if let Some(node) = self.nodes.get_mut(&path) {
                        node.data = data;
                        node.mzxid = mzxid;
                        node.version = version;
                    }
                }
                Undo::ChildrenChanged { path, cversion } => {
                    if let Some(node) = self.nodes.get_mut(&path) {
                        node.cversion = cversion;
                    }
                }
            }
        }
    }

    fn forget_ephemeral(&mut self, owner: Option<SessionId>, path: &str) {
        if let Some(s) = owner.and_then(|owner| self.sessions.get_mut(&owner)) {
            s.ephemerals.remove(path);
        }
    }

    fn next_zxid(&mut self) -> u64 {
        self.zxid = self.zxid.saturating_add(1);
        self.zxid
    }

    // Each `apply_*` checks everything before changing anything, so a
    // refused op leaves no trace of itself; the undo log only has to take
    // back the earlier ops of a multi.

    fn apply_create(
        &mut self,
        session: SessionId,
        path: &str,
        data: Vec<u8>,
        mode: CreateMode,
        undo: &mut Vec<Undo>,
        triggers: &mut Vec<Trigger>,
    ) -> Result<Stat, OpError> {
        validate_path(path)?;
        if path == "/" {
            return Err(OpError::BadPath);
        }
        let (parent_path, name) = split_path(path);
        let parent = self.nodes.get(parent_path).ok_or(OpError::NoNode)?;
        if self.nodes.contains_key(path) {
            return Err(OpError::NodeExists);
        }
        if parent.ephemeral_owner.is_some() {
            return Err(OpError::NoChildrenForEphemerals);
        }
        let zxid = self.next_zxid();
        let owner = match mode {
            CreateMode::Persistent => None,
            CreateMode::Ephemeral => Some(session),
        };
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            undo.push(Undo::ChildrenChanged {
                path: parent_path.to_owned(),
                cversion: parent.cversion,
            });
            parent.cversion = parent.cversion.wrapping_add(1);
            parent.children.insert(name.to_owned());
        }
        if let Some(s) = owner.and_then(|owner| self.sessions.get_mut(&owner)) {
            s.ephemerals.insert(path.to_owned());
        }
        let node = Node {
            data,
            czxid: zxid,
            mzxid: zxid,
            version: 0,
            cversion: 0,
            ephemeral_owner: owner,
            children: BTreeSet::new(),
        };
        let stat = node.stat();
        self.nodes.insert(path.to_owned(), node);
        undo.push(Undo::Created {
            path: path.to_owned(),
        });
        triggers.push(Trigger {
            table: Table::Data,
            path: path.to_owned(),
            kind: WatchEventKind::NodeCreated,
        });
        triggers.push(Trigger {
            table: Table::Child,
            path: parent_path.to_owned(),
            kind: WatchEventKind::NodeChildrenChanged,
        });
        Ok(stat)
    }

    fn apply_delete(
        &mut self,
        path: &str,
        version: Option<u32>,
        undo: &mut Vec<Undo>,
        triggers: &mut Vec<Trigger>,
    ) -> Result<(), OpError> {
        validate_path(path)?;
        if path == "/" {
            return Err(OpError::BadPath);
        }
        let node = self.nodes.get(path).ok_or(OpError::NoNode)?;
        if version.is_some_and(|v| v != node.version) {
            return Err(OpError::BadVersion);
        }
        if !node.children.is_empty() {
            return Err(OpError::NotEmpty);
        }
        let Some(node) = self.nodes.remove(path) else {
            return Err(OpError::NoNode);
        };
        self.next_zxid();
        self.forget_ephemeral(node.ephemeral_owner, path);
        let (parent_path, name) = split_path(path);
        if let Some(parent) = self.nodes.get_mut(parent_path) {
            undo.push(Undo::ChildrenChanged {
                path: parent_path.to_owned(),
                cversion: parent.cversion,
            });
            parent.cversion = parent.cversion.wrapping_add(1);
            parent.children.remove(name);
        }
        undo.push(Undo::Deleted {
            path: path.to_owned(),
            node,
        });
        for table in [Table::Data, Table::Child] {
            triggers.push(Trigger {
                table,
                path: path.to_owned(),
                kind: WatchEventKind::NodeDeleted,
            });
        }
        triggers.push(Trigger {
            table: Table::Child,
            path: parent_path.to_owned(),
            kind: WatchEventKind::NodeChildrenChanged,
        });
        Ok(())
    }

    fn apply_set_data(
        &mut self,
        path: &str,
        data: Vec<u8>,
        version: Option<u32>,
        undo: &mut Vec<Undo>,
        triggers: &mut Vec<Trigger>,
    ) -> Result<Stat, OpError> {
        validate_path(path)?;
        let current = self.nodes.get(path).ok_or(OpError::NoNode)?;
        if version.is_some_and(|v| v != current.version) {
            return Err(OpError::BadVersion);
        }
        let zxid = self.zxid.saturating_add(1);
        let node = self.nodes.get_mut(path).ok_or(OpError::NoNode)?;
        self.zxid = zxid;
        undo.push(Undo::DataSet {
            path: path.to_owned(),
            data: std::mem::replace(&mut node.data, data),
            mzxid: node.mzxid,
            version: node.version,
        });
        node.mzxid = zxid;
        node.version = node.version.wrapping_add(1);
        let stat = node.stat();
        triggers.push(Trigger {
            table: Table::Data,
            path: path.to_owned(),
            kind: WatchEventKind::NodeDataChanged,
        });
        Ok(stat)
    }

    fn apply_check(&self, path: &str, version: u32) -> Result<(), OpError> {
        validate_path(path)?;
        let node = self.nodes.get(path).ok_or(OpError::NoNode)?;
        if node.version == version {
            Ok(())
        } else {
            Err(OpError::BadVersion)
        }
    }

    /// Fires the watches the triggers hit, in trigger order and by session
    /// id within a trigger. A session watching a deleted node through both
    /// tables hears about it once, as ZooKeeper notifies it once.
    fn fire(&mut self, triggers: Vec<Trigger>) -> Vec<WatchEvent> {
        let mut seen = BTreeSet::new();
        let mut events = Vec::new();
        for trigger in triggers {
            let table = match trigger.table {
                Table::Data => &mut self.data_watches,
                Table::Child => &mut self.child_watches,
            };
            let Some(watchers) = table.remove(&trigger.path) else {
                continue;
            };
            for session in watchers {
                let key = (session, trigger.path.clone(), kind_rank(trigger.kind));
                if seen.insert(key) {
                    events.push(WatchEvent {
                        session,
                        path: trigger.path.clone(),
                        kind: trigger.kind,
                    });
                }
            }
        }
        events
    }

    // ----- reads and watches ----------------------------------------------

    /// The data and metadata of the node at `path`. Reads need no session.
    pub fn get(&self, path: &str) -> Result<(Vec<u8>, Stat), OpError> {
        validate_path(path)?;
        let node = self.nodes.get(path).ok_or(OpError::NoNode)?;
        Ok((node.data.clone(), node.stat()))
    }

    /// The metadata of the node at `path`, if it exists (and the path is
    /// valid).
    pub fn exists(&self, path: &str) -> Option<Stat> {
        self.nodes.get(path).map(Node::stat)
    }

    /// The names (not paths) of the children of the node at `path`, sorted.
    pub fn children(&self, path: &str) -> Result<Vec<String>, OpError> {
        validate_path(path)?;
        let node = self.nodes.get(path).ok_or(OpError::NoNode)?;
        Ok(node.children.iter().cloned().collect())
    }

    /// As [`Store::get`], and sets a one-shot data watch for `session` on
    /// the node (fires on its data change or deletion). No watch is set if
    /// the node does not exist, as in ZooKeeper.
    pub fn get_watch(
        &mut self,
        session: SessionId,
        path: &str,
    ) -> Result<(Vec<u8>, Stat), OpError> {
        self.read_and_watch(session, path, Store::get, |store| &mut store.data_watches)
    }

    /// As [`Store::exists`], and sets a one-shot data watch for `session`
    /// whether or not the node exists, so that a missing node's creation is
    /// seen (`NodeCreated`), as well as a data change or deletion.
    pub fn exists_watch(
        &mut self,
        session: SessionId,
        path: &str,
    ) -> Result<Option<Stat>, OpError> {
        // Only a bad path fails, so a missing node is watched too.
        let exists = |store: &Store, path: &str| {
            validate_path(path)?;
            Ok(store.exists(path))
        };
        self.read_and_watch(session, path, exists, |store| &mut store.data_watches)
    }

    /// As [`Store::children`], and sets a one-shot child watch for
    /// `session` on the node: it fires `NodeChildrenChanged` when a child is
    /// created or deleted, `NodeDeleted` when the node itself is deleted. No
    /// watch is set if the node does not exist.
    pub fn children_watch(
        &mut self,
        session: SessionId,
        path: &str,
    ) -> Result<Vec<String>, OpError> {
        self.read_and_watch(session, path, Store::children, |store| {
            &mut store.child_watches
        })
    }

    /// Reads `path` with `read` for `session` and, if the read succeeds,
    /// leaves a one-shot watch for the session on `path` in the table
    /// `table` picks.
    fn read_and_watch<T>(
        &mut self,
        session: SessionId,
        path: &str,
        read: impl FnOnce(&Store, &str) -> Result<T, OpError>,
        table: fn(&mut Store) -> &mut BTreeMap<String, BTreeSet<SessionId>>,
    ) -> Result<T, OpError> {
        self.check_session(session)?;
        let found = read(self, path)?;
        table(self)
            .entry(path.to_owned())
            .or_default()
            .insert(session);
        Ok(found)
    }

    /// The id of the last transaction that changed the tree (0 for a fresh
    /// store).
    pub fn zxid(&self) -> u64 {
        self.zxid
    }

    /// Every node's path, root included, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }
}

#[cfg(feature = "sim")]
impl Store {
    /// Writes what decides the store's future into `canon`, for the
    /// explorer's visited set. Left out: version counters and the last
    /// session id. The adapter reads a node's version and uses it in the
    /// same request, so no version is carried from one request to the
    /// next; and a new session's id is above every one present, which the
    /// renaming by rank keeps.
    #[doc(hidden)]
    pub fn canonical(&self, canon: &mut crate::canon::Canon) {
        canon.number(self.nodes.len() as u64);
        for (path, node) in &self.nodes {
            canon.raw((path, &node.data));
            canon.zxid(node.czxid);
            canon.maybe_session(node.ephemeral_owner);
        }
        canon.number(self.sessions.len() as u64);
        for (&id, session) in &self.sessions {
            canon.session(id);
            canon.time(session.deadline);
            canon.raw(session.timeout);
        }
        for table in [&self.data_watches, &self.child_watches] {
            canon.number(table.len() as u64);
            for (path, watchers) in table {
                canon.raw(path);
                canon.number(watchers.len() as u64);
                for &session in watchers {
                    canon.session(session);
                }
            }
        }
        canon.zxid(self.zxid);
    }
}

/// An order on event kinds, so that events can be deduplicated in an
/// ordered set without deriving `Ord` on the public type.
fn kind_rank(kind: WatchEventKind) -> u8 {
    match kind {
        WatchEventKind::NodeCreated => 0,
        WatchEventKind::NodeDeleted => 1,
        WatchEventKind::NodeDataChanged => 2,
        WatchEventKind::NodeChildrenChanged => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(10);

    fn store_with_session() -> (Store, SessionId, Instant) {
        let t0 = Instant::now();
        let mut store = Store::new();
        let s = store.open_session(t0, TIMEOUT);
        (store, s, t0)
    }

    /// A store with two live sessions, for the tests of what one session
    /// sees of the other's doings.
    fn store_with_two_sessions() -> (Store, SessionId, SessionId) {
        let (mut store, first, t0) = store_with_session();
        let second = store.open_session(t0, TIMEOUT);
        (store, first, second)
    }

    /// Creates `path` with `data` as `session`, failing the test if the
    /// store refuses, and returns the watch events the creation fired.
    fn create(
        store: &mut Store,
        session: SessionId,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Vec<WatchEvent> {
        match store.create(session, path, data.to_vec(), mode) {
            Ok((_, events)) => events,
            Err(error) => panic!("create {path}: {error:?}"),
        }
    }

    /// The step of a multi that creates `path` with no data.
    fn create_op(path: &str, mode: CreateMode) -> Op {
        Op::Create {
            path: path.into(),
            data: vec![],
            mode,
        }
    }

    fn ev(session: SessionId, path: &str, kind: WatchEventKind) -> WatchEvent {
        WatchEvent {
            session,
            path: path.to_owned(),
            kind,
        }
    }

    #[test]
    fn path_validation() {
        let (mut store, s, _) = store_with_session();
        for bad in [
            "", "a", "a/b", "/a/", "//a", "/a//b", "/.", "/a/..", "/a/./b", "/a\0b", "/a\nb",
        ] {
            assert_eq!(
                store.create(s, bad, vec![], CreateMode::Persistent),
                Err(OpError::BadPath),
                "{bad:?}"
            );
            assert_eq!(store.get(bad), Err(OpError::BadPath), "{bad:?}");
            assert_eq!(store.exists_watch(s, bad), Err(OpError::BadPath), "{bad:?}");
        }
        assert_eq!(
            store.create(s, "/", vec![], CreateMode::Persistent),
            Err(OpError::BadPath)
        );
        assert_eq!(store.delete(s, "/", None), Err(OpError::BadPath));
        // Dots are only refused as whole elements.
        assert!(store
            .create(s, "/.a..b", vec![], CreateMode::Persistent)
            .is_ok());
        assert_eq!(store.paths(), vec!["/", "/.a..b"]);
        assert_eq!(store.zxid(), 1);
    }

    #[test]
    fn root_exists_from_the_start() {
        let store = Store::default();
        let root = store.exists("/").expect("root exists");
        assert_eq!(root.czxid, 0);
        assert_eq!(root.ephemeral_owner, None);
        assert_eq!(store.children("/"), Ok(vec![]));
        assert_eq!(store.zxid(), 0);
    }

    #[test]
    fn create_needs_parent_and_refuses_duplicates() {
        let (mut store, s, _) = store_with_session();
        assert_eq!(
            store.create(s, "/a/b", vec![], CreateMode::Persistent),
            Err(OpError::NoNode)
        );
        let (stat, _) = store
            .create(s, "/a", b"x".to_vec(), CreateMode::Persistent)
            .expect("create /a");
        assert_eq!((stat.czxid, stat.mzxid, stat.version), (1, 1, 0));
        assert_eq!(
            store.create(s, "/a", b"y".to_vec(), CreateMode::Persistent),
            Err(OpError::NodeExists)
        );
        assert_eq!(store.get("/a").map(|(d, _)| d), Ok(b"x".to_vec()));
        create(&mut store, s, "/a/c", b"", CreateMode::Persistent);
        create(&mut store, s, "/a/b", b"", CreateMode::Persistent);
        assert_eq!(store.children("/a"), Ok(vec!["b".into(), "c".into()]));
        let parent = store.exists("/a").expect("/a");
        assert_eq!((parent.cversion, parent.num_children), (2, 2));
        assert_eq!(store.children("/missing"), Err(OpError::NoNode));
        assert_eq!(store.zxid(), 3);
    }

    #[test]
    fn ephemeral_cannot_have_children() {
        let (mut store, s, _) = store_with_session();
        create(&mut store, s, "/e", b"", CreateMode::Ephemeral);
        assert_eq!(
            store.create(s, "/e/c", vec![], CreateMode::Persistent),
            Err(OpError::NoChildrenForEphemerals)
        );
        assert_eq!(
            store.create_parents(s, "/e/c/d"),
            Err(OpError::NoChildrenForEphemerals)
        );
        assert_eq!(store.paths(), vec!["/", "/e"]);
    }

    #[test]
    fn ephemeral_deleted_on_expiry_with_watch_events() {
        let (mut store, owner, t0) = store_with_session();
        let watcher = store.open_session(t0, TIMEOUT * 2);
        create(&mut store, owner, "/g", b"", CreateMode::Persistent);
        let (stat, _) = store
            .create(owner, "/g/m", vec![], CreateMode::Ephemeral)
            .expect("create /g/m");
        assert_eq!(stat.ephemeral_owner, Some(owner));
        assert_eq!(store.ephemerals(owner), vec!["/g/m"]);
        store.get_watch(watcher, "/g/m").expect("watch /g/m");
        store.children_watch(watcher, "/g").expect("watch /g");
        // The owner watches its own node: it must not hear of its deletion.
        store.exists_watch(owner, "/g/m").expect("owner watch");

        let events = store.expire_session(owner);
        assert_eq!(
            events,
            vec![
                ev(watcher, "/g/m", WatchEventKind::NodeDeleted),
                ev(watcher, "/g", WatchEventKind::NodeChildrenChanged),
            ]
        );
        assert!(!store.session_alive(owner));
        assert_eq!(store.session_deadline(owner), None);
        assert_eq!(store.exists("/g/m"), None);
        assert!(store.exists("/g").is_some(), "persistent nodes survive");
        assert!(store.expire_session(owner).is_empty());
    }

    #[test]
    fn close_session_deletes_ephemerals_now() {
        let (mut store, s, other) = store_with_two_sessions();
        create(&mut store, s, "/a", b"", CreateMode::Ephemeral);
        create(&mut store, s, "/b", b"", CreateMode::Ephemeral);
        create(&mut store, other, "/c", b"", CreateMode::Ephemeral);
        store.children_watch(other, "/").expect("watch /");
        let events = store.close_session(s);
        // One-shot: the second deletion finds the child watch already gone.
        assert_eq!(
            events,
            vec![ev(other, "/", WatchEventKind::NodeChildrenChanged)]
        );
        assert_eq!(store.paths(), vec!["/", "/c"]);
        assert_eq!(store.sessions(), vec![other]);
    }

    #[test]
    fn versions_and_bad_version() {
        let (mut store, s, _) = store_with_session();
        create(&mut store, s, "/n", b"0", CreateMode::Persistent);
        assert_eq!(
            store.set_data(s, "/n", b"x".to_vec(), Some(1)),
            Err(OpError::BadVersion)
        );
        let (stat, _) = store
            .set_data(s, "/n", b"1".to_vec(), Some(0))
            .expect("set v0");
        assert_eq!((stat.version, stat.czxid, stat.mzxid), (1, 1, 2));
        let (stat, _) = store
            .set_data(s, "/n", b"2".to_vec(), None)
            .expect("set any");
        assert_eq!((stat.version, stat.mzxid), (2, 3));
        assert_eq!(store.get("/n"), Ok((b"2".to_vec(), stat)));
        assert_eq!(store.delete(s, "/n", Some(1)), Err(OpError::BadVersion));
        assert!(store.exists("/n").is_some());
        store.delete(s, "/n", Some(2)).expect("delete v2");
        assert_eq!(store.delete(s, "/n", None), Err(OpError::NoNode));
        assert_eq!(store.set_data(s, "/n", vec![], None), Err(OpError::NoNode));
        assert_eq!(store.zxid(), 4);
    }

    #[test]
    fn delete_refuses_non_empty() {
        let (mut store, s, _) = store_with_session();
        store.create_parents(s, "/a/b/c").expect("parents");
        assert_eq!(store.delete(s, "/a", None), Err(OpError::NotEmpty));
        store.delete(s, "/a/b", None).expect("delete leaf");
        let parent = store.exists("/a").expect("/a");
        assert_eq!((parent.cversion, parent.num_children), (2, 0));
        store.delete(s, "/a", None).expect("delete now empty");
    }

    #[test]
    fn czxid_grows_on_recreate() {
        let (mut store, s, _) = store_with_session();
        let (first, _) = store
            .create(s, "/owner", vec![], CreateMode::Ephemeral)
            .expect("create");
        store.delete(s, "/owner", None).expect("delete");
        let (second, _) = store
            .create(s, "/owner", vec![], CreateMode::Ephemeral)
            .expect("re-create");
        assert!(second.czxid > first.czxid);
        assert_eq!(second.version, 0);
    }

    #[test]
    fn watches_fire_once_and_only_for_their_session() {
        let (mut store, a, b) = store_with_two_sessions();
        create(&mut store, a, "/n", b"", CreateMode::Persistent);
        store.get_watch(a, "/n").expect("a watches");
        store.get_watch(a, "/n").expect("a watches again");
        let (_, events) = store.set_data(b, "/n", b"1".to_vec(), None).expect("set");
        assert_eq!(events, vec![ev(a, "/n", WatchEventKind::NodeDataChanged)]);
        let (_, events) = store
            .set_data(b, "/n", b"2".to_vec(), None)
            .expect("set again");
        assert!(events.is_empty(), "the watch was one-shot");

        // A node watched through both tables yields one deletion event.
        store.get_watch(b, "/n").expect("b data watch");
        store.children_watch(b, "/n").expect("b child watch");
        let events = store.delete(a, "/n", None).expect("delete");
        assert_eq!(events, vec![ev(b, "/n", WatchEventKind::NodeDeleted)]);
        // No watch is left on a missing node by get or children.
        assert_eq!(store.get_watch(a, "/n"), Err(OpError::NoNode));
        assert_eq!(store.children_watch(a, "/n"), Err(OpError::NoNode));
        let events = create(&mut store, b, "/n", b"", CreateMode::Persistent);
        assert!(events.is_empty());
    }

    #[test]
    fn exists_watch_on_missing_node_fires_created() {
        let (mut store, a, b) = store_with_two_sessions();
        assert_eq!(store.exists_watch(a, "/late"), Ok(None));
        assert_eq!(store.exists_watch(b, "/late"), Ok(None));
        let events = create(&mut store, a, "/late", b"", CreateMode::Persistent);
        assert_eq!(
            events,
            vec![
                ev(a, "/late", WatchEventKind::NodeCreated),
                ev(b, "/late", WatchEventKind::NodeCreated),
            ]
        );
        assert!(store.exists_watch(a, "/late").expect("watch").is_some());
        let events = store.delete(b, "/late", None).expect("delete");
        assert_eq!(events, vec![ev(a, "/late", WatchEventKind::NodeDeleted)]);
    }

    #[test]
    fn children_watch_fires_on_child_add_and_remove() {
        let (mut store, s, _) = store_with_session();
        create(&mut store, s, "/g", b"", CreateMode::Persistent);
        assert_eq!(store.children_watch(s, "/g"), Ok(vec![]));
        let events = create(&mut store, s, "/g/m1", b"", CreateMode::Ephemeral);
        assert_eq!(
            events,
            vec![ev(s, "/g", WatchEventKind::NodeChildrenChanged)]
        );
        // A data change of a child or of the node itself is not a child
        // change.
        assert_eq!(store.children_watch(s, "/g"), Ok(vec!["m1".to_owned()]));
        let (_, events) = store.set_data(s, "/g/m1", vec![1], None).expect("set");
        assert!(events.is_empty());
        let (_, events) = store.set_data(s, "/g", vec![1], None).expect("set");
        assert!(events.is_empty());
        let events = store.delete(s, "/g/m1", None).expect("remove");
        assert_eq!(
            events,
            vec![ev(s, "/g", WatchEventKind::NodeChildrenChanged)]
        );
    }

    #[test]
    fn multi_is_atomic() {
        let (mut store, s, w) = store_with_two_sessions();
        create(&mut store, s, "/p", b"v", CreateMode::Persistent);
        store.exists_watch(w, "/q").expect("watch /q");
        store.get_watch(w, "/p").expect("watch /p");
        let before_zxid = store.zxid();
        let before = store.get("/p").expect("get");
        let ops = vec![
            create_op("/q", CreateMode::Ephemeral),
            Op::SetData {
                path: "/p".into(),
                data: b"new".to_vec(),
                version: Some(0),
            },
            Op::Delete {
                path: "/p".into(),
                version: None,
            },
            Op::Check {
                path: "/p".into(),
                version: 0,
            },
        ];
        assert_eq!(store.multi(s, ops), Err((3, OpError::NoNode)));
        assert_eq!(store.zxid(), before_zxid);
        assert_eq!(store.get("/p"), Ok(before.clone()));
        assert_eq!(store.exists("/q"), None);
        assert!(store.ephemerals(s).is_empty());
        assert_eq!(store.paths(), vec!["/", "/p"]);
        assert_eq!(store.exists("/").map(|r| r.cversion), Some(1));

        let ops = vec![
            Op::Check {
                path: "/p".into(),
                version: 7,
            },
            create_op("/q", CreateMode::Persistent),
        ];
        assert_eq!(store.multi(s, ops), Err((0, OpError::BadVersion)));
        assert_eq!(store.exists("/q"), None);

        // The rolled-back attempts consumed no watch; a successful multi
        // fires them, and each write gets its own zxid.
        let ops = vec![
            Op::Check {
                path: "/p".into(),
                version: 0,
            },
            create_op("/q", CreateMode::Ephemeral),
            Op::SetData {
                path: "/p".into(),
                data: b"new".to_vec(),
                version: Some(0),
            },
        ];
        let (results, events) = store.multi(s, ops).expect("multi");
        assert_eq!(results.len(), 3);
        assert_eq!(results[0], OpResult::Checked);
        let OpResult::Created(created) = &results[1] else {
            panic!("expected Created, got {:?}", results[1]);
        };
        let OpResult::Set(set) = &results[2] else {
            panic!("expected Set, got {:?}", results[2]);
        };
        assert_eq!(created.czxid, before_zxid + 1);
        assert_eq!((set.mzxid, set.version), (before_zxid + 2, 1));
        assert_eq!(store.zxid(), before_zxid + 2);
        assert_eq!(store.ephemerals(s), vec!["/q"]);
        assert_eq!(
            events,
            vec![
                ev(w, "/q", WatchEventKind::NodeCreated),
                ev(w, "/p", WatchEventKind::NodeDataChanged),
            ]
        );
    }

    #[test]
    fn multi_rolls_back_deletes_and_ephemeral_ownership() {
        let (mut store, s, _) = store_with_session();
        store.create_parents(s, "/g/x").expect("parents");
        create(&mut store, s, "/g/e", b"d", CreateMode::Ephemeral);
        let before: Vec<_> = store.paths().iter().map(|p| store.get(p)).collect();
        let ops = vec![
            Op::Delete {
                path: "/g/e".into(),
                version: Some(0),
            },
            create_op("/g/e", CreateMode::Persistent),
            create_op("/g/e", CreateMode::Persistent),
        ];
        assert_eq!(store.multi(s, ops), Err((2, OpError::NodeExists)));
        let after: Vec<_> = store.paths().iter().map(|p| store.get(p)).collect();
        assert_eq!(after, before);
        assert_eq!(store.ephemerals(s), vec!["/g/e"]);
        // Still owned: expiry must remove it.
        store.expire_session(s);
        assert_eq!(store.paths(), vec!["/", "/g"]);
    }

    #[test]
    fn multi_sees_its_own_earlier_ops() {
        let (mut store, s, _) = store_with_session();
        let ops = vec![
            create_op("/a", CreateMode::Persistent),
            create_op("/a/b", CreateMode::Persistent),
        ];
        store.multi(s, ops).expect("multi");
        assert_eq!(store.paths(), vec!["/", "/a", "/a/b"]);
        assert_eq!(store.multi(s, vec![]), Ok((vec![], vec![])));
    }

    #[test]
    fn expire_due_honours_touch() {
        let (mut store, s, t0) = store_with_session();
        let idle = store.open_session(t0, TIMEOUT);
        assert_eq!(store.session_deadline(s), Some(t0 + TIMEOUT));
        assert_eq!(store.next_deadline(), Some(t0 + TIMEOUT));
        store.touch(s, t0 + Duration::from_secs(6)).expect("touch");
        assert_eq!(
            store.session_deadline(s),
            Some(t0 + Duration::from_secs(16))
        );
        // A ping delivered late must not pull the deadline back.
        store
            .touch(s, t0 + Duration::from_secs(1))
            .expect("late touch");
        assert_eq!(
            store.session_deadline(s),
            Some(t0 + Duration::from_secs(16))
        );

        assert!(store.expire_due(t0 + Duration::from_secs(9)).is_empty());
        assert!(store.session_alive(idle));
        store.expire_due(t0 + TIMEOUT);
        assert!(!store.session_alive(idle), "deadline <= now expires");
        assert!(store.session_alive(s));
        assert_eq!(store.next_deadline(), Some(t0 + Duration::from_secs(16)));
        assert_eq!(
            store.touch(idle, t0 + TIMEOUT),
            Err(OpError::SessionExpired)
        );

        store.expire_due(t0 + Duration::from_secs(16));
        assert!(!store.session_alive(s));
        assert_eq!(store.next_deadline(), None);
    }

    #[test]
    fn touch_past_deadline_cannot_revive() {
        let (mut store, s, t0) = store_with_session();
        assert_eq!(store.touch(s, t0 + TIMEOUT), Err(OpError::SessionExpired));
        assert_eq!(store.session_deadline(s), Some(t0 + TIMEOUT));
        assert_eq!(store.expire_due(t0 + TIMEOUT), vec![]);
        assert!(!store.session_alive(s));
    }

    #[test]
    fn expire_due_orders_by_deadline_and_fires_watches() {
        let t0 = Instant::now();
        let mut store = Store::new();
        let late = store.open_session(t0, Duration::from_secs(5));
        let early = store.open_session(t0, Duration::from_secs(3));
        let watcher = store.open_session(t0, Duration::from_secs(60));
        for (s, p) in [(late, "/late"), (early, "/early")] {
            create(&mut store, s, p, b"", CreateMode::Ephemeral);
            store.exists_watch(watcher, p).expect("watch");
        }
        let events = store.expire_due(t0 + Duration::from_secs(5));
        assert_eq!(
            events,
            vec![
                ev(watcher, "/early", WatchEventKind::NodeDeleted),
                ev(watcher, "/late", WatchEventKind::NodeDeleted),
            ]
        );
        assert_eq!(store.sessions(), vec![watcher]);
    }

    #[test]
    fn dead_session_cannot_write_and_its_watches_never_fire() {
        let (mut store, dead, live) = store_with_two_sessions();
        create(&mut store, live, "/n", b"", CreateMode::Persistent);
        store.get_watch(dead, "/n").expect("watch");
        store.children_watch(dead, "/n").expect("watch");
        store.exists_watch(dead, "/m").expect("watch");
        store.close_session(dead);
        let zxid = store.zxid();
        let paths = store.paths();

        let expired = Some(OpError::SessionExpired);
        assert_eq!(
            store
                .create(dead, "/x", vec![], CreateMode::Persistent)
                .err(),
            expired
        );
        assert_eq!(store.create_parents(dead, "/x/y/z").err(), expired);
        assert_eq!(store.delete(dead, "/n", None).err(), expired);
        assert_eq!(store.set_data(dead, "/n", vec![1], None).err(), expired);
        assert_eq!(store.get_watch(dead, "/n").err(), expired);
        assert_eq!(store.exists_watch(dead, "/n").err(), expired);
        assert_eq!(store.children_watch(dead, "/n").err(), expired);
        let ops = vec![Op::Delete {
            path: "/n".into(),
            version: None,
        }];
        assert_eq!(store.multi(dead, ops), Err((0, OpError::SessionExpired)));
        // A session that never existed is just as dead.
        assert_eq!(store.delete(SessionId(99), "/n", None).err(), expired);
        assert_eq!(store.zxid(), zxid);
        assert_eq!(store.paths(), paths);

        let (_, events) = store.set_data(live, "/n", vec![1], None).expect("set");
        assert!(events.is_empty());
        create(&mut store, live, "/n/c", b"", CreateMode::Persistent);
        let events = create(&mut store, live, "/m", b"", CreateMode::Persistent);
        assert!(events.is_empty());
        // Reads need no session.
        assert!(store.get("/n").is_ok());
    }

    #[test]
    fn session_ids_are_never_reused() {
        let t0 = Instant::now();
        let mut store = Store::new();
        let a = store.open_session(t0, TIMEOUT);
        store.close_session(a);
        let b = store.open_session(t0, TIMEOUT);
        assert_eq!((a, b), (SessionId(1), SessionId(2)));
        assert!(!store.session_alive(a));
        // Sessions that own no node leave the tree's history untouched.
        assert_eq!(store.zxid(), 0);
    }

    #[test]
    fn huge_timeout_does_not_overflow() {
        let t0 = Instant::now();
        let mut store = Store::new();
        let s = store.open_session(t0, Duration::MAX);
        assert!(store.session_deadline(s).is_some_and(|d| d > t0));
        store.touch(s, t0 + TIMEOUT).expect("touch");
        assert!(store.expire_due(t0 + TIMEOUT).is_empty());
    }

    #[test]
    fn create_parents_is_idempotent() {
        let (mut store, s, w) = store_with_two_sessions();
        store.children_watch(w, "/").expect("watch");
        let events = store.create_parents(s, "/a/b/c").expect("first");
        assert_eq!(
            events,
            vec![ev(w, "/", WatchEventKind::NodeChildrenChanged)]
        );
        assert_eq!(store.paths(), vec!["/", "/a", "/a/b"]);
        let zxid = store.zxid();
        assert_eq!(zxid, 2);
        assert_eq!(store.create_parents(s, "/a/b/c"), Ok(vec![]));
        assert_eq!(store.create_parents(s, "/a/b/d/e"), Ok(vec![]));
        assert_eq!(store.paths(), vec!["/", "/a", "/a/b", "/a/b/d"]);
        assert_eq!(store.zxid(), zxid + 1);
        let a = store.exists("/a").expect("/a");
        assert_eq!((a.ephemeral_owner, a.num_children, a.czxid), (None, 1, 1));
        assert_eq!(store.create_parents(s, "/"), Ok(vec![]));
        assert_eq!(store.create_parents(s, "/a/"), Err(OpError::BadPath));
    }
}
