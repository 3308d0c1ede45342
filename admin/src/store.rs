//! What a store answers and does for a group: the [`GroupAdmin`] trait the
//! backends implement, and the guard every write is made under.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use tenure_core::{Offset, TopicPartition};

use crate::error::AdminError;
use crate::records::GroupRecords;

/// Reads and writes the records of groups in one store, for operators'
/// tools. Reads are snapshots: a group may change while it is described.
#[async_trait]
pub trait GroupAdmin: Send + Sync {
    /// How the store is named in messages ("ZooKeeper at 127.0.0.1:2181").
    fn store(&self) -> String;

    /// The names of the groups with records in the store, sorted.
    async fn groups(&self) -> Result<Vec<String>, AdminError>;

    /// Watches every group's records: a stream that names a group whenever
    /// one of its records is created, changed or deleted (groups appearing
    /// and disappearing among them), through one watch on the store
    /// (ZooKeeper: a persistent recursive watch; etcd: a prefix watch), so
    /// that nothing is read while nothing changes. Changes come in the
    /// order the store made them, several changes of a group may come as
    /// one, and after a lost connection [`StoreChange::Resync`] says that
    /// some may have been missed. The stream fails or ends when the watch
    /// cannot go on (the admin's session expired): connect anew. A store
    /// whose client reconnects by itself (ZooKeeper) says
    /// [`StoreChange::Disconnected`] when the connection drops.
    async fn watch(&self) -> Result<StoreChanges, AdminError>;

    /// Every record of `group`. A group with no records at all is
    /// [`AdminError::UnknownGroup`]; records that cannot be read are listed
    /// in [`GroupRecords::corrupt`] and the rest is still returned.
    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError>;

    /// Writes committed offsets of `group` (creating the records that do not
    /// exist). With [`WriteGuard::NoLiveMembers`] the write is refused with
    /// [`AdminError::GroupActive`] if a member is registered: in the same
    /// transaction where the store can (etcd), by a look just before
    /// otherwise (ZooKeeper: a multi-op cannot check a node's children).
    async fn write_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError>;

    /// Deletes the committed offsets of `partitions` in `group`; a partition
    /// with none is skipped. The guard is checked as by
    /// [`GroupAdmin::write_offsets`].
    async fn delete_offsets(
        &self,
        group: &str,
        partitions: &BTreeSet<TopicPartition>,
        guard: WriteGuard,
    ) -> Result<(), AdminError>;

    /// Deletes the records of `group`: its committed offsets and every other
    /// record no live session holds. Records a live session holds (a
    /// member's registration, a partition's owner record: ZooKeeper's
    /// ephemeral nodes, etcd's leased keys) are kept and named in
    /// [`GroupDeletion::kept`]: deleting them would let another member claim
    /// a partition its owner still consumes. They go when their session
    /// ends. A group with no records at all is [`AdminError::UnknownGroup`].
    ///
    /// With [`WriteGuard::NoLiveMembers`] it is refused with
    /// [`AdminError::GroupActive`] if a member is registered: etcd checks in
    /// each transaction that deletes; ZooKeeper looks first, and deletes the
    /// member list in the same multi-op as the last records, which fails if
    /// a member registered meanwhile.
    async fn delete_group(
        &self,
        group: &str,
        guard: WriteGuard,
    ) -> Result<GroupDeletion, AdminError>;
}

/// The changes [`GroupAdmin::watch`] reports.
pub type StoreChanges = BoxStream<'static, Result<StoreChange, AdminError>>;

/// A change [`GroupAdmin::watch`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreChange {
    /// A record of this group was created, changed or deleted.
    Group(String),
    /// The connection to the store was lost; the client is reconnecting.
    /// What was read may be out of date until [`StoreChange::Resync`] (or
    /// the stream's failure, if the session ends meanwhile).
    Disconnected,
    /// The watch was re-established after the connection to the store was
    /// lost: changes may have been missed, read every group again.
    Resync,
}

/// What [`GroupAdmin::delete_group`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupDeletion {
    /// How many records (znodes, keys) it deleted.
    pub removed: usize,
    /// The records it kept because a live session holds them (and, on
    /// ZooKeeper, their parents), by path or key.
    pub kept: Vec<String>,
}

/// What must hold for a write of [`GroupAdmin`] (offsets written or
/// deleted, a group deleted) to happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteGuard {
    /// Nothing: write even under live members (their next commits may
    /// overwrite what is written).
    None,
    /// The group has no registered member.
    NoLiveMembers,
}

/// The guard a write gets: none when forced.
pub(crate) fn guard(force: bool) -> WriteGuard {
    if force {
        WriteGuard::None
    } else {
        WriteGuard::NoLiveMembers
    }
}

/// The records of `group`; none for a group without records when
/// `allow_new_group`.
pub(crate) async fn group_records(
    admin: &dyn GroupAdmin,
    group: &str,
    allow_new_group: bool,
) -> Result<GroupRecords, AdminError> {
    tenure_core::types::validate_path_element("group", group)?;
    match admin.records(group).await {
        Ok(records) => Ok(records),
        Err(AdminError::UnknownGroup { .. }) if allow_new_group => Ok(GroupRecords::default()),
        Err(error) => Err(error),
    }
}
