//! Groups in ZooKeeper seen from outside, for the `tenure` command: the
//! znodes of Kafka 0.8's layout read, offsets written and deleted, and a
//! group's persistent znodes deleted, with a session of the tool's own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures_util::StreamExt;
use tenure_admin::{
    AdminError, GroupAdmin, GroupDeletion, GroupRecords, StoreChange, StoreChanges, WriteGuard,
};
use tenure_core::records::{encode_offset, Layout};
use tenure_core::{FencingToken, Offset, TopicPartition};
use zookeeper_client as zk;

use crate::session::TLS_PROBE_TIMEOUT;
use crate::ZooKeeperSecurity;

/// The most deletes sent in one multi-op: well within the server's 1 MB
/// request bound (`jute.maxbuffer`) for any path ZooKeeper allows.
const MAX_MULTI_OPS: usize = 1_000;

/// How often a deletion starts over when the group changed under it (a
/// node created or deleted between the look and the multi-op).
const DELETE_ATTEMPTS: usize = 5;

/// One znode of a group, as [`ZooKeeperAdmin::group_tree`] finds it.
struct Node {
    path: String,
    /// Held by a session: an ephemeral node.
    ephemeral: bool,
    /// Its depth below the group's node (the group's own is 0).
    depth: usize,
}

/// How a multi-op of deletes ended.
enum Deleted {
    /// Every node went.
    All,
    /// The node at this index of the batch was missing (deleted meanwhile).
    Missing(usize),
    /// The node at this index of the batch had children (created
    /// meanwhile).
    NotEmpty(usize),
}

/// The stream of [`GroupAdmin::watch`]: a persistent recursive watch, read
/// until its session ends (after which the client may not be read again).
struct Watching {
    watcher: Option<zk::PersistentWatcher>,
    /// The groups' root with a trailing slash: what a group's path starts
    /// with.
    prefix: String,
    store: String,
}

impl Watching {
    async fn next(mut self) -> Option<(Result<StoreChange, AdminError>, Watching)> {
        let watcher = self.watcher.as_mut()?;
        loop {
            let event = watcher.changed().await;
            if event.event_type == zk::EventType::Session {
                match event.session_state {
                    zk::SessionState::Disconnected => {
                        return Some((Ok(StoreChange::Disconnected), self));
                    }
                    // Events of the time away may be lost (ZOOKEEPER-4698).
                    zk::SessionState::SyncConnected => {
                        return Some((Ok(StoreChange::Resync), self));
                    }
                    state if state.is_terminated() => {
                        self.watcher = None;
                        let error = AdminError::Unreachable {
                            store: self.store.clone(),
                            detail: format!("the watching session ended: {state}"),
                        };
                        return Some((Err(error), self));
                    }
                    _ => continue,
                }
            }
            // The root's own changes name no group.
            let Some(rest) = event.path.strip_prefix(&self.prefix) else {
                continue;
            };
            let group = rest.split('/').next().unwrap_or_default();
            if group.is_empty() {
                continue;
            }
            let change = StoreChange::Group(group.to_owned());
            return Some((Ok(change), self));
        }
    }
}

/// Reads and writes the records of the groups in one ZooKeeper ensemble (a
/// [`GroupAdmin`]).
#[derive(Debug)]
pub struct ZooKeeperAdmin {
    client: zk::Client,
    connect_string: String,
    /// Who the session authenticated as: records this admin creates get
    /// the ACL members with these credentials give theirs.
    security: ZooKeeperSecurity,
}

impl ZooKeeperAdmin {
    /// Opens a session with the ensemble at `connect_string`
    /// (`host:port[,host:port...][/chroot]`), waiting at most `timeout`.
    pub async fn connect(connect_string: &str, timeout: Duration) -> Result<Self, AdminError> {
        ZooKeeperAdmin::connect_with(connect_string, ZooKeeperSecurity::new(), timeout).await
    }

    /// Opens a session as [`ZooKeeperAdmin::connect`] does, with the
    /// credentials and TLS of `security` (the groups' members' digest, when
    /// their znodes are under a digest ACL: see [`ZooKeeperSecurity`]).
    pub async fn connect_with(
        connect_string: &str,
        security: ZooKeeperSecurity,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        let store = security.store(connect_string);
        if let Err(error) = security.check() {
            return Err(AdminError::BadAddress {
                store,
                detail: error.to_string(),
            });
        }
        let connector =
            zk::Client::connector().with_session_timeout(timeout.max(Duration::from_secs(4)));
        let connecting = security.connect(connector, connect_string);
        let detail = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(client)) => {
                let admin = ZooKeeperAdmin {
                    client,
                    connect_string: connect_string.to_owned(),
                    security,
                };
                return admin.checked(timeout).await;
            }
            Ok(Err(zk::Error::BadArguments(detail))) => {
                return Err(AdminError::BadAddress {
                    store,
                    detail: detail.to_string(),
                })
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no session within {timeout:?}"),
        };
        // Over TLS the client only times out; a handshake of our own says why.
        match security
            .tls_refusal(connect_string, TLS_PROBE_TIMEOUT)
            .await
        {
            Some(detail) => Err(AdminError::Denied { store, detail }),
            None => Err(AdminError::Unreachable { store, detail }),
        }
    }

    /// The admin, once its chroot is found to exist.
    async fn checked(self, timeout: Duration) -> Result<Self, AdminError> {
        let unreachable = |detail: String| AdminError::Unreachable {
            store: self.store(),
            detail,
        };
        match tokio::time::timeout(timeout, self.client.check_stat("/")).await {
            Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
            Ok(Err(error)) => Err(unreachable(error.to_string())),
            Ok(Ok(None)) => Err(AdminError::BadAddress {
                store: self.store(),
                detail: format!("the chroot {} does not exist", self.client.path()),
            }),
            Ok(Ok(Some(_))) => Ok(self),
        }
    }

    /// The layout of `group`, once its name is checked and, under
    /// `guard`, once no member of it is live.
    async fn guarded(&self, group: &str, guard: WriteGuard) -> Result<Layout, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let layout = Layout::new("", group);
        if guard == WriteGuard::NoLiveMembers {
            self.refuse_if_live(group, &layout).await?;
        }
        Ok(layout)
    }

    fn refused(&self, operation: String, error: zk::Error) -> AdminError {
        match error {
            zk::Error::ConnectionLoss | zk::Error::SessionExpired | zk::Error::ClientClosed => {
                AdminError::Unreachable {
                    store: self.store(),
                    detail: format!("{operation}: {error}"),
                }
            }
            zk::Error::NoAuth => AdminError::Denied {
                store: self.store(),
                detail: format!(
                    "{operation}: the group's znodes are under an ACL these credentials do not \
                     satisfy; use the digest credentials its members use (--zookeeper-digest)"
                ),
            },
            error => AdminError::Store {
                store: self.store(),
                operation,
                detail: error.to_string(),
            },
        }
    }

    /// Brings this session's server up to date with the ensemble's leader
    /// before a look at `path`: a follower answers reads from what it has
    /// applied, which can lag behind a write another client was already
    /// told is done, and a follower cut off from its leader answers from
    /// what it had until it notices. After the sync, reads on this session
    /// see every write committed before it; on a cut-off node the sync
    /// waits, and the look with it, instead of answering stale.
    async fn caught_up(&self, path: &str) -> Result<(), AdminError> {
        match self.client.sync(path).await {
            Ok(()) | Err(zk::Error::NoNode) => Ok(()),
            Err(error) => Err(self.refused(format!("syncing {path}"), error)),
        }
    }

    /// The children of `path`, sorted; none when it does not exist.
    async fn children(&self, path: &str) -> Result<Vec<String>, AdminError> {
        match self.client.list_children(path).await {
            Ok(mut children) => {
                children.sort();
                Ok(children)
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(error) => Err(self.refused(format!("listing {path}"), error)),
        }
    }

    /// The data and stat of every path, read in one pipeline (requests go
    /// out when their futures are made); a path that vanished meanwhile is
    /// left out.
    async fn read_all(
        &self,
        paths: Vec<String>,
    ) -> Result<Vec<(String, Vec<u8>, zk::Stat)>, AdminError> {
        let reads: Vec<_> = paths.iter().map(|p| self.client.get_data(p)).collect();
        let mut found = Vec::with_capacity(paths.len());
        for (path, read) in paths.iter().zip(reads) {
            match read.await {
                Ok((data, stat)) => found.push((path.clone(), data, stat)),
                Err(zk::Error::NoNode) => {}
                Err(error) => return Err(self.refused(format!("reading {path}"), error)),
            }
        }
        Ok(found)
    }

    /// Every `<base>/<topic>/<partition>` znode with its partition; a
    /// partition that is not a number is reported as corrupt.
    async fn partition_nodes(
        &self,
        base: &str,
        records: &mut GroupRecords,
    ) -> Result<Vec<(TopicPartition, String)>, AdminError> {
        let mut nodes = Vec::new();
        for topic in self.children(base).await? {
            for child in self.children(&format!("{base}/{topic}")).await? {
                let path = format!("{base}/{topic}/{child}");
                match child.parse::<u32>() {
                    Ok(number) => nodes.push((TopicPartition::new(&topic, number), path)),
                    Err(_) => records.add_corrupt(&path, "the partition is not a number"),
                }
            }
        }
        Ok(nodes)
    }

    /// Refuses with [`AdminError::GroupActive`] if a member of the group
    /// whose layout is `layout` is registered now.
    async fn refuse_if_live(&self, group: &str, layout: &Layout) -> Result<(), AdminError> {
        // A multi-op can check a node's data version but not whether it has
        // children: a look just before the write is all there is, after a
        // sync so that it sees a registration made through another node.
        let ids = layout.ids();
        self.caught_up(&ids).await?;
        let live = self.children(&ids).await?;
        if live.is_empty() {
            Ok(())
        } else {
            Err(AdminError::GroupActive {
                group: group.to_owned(),
                members: live,
            })
        }
    }

    /// Deletes `paths` (children before their parents) in one multi-op.
    async fn delete_batch(&self, paths: &[String]) -> Result<Deleted, AdminError> {
        let mut writer = self.client.new_multi_writer();
        for path in paths {
            if let Err(error) = writer.add_delete(path, None) {
                return Err(self.refused(format!("deleting {path}"), error));
            }
        }
        match writer.commit().await {
            Ok(_) => Ok(Deleted::All),
            Err(zk::MultiWriteError::OperationFailed {
                index,
                source: zk::Error::NoNode,
            }) => Ok(Deleted::Missing(index)),
            Err(zk::MultiWriteError::OperationFailed {
                index,
                source: zk::Error::NotEmpty,
            }) => Ok(Deleted::NotEmpty(index)),
            Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                let path = paths.get(index).map_or("a node", String::as_str);
                Err(self.refused(format!("deleting {path}"), source))
            }
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                Err(self.refused("deleting records".to_owned(), source))
            }
        }
    }

    /// Every znode under the group's node and the node itself, read level
    /// by level (the reads of one level go out together); none if the
    /// group's node does not exist.
    async fn group_tree(&self, layout: &Layout) -> Result<Vec<Node>, AdminError> {
        let mut nodes = Vec::new();
        let mut level = vec![layout.group().to_owned()];
        let mut depth = 0;
        while !level.is_empty() {
            let mut next = Vec::new();
            for (path, _, stat) in self.read_all(level).await? {
                if stat.num_children > 0 {
                    for child in self.children(&path).await? {
                        next.push(format!("{path}/{child}"));
                    }
                }
                nodes.push(Node {
                    path,
                    ephemeral: stat.ephemeral_owner != 0,
                    depth,
                });
            }
            level = next;
            depth += 1;
        }
        Ok(nodes)
    }

    /// One attempt at [`GroupAdmin::delete_group`]: `None` when the group
    /// changed under it and it should start over.
    async fn try_delete_group(
        &self,
        group: &str,
        layout: &Layout,
        guard: WriteGuard,
    ) -> Result<Option<GroupDeletion>, AdminError> {
        if guard == WriteGuard::NoLiveMembers {
            self.refuse_if_live(group, layout).await?;
        }
        let nodes = self.group_tree(layout).await?;
        if nodes.is_empty() {
            return Err(AdminError::UnknownGroup {
                group: group.to_owned(),
                store: self.store(),
            });
        }
        // A node is kept if a session holds it or anything under it; the
        // rest goes, deepest first.
        let held: Vec<&str> = nodes
            .iter()
            .filter(|n| n.ephemeral)
            .map(|n| n.path.as_str())
            .collect();
        let under = |node: &Node, held: &str| {
            held == node.path
                || held
                    .strip_prefix(node.path.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        };
        let (kept, mut doomed): (Vec<&Node>, Vec<&Node>) = nodes
            .iter()
            .partition(|node| held.iter().any(|h| under(node, h)));
        let ids = layout.ids();
        // Deepest first, so children go before their parents; but the member
        // list first of all: it has no children unless a member registered
        // since the look, and then the multi-op that deletes it fails.
        doomed.sort_by_key(|n| (n.path != ids, std::cmp::Reverse(n.depth)));
        let mut batches: Vec<Vec<String>> = Vec::new();
        if doomed.len() <= MAX_MULTI_OPS {
            batches.push(doomed.iter().map(|n| n.path.clone()).collect());
        } else {
            // Too many for one multi-op: the partitions' and topics' nodes
            // in batches, then the member list with the group's own nodes.
            let (last, leaves): (Vec<&Node>, Vec<&Node>) =
                doomed.into_iter().partition(|n| n.depth <= 1);
            let leaves: Vec<String> = leaves.into_iter().map(|n| n.path.clone()).collect();
            batches.extend(leaves.chunks(MAX_MULTI_OPS).map(<[String]>::to_vec));
            batches.push(last.into_iter().map(|n| n.path.clone()).collect());
        }
        let removed = batches.iter().map(Vec::len).sum();
        let count = batches.len();
        for (number, batch) in batches.into_iter().enumerate() {
            if batch.is_empty() {
                continue;
            }
            if number > 0 && guard == WriteGuard::NoLiveMembers {
                self.refuse_if_live(group, layout).await?;
            }
            match self.delete_batch(&batch).await? {
                Deleted::All => {}
                Deleted::NotEmpty(index) if batch.get(index) == Some(&ids) => {
                    if guard == WriteGuard::NoLiveMembers {
                        self.refuse_if_live(group, layout).await?;
                    }
                    return Ok(None);
                }
                Deleted::Missing(_) | Deleted::NotEmpty(_) => return Ok(None),
            }
            tracing::debug!(
                group,
                batch = number + 1,
                of = count,
                "deleted a batch of records"
            );
        }
        Ok(Some(GroupDeletion {
            removed,
            kept: kept.into_iter().map(|n| n.path.clone()).collect(),
        }))
    }
}

#[async_trait]
impl GroupAdmin for ZooKeeperAdmin {
    fn store(&self) -> String {
        self.security.store(&self.connect_string)
    }

    async fn groups(&self) -> Result<Vec<String>, AdminError> {
        let root = Layout::groups("");
        self.caught_up(&root).await?;
        self.children(&root).await
    }

    async fn watch(&self) -> Result<StoreChanges, AdminError> {
        // One persistent recursive watch on the groups' root (ZooKeeper
        // 3.6+): every create, delete and data change under it, with its
        // path, and nothing read while nothing changes.
        let root = Layout::groups("");
        let watcher = self
            .client
            .watch(&root, zk::AddWatchMode::PersistentRecursive)
            .await
            .map_err(|error| self.refused(format!("watching {root}"), error))?;
        let watching = Watching {
            watcher: Some(watcher),
            prefix: format!("{root}/"),
            store: self.store(),
        };
        Ok(futures_util::stream::unfold(watching, Watching::next).boxed())
    }

    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let layout = Layout::new("", group);
        let base = layout.group();
        self.caught_up(base).await?;
        match self.client.check_stat(base).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(AdminError::UnknownGroup {
                    group: group.to_owned(),
                    store: self.store(),
                })
            }
            Err(error) => return Err(self.refused(format!("reading {base}"), error)),
        }
        let mut records = GroupRecords::default();

        let ids = layout.ids();
        let paths = self
            .children(&ids)
            .await?
            .into_iter()
            .map(|child| format!("{ids}/{child}"))
            .collect();
        for (path, data, stat) in self.read_all(paths).await? {
            let id = path.rsplit('/').next().unwrap_or_default();
            // The server's clock when the registration was made.
            let created = u64::try_from(stat.ctime)
                .ok()
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
            records.add_member(&path, id, &data, created);
        }

        let owners = self.partition_nodes(&layout.owners(), &mut records).await?;
        let (partitions, paths): (Vec<_>, Vec<_>) = owners.into_iter().unzip();
        let read = self.read_all(paths).await?;
        for (partition, (path, data, stat)) in partitions.into_iter().zip(read) {
            records.add_owner(partition, &path, data, FencingToken(stat.czxid as u64));
        }

        let offsets = self
            .partition_nodes(&layout.offsets(), &mut records)
            .await?;
        let (partitions, paths): (Vec<_>, Vec<_>) = offsets.into_iter().unzip();
        let read = self.read_all(paths).await?;
        for (partition, (path, data, _)) in partitions.into_iter().zip(read) {
            records.add_offset(partition, &path, &data);
        }
        Ok(records)
    }

    async fn write_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        let layout = self.guarded(group, guard).await?;
        // `<chroot>/consumers` is every group's: open, as members make it.
        let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match self.client.mkdir(&Layout::groups(""), &open).await {
            Ok(()) | Err(zk::Error::NodeExists) => {}
            Err(error) => return Err(self.refused("creating the groups' node".to_owned(), error)),
        }
        let options = zk::CreateMode::Persistent.with_acls(self.security.acls());
        for (partition, offset) in offsets {
            // The progress record goes first: it speaks of the offset
            // before, and the offset moved.
            let progress = layout.progress(partition);
            match self.client.delete(&progress, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(error) => return Err(self.refused(format!("deleting {progress}"), error)),
            }
            let path = layout.offset(partition);
            let data = encode_offset(*offset);
            match self.client.set_data(&path, &data, None).await {
                Ok(_) => continue,
                Err(zk::Error::NoNode) => {}
                Err(error) => return Err(self.refused(format!("writing {path}"), error)),
            }
            if let Some((parent, _)) = path.rsplit_once('/') {
                match self.client.mkdir(parent, &options).await {
                    Ok(()) | Err(zk::Error::NodeExists) => {}
                    Err(error) => return Err(self.refused(format!("creating {parent}"), error)),
                }
            }
            match self.client.create(&path, &data, &options).await {
                Ok(_) => {}
                // Created by someone else meanwhile: ours is the value to keep.
                Err(zk::Error::NodeExists) => {
                    if let Err(error) = self.client.set_data(&path, &data, None).await {
                        return Err(self.refused(format!("writing {path}"), error));
                    }
                }
                Err(error) => return Err(self.refused(format!("creating {path}"), error)),
            }
        }
        Ok(())
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: &BTreeSet<TopicPartition>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        let layout = self.guarded(group, guard).await?;
        // A partition's progress record goes with its offset.
        let paths: Vec<String> = partitions
            .iter()
            .flat_map(|p| [layout.offset(p), layout.progress(p)])
            .collect();
        // All at once where it fits, so a reader sees old or new offsets;
        // one already gone is no longer asked for.
        for chunk in paths.chunks(MAX_MULTI_OPS) {
            let mut batch = chunk.to_vec();
            while !batch.is_empty() {
                match self.delete_batch(&batch).await? {
                    Deleted::All => break,
                    Deleted::Missing(index) if index < batch.len() => {
                        batch.remove(index);
                    }
                    Deleted::Missing(_) | Deleted::NotEmpty(_) => {
                        return Err(AdminError::Store {
                            store: self.store(),
                            operation: "deleting offsets".to_owned(),
                            detail: "an offset node has children: not a group's record".to_owned(),
                        })
                    }
                }
            }
        }
        // A topic left with no offsets loses its node too (Kafka 0.8's tools
        // list topics by these nodes); one still in use stays.
        let parents: BTreeSet<&str> = paths
            .iter()
            .filter_map(|path| path.rsplit_once('/').map(|(parent, _)| parent))
            .collect();
        for parent in parents {
            match self.client.delete(parent, None).await {
                Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::NotEmpty) => {}
                Err(error) => return Err(self.refused(format!("deleting {parent}"), error)),
            }
        }
        Ok(())
    }

    async fn delete_group(
        &self,
        group: &str,
        guard: WriteGuard,
    ) -> Result<GroupDeletion, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let layout = Layout::new("", group);
        for _ in 0..DELETE_ATTEMPTS {
            if let Some(deletion) = self.try_delete_group(group, &layout, guard).await? {
                return Ok(deletion);
            }
        }
        Err(AdminError::Store {
            store: self.store(),
            operation: format!("deleting group {group}"),
            detail: format!(
                "its records kept changing during {DELETE_ATTEMPTS} attempts: are members \
                 starting? Try again"
            ),
        })
    }
}
