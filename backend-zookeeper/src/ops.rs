//! The store commands, carried out as ZooKeeper requests with the semantics
//! of the reference adapter (`tenure_core::model::adapter`).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tenure_core::records::{encode_offset, held_claim, parse_offset};
use tenure_core::{
    ClaimOutcome, ClientError, Committed, FencingToken, MemberInfo, Progress, RegisterOutcome,
    SessionId, StoreError, TopicPartition,
};
use tenure_tokio::store::{each_failed, MemberList, Registrations, StoreOps, Watch, Wire};
use zookeeper_client as zk;

use crate::group::{put_listed, take_listed, GroupClient, Listed};

/// One command's view of the store: the client of the session the command
/// was issued under, and the member's wire.
pub(crate) struct Ctx {
    pub(crate) group: Arc<GroupClient>,
    pub(crate) client: zk::Client,
    pub(crate) session: SessionId,
    pub(crate) wire: Wire,
}

/// Maps a client error to the core's terms.
///
/// When a connection breaks, the client fails the requests written to it
/// with the connection's own error: `ConnectionLoss`, but also I/O errors
/// and its idle timeout ("no response from connection in ...") as `Custom`.
/// All of those leave the request's outcome unknown.
fn store_error(error: zk::Error) -> StoreError {
    match error {
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::Custom(_) => {
            StoreError::ConnectionLoss
        }
        zk::Error::SessionExpired => StoreError::SessionExpired,
        zk::Error::NoNode => StoreError::NoNode,
        zk::Error::NoAuth => StoreError::Denied {
            detail: "ZooKeeper refused a request on the group's znodes: their ACL is not \
                     satisfied by this member's credentials (ZooKeeperBackend::digest)"
                .to_owned(),
        },
        other => StoreError::Other(ClientError::new(other)),
    }
}

/// Whether `result` is an answer from the server (rather than a failure of
/// the connection or of the client).
fn answered<T>(result: &Result<T, zk::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(e) => matches!(
            e,
            zk::Error::NoNode
                | zk::Error::NodeExists
                | zk::Error::BadVersion
                | zk::Error::NotEmpty
                | zk::Error::NoChildrenForEphemerals
                | zk::Error::NoAuth
                | zk::Error::InvalidAcl
                | zk::Error::RuntimeInconsistent
                | zk::Error::QuotaExceeded
                | zk::Error::Unimplemented
        ),
    }
}

fn multi_answered<T>(result: &Result<T, zk::MultiWriteError>) -> bool {
    match result {
        Ok(_) | Err(zk::MultiWriteError::OperationFailed { .. }) => true,
        Err(zk::MultiWriteError::RequestFailed { source }) => answered::<()>(&Err(source.clone())),
    }
}

fn token_of(stat: &zk::Stat) -> FencingToken {
    FencingToken(stat.czxid as u64)
}

fn owner_session(stat: &zk::Stat) -> Option<SessionId> {
    (stat.ephemeral_owner != 0).then_some(SessionId(stat.ephemeral_owner as u64))
}

fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

impl Ctx {
    /// Runs one read, once it has its turn on the wire. Its answer does
    /// not count as the store hearing from the session: a follower answers
    /// reads from what it has, even one that lost its leader and has not
    /// noticed yet (up to the ensemble's `syncLimit` ticks), while the
    /// leader, which expires sessions, hears nothing of it.
    async fn call<T, F>(&self, request: impl FnOnce() -> F) -> Result<T, zk::Error>
    where
        F: Future<Output = Result<T, zk::Error>>,
    {
        self.wire.send(request).await
    }

    /// Runs one write (or `sync`), once it has its turn. A write goes
    /// through the leader, so its answer proves the session alive there
    /// when it was sent.
    async fn call_leader<T, F>(&self, request: impl FnOnce() -> F) -> Result<T, zk::Error>
    where
        F: Future<Output = Result<T, zk::Error>>,
    {
        self.wire.send_to_leader(request, answered).await
    }

    /// Sends the writes of `writer` as one `multi`, once it has its turn.
    async fn multi(
        &self,
        mut writer: zk::MultiWriter<'_>,
    ) -> Result<Vec<zk::MultiWriteResult>, zk::MultiWriteError> {
        self.wire
            .send_to_leader(|| writer.commit(), multi_answered)
            .await
    }

    /// Sends `writer`, the `multi` of the writes of the requests `decided`
    /// left undecided (`None`), unless their reads decided them all: each
    /// of those succeeds with it or fails with its request; refused as a
    /// whole (a record changed since it was read), every request goes
    /// again on its own, by `one_by_one`.
    async fn write_undecided(
        &self,
        writer: zk::MultiWriter<'_>,
        decided: Vec<Option<Result<(), StoreError>>>,
        one_by_one: impl Future<Output = Vec<Result<(), StoreError>>>,
    ) -> Vec<Result<(), StoreError>> {
        if decided.iter().all(Option::is_some) {
            return decided.into_iter().flatten().collect();
        }
        match self.multi(writer).await {
            Ok(_) => decided.into_iter().map(|d| d.unwrap_or(Ok(()))).collect(),
            Err(zk::MultiWriteError::OperationFailed { .. }) => one_by_one.await,
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                let error = store_error(source);
                decided
                    .into_iter()
                    .map(|d| d.unwrap_or_else(|| Err(error.clone())))
                    .collect()
            }
        }
    }

    /// Creates the owner records of `partitions` (at `paths`) in one
    /// `multi`: each one's outcome, or `None` if the multi was refused as
    /// a whole and nothing was written.
    async fn create_owners(
        &self,
        partitions: &[TopicPartition],
        paths: &[String],
    ) -> Option<Vec<Result<ClaimOutcome, StoreError>>> {
        let data = self.group.member.id.as_str().as_bytes();
        let options = zk::CreateMode::Ephemeral.with_acls(self.group.config.security.acls());
        let mut writer = self.client.new_multi_writer();
        for path in paths {
            if writer.add_create(path, data, &options).is_err() {
                return Some(self.claim_each(partitions, false).await);
            }
        }
        match self.multi(writer).await {
            Ok(results) if results.len() == paths.len() => {
                let stats: Vec<Option<zk::Stat>> = results
                    .into_iter()
                    .map(|result| match result {
                        zk::MultiWriteResult::Create { stat, .. } if !stat.is_invalid() => {
                            Some(stat)
                        }
                        _ => None,
                    })
                    .collect();
                // Servers before 3.9 answer a multi's creates without
                // their stat (ZOOKEEPER-4026): the tokens are read back
                // from the records just made, in one multi-read.
                let unanswered: Vec<String> = paths
                    .iter()
                    .zip(&stats)
                    .filter(|(_, stat)| stat.is_none())
                    .map(|(path, _)| path.clone())
                    .collect();
                let read_back = if unanswered.is_empty() {
                    Vec::new()
                } else {
                    match read_all(self, &unanswered).await {
                        Err(zk::Error::Unimplemented) => read_each(self, &unanswered).await,
                        other => other,
                    }
                    .unwrap_or_default()
                };
                let mut read_back = read_back.into_iter();
                let mut outcomes = Vec::with_capacity(paths.len());
                for (stat, partition) in stats.into_iter().zip(partitions) {
                    let stat = match stat {
                        Some(stat) => Some(stat),
                        None => match read_back.next() {
                            Some(Ok((_, stat))) if owner_session(&stat) == Some(self.session) => {
                                Some(stat)
                            }
                            _ => None,
                        },
                    };
                    outcomes.push(match stat {
                        Some(stat) => Ok(ClaimOutcome::Created {
                            token: token_of(&stat),
                            committed: None,
                        }),
                        // Not read back as ours: claimed on its own, it
                        // gets the outcome a single claim would.
                        None => self.claim(partition, false).await,
                    });
                }
                Some(outcomes)
            }
            // One partition held (or a parent missing) refuses them all,
            // and nothing was written.
            Ok(_) | Err(zk::MultiWriteError::OperationFailed { .. }) => None,
            // Sent and not answered: the outcome of each is unknown, as a
            // single claim's would be.
            Err(zk::MultiWriteError::RequestFailed { source }) => {
                Some(each_failed(partitions.len(), store_error(source)))
            }
        }
    }

    /// The outcome of each of `partitions` (their owner records at
    /// `paths`) after a `multi` of their claims was refused as a whole,
    /// nothing written: who holds each record, read in one multi-read, as
    /// a single claim reads the owner it met; those with no record are
    /// claimed together again.
    async fn claim_refused(
        &self,
        partitions: &[TopicPartition],
        paths: &[String],
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        self.group.config.hooks.before_owner_read().await;
        let Ok(reads) = read_all(self, paths).await else {
            return self.claim_each(partitions, false).await;
        };
        let mut outcomes: Vec<Option<Result<ClaimOutcome, StoreError>>> = reads
            .into_iter()
            .zip(paths)
            .map(|(read, path)| match read {
                Ok((data, stat)) => Some(held_claim(
                    path,
                    &data,
                    owner_session(&stat),
                    token_of(&stat),
                )),
                Err(zk::Error::NoNode) => None,
                Err(error) => Some(Err(store_error(error))),
            })
            .collect();
        let (free, free_paths): (Vec<TopicPartition>, Vec<String>) = partitions
            .iter()
            .zip(paths)
            .zip(&outcomes)
            .filter(|(_, outcome)| outcome.is_none())
            .map(|((partition, path), _)| (partition.clone(), path.clone()))
            .unzip();
        // Claimed together again. Refused again with none of them held, a
        // parent is missing (a group's first claims): it is made, and they
        // go together once more; after that (taken in between), each goes
        // on its own.
        let claimed = match free.len() {
            0 | 1 => self.claim_each(&free, false).await,
            _ => match self.create_owners(&free, &free_paths).await {
                Some(claimed) => claimed,
                None => {
                    let mut parents: Vec<&str> =
                        free_paths.iter().filter_map(|p| parent(p)).collect();
                    parents.sort_unstable();
                    parents.dedup();
                    for parent in parents {
                        // A failure here fails the claims that need it.
                        let _ = self.make_dirs(parent).await;
                    }
                    match self.create_owners(&free, &free_paths).await {
                        Some(claimed) => claimed,
                        None => self.claim_each(&free, false).await,
                    }
                }
            },
        };
        let mut claimed = claimed.into_iter();
        for outcome in outcomes.iter_mut().filter(|o| o.is_none()) {
            *outcome = claimed.next();
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| {
                    Err(StoreError::Other(ClientError::message(
                        "a claim after a refused batch went unanswered",
                    )))
                })
            })
            .collect()
    }

    /// Creates the persistent ancestors of `path` (NodeExists is success):
    /// those above the group's node open (they are every group's), the
    /// group's own under its ACL.
    async fn create_parents(&self, path: &str) -> Result<(), zk::Error> {
        match parent(path) {
            Some(parent) => self.make_dirs(parent).await,
            None => Ok(()),
        }
    }

    /// Creates `dir` and its missing ancestors, as persistent nodes.
    async fn make_dirs(&self, dir: &str) -> Result<(), zk::Error> {
        // Without credentials every node is open: one request makes them all.
        let groups = self::parent(self.group.layout.group());
        if let (Some(groups), Some(_)) = (groups, self.group.config.security.digest_credentials()) {
            let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
            self.call_leader(|| self.client.mkdir(groups, &open))
                .await?;
        }
        let options = zk::CreateMode::Persistent.with_acls(self.group.config.security.acls());
        self.call_leader(|| self.client.mkdir(dir, &options)).await
    }

    /// Creates `path`, creating its parents first if they are missing.
    async fn create(
        &self,
        path: &str,
        data: &[u8],
        mode: zk::CreateMode,
    ) -> Result<zk::Stat, zk::Error> {
        let options = mode.with_acls(self.group.config.security.acls());
        match self
            .call_leader(|| self.client.create(path, data, &options))
            .await
        {
            Err(zk::Error::NoNode) => {}
            other => return other.map(|(stat, _)| stat),
        }
        self.create_parents(path).await?;
        self.call_leader(|| self.client.create(path, data, &options))
            .await
            .map(|(stat, _)| stat)
    }
}

/// How a commit writes one of its nodes: its data set at the version
/// read, the node created (none was there), deleted at the version read
/// (a progress record with nothing left to say), or left alone (none
/// there, none to write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Write {
    Set(i32),
    Create,
    Delete(i32),
    Nothing,
}

/// The nodes of a partition's commit, and how they are written as read.
struct CommitNodes {
    offset_path: String,
    offset: Write,
    progress_path: String,
    progress: Write,
}

impl CommitNodes {
    /// How a commit of `commit` writes the offset node and the progress
    /// record of `partition`, from the reads of those nodes.
    fn read(
        layout: &tenure_core::records::Layout,
        partition: &TopicPartition,
        commit: &Committed,
        offset: Read,
        progress: Read,
    ) -> Result<CommitNodes, zk::Error> {
        let offset = match offset {
            Ok((_, stat)) => Write::Set(stat.version),
            Err(zk::Error::NoNode) => Write::Create,
            Err(error) => return Err(error),
        };
        let progress = match (progress, commit.progress.is_empty()) {
            (Ok((_, stat)), false) => Write::Set(stat.version),
            (Err(zk::Error::NoNode), false) => Write::Create,
            // A progress record of an earlier commit must not outlive it.
            (Ok((_, stat)), true) => Write::Delete(stat.version),
            (Err(zk::Error::NoNode), true) => Write::Nothing,
            (Err(error), _) => return Err(error),
        };
        Ok(CommitNodes {
            offset_path: layout.offset(partition),
            offset,
            progress_path: layout.progress(partition),
            progress,
        })
    }

    /// The nodes a commit creates, whose parents must exist.
    fn created(&self) -> impl Iterator<Item = &str> {
        [
            (self.offset == Write::Create).then_some(self.offset_path.as_str()),
            (self.progress == Write::Create).then_some(self.progress_path.as_str()),
        ]
        .into_iter()
        .flatten()
    }
}

impl Ctx {
    /// Adds to `writer` the writes of `commit`: the offset, and its
    /// progress record, as `nodes` says.
    fn add_commit(
        &self,
        writer: &mut zk::MultiWriter<'_>,
        nodes: &CommitNodes,
        commit: &Committed,
    ) -> Result<(), zk::Error> {
        let options = zk::CreateMode::Persistent.with_acls(self.group.config.security.acls());
        let offset = encode_offset(commit.offset);
        let progress = (!commit.progress.is_empty()).then(|| commit.progress.encode(commit.offset));
        let writes = [
            (&nodes.offset_path, nodes.offset, Some(offset)),
            (&nodes.progress_path, nodes.progress, progress),
        ];
        for (path, write, data) in writes {
            let data = data.unwrap_or_default();
            match write {
                Write::Set(version) => writer.add_set_data(path, &data, Some(version))?,
                Write::Create => writer.add_create(path, &data, &options)?,
                Write::Delete(version) => writer.add_delete(path, Some(version))?,
                Write::Nothing => {}
            }
        }
        Ok(())
    }

    /// The owner record at `owner_path`, the offset node and the progress
    /// record of `partition`, read in one multi-read (one by one on a
    /// server before 3.6).
    async fn read_commit_nodes(
        &self,
        owner_path: &str,
        partition: &TopicPartition,
    ) -> Result<[Read; 3], StoreError> {
        let paths: Vec<String> = std::iter::once(owner_path.to_owned())
            .chain(commit_paths(&self.group.layout, [partition]))
            .collect();
        let reads = read_nodes(self, &paths).await.map_err(store_error)?;
        reads.try_into().map_err(|_| {
            StoreError::Other(ClientError::message(
                "a read of an owner record, an offset and its progress answered otherwise",
            ))
        })
    }

    /// Creates the missing parents of the nodes `nodes` creates.
    async fn create_commit_parents(&self, nodes: &CommitNodes) -> Result<(), zk::Error> {
        for path in nodes.created() {
            self.create_parents(path).await?;
        }
        Ok(())
    }

    /// Adds to `writer` a release that carries a commit: the owner record
    /// at `owner_path` checked at the version of `owner` (as read), the
    /// commit written as `nodes` says, and the owner record deleted, in
    /// this order; the check comes first so that a refusal at index 0
    /// says the record changed since it was read.
    fn add_release_committing(
        &self,
        writer: &mut zk::MultiWriter<'_>,
        owner_path: &str,
        owner: &zk::Stat,
        nodes: &CommitNodes,
        commit: &Committed,
    ) -> Result<(), zk::Error> {
        writer.add_check_version(owner_path, owner.version)?;
        self.add_commit(writer, nodes, commit)?;
        writer.add_delete(owner_path, Some(owner.version))
    }
}

/// Reads every path's data in multi-reads, or one by one on a server
/// before multi-reads (3.6).
async fn read_nodes(ctx: &Ctx, paths: &[String]) -> Result<Vec<Read>, zk::Error> {
    match read_all(ctx, paths).await {
        Err(zk::Error::Unimplemented) => read_each(ctx, paths).await,
        other => other,
    }
}

/// The stat of an owner record `read` found, if it is the claim of
/// `session` (with `token`, when given); otherwise why a release carrying
/// a commit writes nothing: gone ([`StoreError::NoNode`]) or another's
/// ([`StoreError::NotOwner`]).
fn owned(
    read: Read,
    session: SessionId,
    token: Option<FencingToken>,
) -> Result<zk::Stat, StoreError> {
    match read {
        Ok((_, stat))
            if owner_session(&stat) == Some(session)
                && token.is_none_or(|t| t == token_of(&stat)) =>
        {
            Ok(stat)
        }
        Ok(_) => Err(StoreError::NotOwner),
        Err(error) => Err(store_error(error)),
    }
}

/// The committed offset of `partition` and its progress, from the reads
/// of its offset node and its progress record: none if there is no offset
/// node; a progress record written with another offset counts for nothing.
fn committed_from(
    layout: &tenure_core::records::Layout,
    partition: &TopicPartition,
    offset: Read,
    progress: Read,
) -> Result<Option<Committed>, StoreError> {
    let offset = match offset {
        Ok((data, _)) => parse_offset(&layout.offset(partition), &data)?,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(e) => return Err(store_error(e)),
    };
    let progress = match progress {
        Ok((data, _)) => {
            Progress::decode(&layout.progress(partition), &data, offset)?.unwrap_or_default()
        }
        Err(zk::Error::NoNode) => Progress::new(),
        Err(e) => return Err(store_error(e)),
    };
    Ok(Some(Committed { offset, progress }))
}

/// The two reads of each partition's commit nodes (offset, progress
/// record), from reads of [`commit_paths`].
fn pairs(reads: Vec<Read>) -> impl Iterator<Item = (Read, Read)> {
    let mut reads = reads.into_iter();
    std::iter::from_fn(move || Some((reads.next()?, reads.next()?)))
}

/// The paths of each partition's offset node and progress record, in
/// turn.
fn commit_paths<'a>(
    layout: &'a tenure_core::records::Layout,
    partitions: impl IntoIterator<Item = &'a TopicPartition> + 'a,
) -> impl Iterator<Item = String> + 'a {
    partitions
        .into_iter()
        .flat_map(move |p| [layout.offset(p), layout.progress(p)])
}

/// Turns a one-shot watcher into a watch that fires on a change of the
/// node, not on a change of the session (which ends the watch).
fn fires_on_change(watcher: zk::OneshotWatcher) -> Watch {
    Box::pin(async move { watcher.changed().await.event_type != zk::EventType::Session })
}

#[async_trait]
impl StoreOps for Ctx {
    async fn register(&self, info: &MemberInfo) -> Result<RegisterOutcome, StoreError> {
        let path = self.group.layout.member(&info.id);
        let data = tenure_tokio::registration_record(info);
        match self.create(&path, &data, zk::CreateMode::Ephemeral).await {
            Ok(_) => Ok(RegisterOutcome::Registered),
            Err(zk::Error::NodeExists) => {
                let (_, stat) = self
                    .call(|| self.client.get_data(&path))
                    .await
                    .map_err(store_error)?;
                match owner_session(&stat) {
                    Some(session) => Ok(RegisterOutcome::Exists { session }),
                    None => Err(StoreError::Corrupt {
                        path,
                        detail: "member registration is not ephemeral".to_owned(),
                        source: None,
                    }),
                }
            }
            Err(e) => Err(store_error(e)),
        }
    }

    async fn deregister(&self) -> Result<(), StoreError> {
        let path = self.group.layout.member(&self.group.member.id);
        delete_if_ours(self, &path, None, false).await
    }

    async fn heartbeat(&self) -> Result<(), StoreError> {
        // A `sync` goes through the leader, so its answer proves the
        // session alive there (a read alone could be answered by a follower
        // cut off from its leader). The server then answers the check from
        // a state at least as new as the sync: the registration is there
        // unless the session ended.
        let path = self.group.layout.member(&self.group.member.id);
        self.call_leader(|| self.client.sync(&path))
            .await
            .map_err(store_error)?;
        self.call(|| self.client.check_stat(&path))
            .await
            .map(|_| ())
            .map_err(store_error)
    }

    async fn watch_members(&self) -> Result<(MemberList, Watch), StoreError> {
        let (members, watcher) = read_members(self).await?;
        Ok((members, fires_on_change(watcher)))
    }

    /// The create alone, even when the offset is asked for: ZooKeeper has
    /// no request that writes and reads, so the read would be a request of
    /// its own behind the create, wasted when the partition is held. The
    /// member reads it after the claim instead (`committed: None`), in one
    /// multi-read with the other reads of its step. Measured over a rolling
    /// restart of 100 members on 10,000 partitions, a read sent behind
    /// every single claim's create cost 4.22 requests per moved partition
    /// where the member's reads cost 3.87, and one behind every batch's
    /// `multi` 3.98 (a member that gains partitions others still hold sends
    /// a batch that is refused, and its read with it).
    async fn claim(
        &self,
        partition: &TopicPartition,
        _read_offset: bool,
    ) -> Result<ClaimOutcome, StoreError> {
        let path = self.group.layout.owner(partition);
        let data = self.group.member.id.as_str().as_bytes();
        match self.create(&path, data, zk::CreateMode::Ephemeral).await {
            Ok(stat) => Ok(ClaimOutcome::Created {
                token: token_of(&stat),
                committed: None,
            }),
            Err(zk::Error::NodeExists) => {
                self.group.config.hooks.before_owner_read().await;
                // NoNode here is the race where the owner released between our
                // create and this read: reported as such, the core claims again.
                let (data, stat) = self
                    .call(|| self.client.get_data(&path))
                    .await
                    .map_err(store_error)?;
                held_claim(&path, &data, owner_session(&stat), token_of(&stat))
            }
            Err(e) => Err(store_error(e)),
        }
    }

    /// One `multi` of the owner records' creates; refused as a whole
    /// (one partition held, a parent missing), who holds each is read in
    /// one multi-read, and the free ones are claimed together again. The
    /// offsets are left to the member, as a single claim's are.
    async fn claim_many(
        &self,
        partitions: &[TopicPartition],
        _read_offset: bool,
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        if partitions.len() < 2 {
            return self.claim_each(partitions, false).await;
        }
        let paths: Vec<String> = partitions
            .iter()
            .map(|p| self.group.layout.owner(p))
            .collect();
        match self.create_owners(partitions, &paths).await {
            Some(outcomes) => outcomes,
            None => self.claim_refused(partitions, &paths).await,
        }
    }

    async fn watch_owner(
        &self,
        partition: &TopicPartition,
    ) -> Result<(bool, Option<Watch>), StoreError> {
        let path = self.group.layout.owner(partition);
        // On an absent node this is an `exists` watch: it fires when the
        // node is created, which the core takes as "look again".
        let (stat, watcher) = self
            .call(|| self.client.check_and_watch_stat(&path))
            .await
            .map_err(store_error)?;
        Ok((stat.is_some(), Some(fires_on_change(watcher))))
    }

    /// Without a commit, the owner record read and deleted at the version
    /// read if it is ours. With one, the owner record, the offset and its
    /// progress record read in one multi-read, then one `multi` that
    /// checks the owner record is the one read, writes the commit and
    /// deletes the record: two requests where a commit (three) and a
    /// release (two) took five.
    async fn release(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        commit: Option<&Committed>,
    ) -> Result<(), StoreError> {
        let owner_path = self.group.layout.owner(partition);
        let Some(commit) = commit else {
            return delete_if_ours(self, &owner_path, token, true).await;
        };
        let layout = &self.group.layout;
        let [owner, offset, progress] = self.read_commit_nodes(&owner_path, partition).await?;
        let owner = owned(owner, self.session, token)?;
        let nodes =
            CommitNodes::read(layout, partition, commit, offset, progress).map_err(store_error)?;
        self.create_commit_parents(&nodes)
            .await
            .map_err(store_error)?;
        let mut writer = self.client.new_multi_writer();
        self.add_release_committing(&mut writer, &owner_path, &owner, &nodes, commit)
            .map_err(store_error)?;
        self.group.config.hooks.before_release().await;
        match self.multi(writer).await {
            Ok(_) => Ok(()),
            // The owner record changed since it was read (gone with the
            // session, say): nothing was written.
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: zk::Error::NoNode | zk::Error::BadVersion,
            }) => Err(StoreError::NotOwner),
            Err(zk::MultiWriteError::OperationFailed { source, .. })
            | Err(zk::MultiWriteError::RequestFailed { source }) => Err(store_error(source)),
        }
    }

    /// The owner records, and the offsets and progress records of the
    /// releases that carry a commit, read in one multi-read; then those
    /// still ours deleted at the version read, each with its commit
    /// written and its record checked first, in one `multi`. Refused as a
    /// whole (a record changed in between, a parent missing), each is
    /// released on its own.
    async fn release_many(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>, Option<Committed>)],
    ) -> Vec<Result<(), StoreError>> {
        if releases.len() < 2 {
            return self.release_each(releases).await;
        }
        let layout = &self.group.layout;
        let owners: Vec<String> = releases.iter().map(|(p, _, _)| layout.owner(p)).collect();
        let committing = releases
            .iter()
            .filter(|(_, _, commit)| commit.is_some())
            .map(|(p, _, _)| p);
        let paths: Vec<String> = owners
            .iter()
            .cloned()
            .chain(commit_paths(layout, committing))
            .collect();
        let mut owner_reads = match read_all(self, &paths).await {
            Err(zk::Error::Unimplemented) => return self.release_each(releases).await,
            Err(error) => return each_failed(releases.len(), store_error(error)),
            Ok(reads) => reads,
        };
        let mut commit_reads = pairs(owner_reads.split_off(releases.len()));
        // Decided by the read (gone, not ours: nothing to do, or nothing
        // written where a commit rides; unreadable), or `None`: deleted by
        // the multi.
        let mut decided: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(owners.len());
        let mut writer = self.client.new_multi_writer();
        for ((owner_path, (partition, token, commit)), read) in
            owners.iter().zip(releases).zip(owner_reads)
        {
            let Some(commit) = commit else {
                match read {
                    Ok((_, stat))
                        if owner_session(&stat) == Some(self.session)
                            && token.is_none_or(|t| t == token_of(&stat)) =>
                    {
                        if writer.add_delete(owner_path, Some(stat.version)).is_err() {
                            return self.release_each(releases).await;
                        }
                        decided.push(None);
                    }
                    Ok(_) | Err(zk::Error::NoNode) => decided.push(Some(Ok(()))),
                    Err(error) => decided.push(Some(Err(store_error(error)))),
                }
                continue;
            };
            let Some((offset, progress)) = commit_reads.next() else {
                return self.release_each(releases).await;
            };
            let owner = match owned(read, self.session, *token) {
                Ok(owner) => owner,
                Err(error) => {
                    decided.push(Some(Err(error)));
                    continue;
                }
            };
            // A parent may be missing: then the multi is refused and the
            // release goes on its own, which makes it.
            let nodes = match CommitNodes::read(layout, partition, commit, offset, progress) {
                Ok(nodes) => nodes,
                Err(error) => {
                    decided.push(Some(Err(store_error(error))));
                    continue;
                }
            };
            let added =
                self.add_release_committing(&mut writer, owner_path, &owner, &nodes, commit);
            if added.is_err() {
                return self.release_each(releases).await;
            }
            decided.push(None);
        }
        if decided.iter().any(Option::is_none) {
            self.group.config.hooks.before_release().await;
        }
        self.write_undecided(writer, decided, self.release_each(releases))
            .await
    }

    /// The offset node and the progress record in one multi-read (one by
    /// one on a server before 3.6): a record written with another offset
    /// than the one read counts for nothing.
    async fn read_offset(
        &self,
        partition: &TopicPartition,
    ) -> Result<Option<Committed>, StoreError> {
        let layout = &self.group.layout;
        let paths: Vec<String> = commit_paths(layout, [partition]).collect();
        let reads = read_nodes(self, &paths).await.map_err(store_error)?;
        match pairs(reads).next() {
            Some((offset, progress)) => committed_from(layout, partition, offset, progress),
            None => Err(StoreError::Other(ClientError::message(
                "a read of an offset and its progress answered otherwise",
            ))),
        }
    }

    async fn read_offset_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Committed>, StoreError>> {
        if partitions.len() < 2 {
            return self.read_offset_each(partitions).await;
        }
        let layout = &self.group.layout;
        let paths: Vec<String> = commit_paths(layout, partitions).collect();
        let reads = match read_all(self, &paths).await {
            // A server before multi-reads (3.6).
            Err(zk::Error::Unimplemented) => return self.read_offset_each(partitions).await,
            Err(error) => return each_failed(partitions.len(), store_error(error)),
            Ok(reads) => reads,
        };
        pairs(reads)
            .zip(partitions)
            .map(|((offset, progress), p)| committed_from(layout, p, offset, progress))
            .collect()
    }

    /// The owner record, the offset node and the progress record read in
    /// one multi-read, then the commit written in one `multi` tied to the
    /// owner record as read.
    async fn commit(
        &self,
        partition: &TopicPartition,
        commit: &Committed,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let layout = &self.group.layout;
        let owner_path = layout.owner(partition);
        let [owner, offset, progress] = self.read_commit_nodes(&owner_path, partition).await?;
        let owner = match owner {
            Ok((_, stat)) => stat,
            Err(zk::Error::NoNode) => return Err(StoreError::NotOwner),
            Err(e) => return Err(store_error(e)),
        };
        if owner_session(&owner) != Some(self.session) || token_of(&owner) != token {
            return Err(StoreError::NotOwner);
        }
        let nodes =
            CommitNodes::read(layout, partition, commit, offset, progress).map_err(store_error)?;
        self.create_commit_parents(&nodes)
            .await
            .map_err(store_error)?;
        // The check ties the write to the owner record as read above: only our
        // own release or the end of our session can remove it, and either makes
        // this multi fail as a whole.
        let mut writer = self.client.new_multi_writer();
        let built = writer
            .add_check_version(&owner_path, owner.version)
            .and_then(|()| self.add_commit(&mut writer, &nodes, commit));
        built.map_err(store_error)?;
        match self.multi(writer).await {
            Ok(_) => Ok(()),
            Err(zk::MultiWriteError::OperationFailed {
                index: 0,
                source: zk::Error::NoNode | zk::Error::BadVersion,
            }) => Err(StoreError::NotOwner),
            Err(zk::MultiWriteError::OperationFailed { source, .. })
            | Err(zk::MultiWriteError::RequestFailed { source }) => Err(store_error(source)),
        }
    }

    /// The owner records, offsets and progress records read in one
    /// multi-read, then every commit still ours written in one `multi`,
    /// each tied to its owner record as read (as [`StoreOps::commit`] ties
    /// one); refused as a whole (a record changed in between, a parent
    /// missing), each is committed on its own.
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Committed, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        if commits.len() < 2 {
            return self.commit_each(commits).await;
        }
        let layout = &self.group.layout;
        let owners: Vec<String> = commits.iter().map(|(p, _, _)| layout.owner(p)).collect();
        let paths: Vec<String> = owners
            .iter()
            .cloned()
            .chain(commit_paths(layout, commits.iter().map(|(p, _, _)| p)))
            .collect();
        let mut owner_reads = match read_all(self, &paths).await {
            Err(zk::Error::Unimplemented) => return self.commit_each(commits).await,
            Err(error) => return each_failed(commits.len(), store_error(error)),
            Ok(reads) => reads,
        };
        let commit_reads = pairs(owner_reads.split_off(commits.len()));
        // Decided by the read (not ours, unreadable), or `None`: written
        // by the multi.
        let mut decided: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(commits.len());
        let mut writer = self.client.new_multi_writer();
        let reads = owner_reads.into_iter().zip(commit_reads);
        for (i, ((partition, commit, token), (owner, (offset, progress)))) in
            commits.iter().zip(reads).enumerate()
        {
            let owner = match owner {
                Ok((_, stat))
                    if owner_session(&stat) == Some(self.session) && token_of(&stat) == *token =>
                {
                    stat
                }
                Ok(_) | Err(zk::Error::NoNode) => {
                    decided.push(Some(Err(StoreError::NotOwner)));
                    continue;
                }
                Err(error) => {
                    decided.push(Some(Err(store_error(error))));
                    continue;
                }
            };
            let nodes = match CommitNodes::read(layout, partition, commit, offset, progress) {
                Ok(nodes) => nodes,
                Err(error) => {
                    decided.push(Some(Err(store_error(error))));
                    continue;
                }
            };
            let built = writer
                .add_check_version(&owners[i], owner.version)
                .and_then(|()| self.add_commit(&mut writer, &nodes, commit));
            if built.is_err() {
                return self.commit_each(commits).await;
            }
            decided.push(None);
        }
        self.write_undecided(writer, decided, self.commit_each(commits))
            .await
    }
}

async fn read_members(ctx: &Ctx) -> Result<(MemberList, zk::OneshotWatcher), StoreError> {
    let ids = ctx.group.layout.ids();
    let listed = match ctx.call(|| ctx.client.get_and_watch_children(&ids)).await {
        Err(zk::Error::NoNode) => {
            // No member has registered yet: make the parent so that it can
            // be watched.
            ctx.create_parents(&format!("{ids}/x"))
                .await
                .map_err(store_error)?;
            ctx.call(|| ctx.client.get_and_watch_children(&ids)).await
        }
        other => other,
    };
    let (children, stat, watcher) = listed.map_err(store_error)?;
    let before = take_listed(&ctx.group.listed);
    let mut registrations = match before {
        Some(before) if before.still_describes(&stat, &children) => before.registrations,
        _ => Registrations::default(),
    };
    let children: HashSet<String> = children.into_iter().collect();
    registrations.retain(|id| children.contains(id));
    let mut new: Vec<&String> = children
        .iter()
        .filter(|id| !registrations.contains(id))
        .collect();
    new.sort();
    let paths: Vec<String> = new.iter().map(|id| format!("{ids}/{id}")).collect();
    let reads = match read_all(ctx, &paths).await {
        Err(zk::Error::Unimplemented) => read_each(ctx, &paths).await,
        other => other,
    }
    .map_err(store_error)?;
    for ((id, path), read) in new.into_iter().zip(&paths).zip(reads) {
        match read {
            Ok((data, _)) => registrations.read(id.clone(), path, &data),
            // A member that left between the listing and the read is simply
            // not a member any more.
            Err(zk::Error::NoNode) => registrations.gone(id.clone()),
            Err(e) => return Err(store_error(e)),
        }
    }
    let members = registrations.list();
    put_listed(
        &ctx.group.listed,
        Listed {
            parent: stat.czxid,
            child_version: stat.cversion,
            registrations,
        },
    );
    Ok((members, watcher))
}

/// One node's data and stat, or why it could not be read.
type Read = Result<(Vec<u8>, zk::Stat), zk::Error>;

/// Nodes read in one multi-read per this many: far below ZooKeeper's 1 MB
/// request and reply bound at a few hundred bytes each (registrations; an
/// offset takes a few).
const NODES_PER_READ: usize = 1000;

/// Reads every path's data with multi-reads (ZooKeeper 3.6 and later). A
/// member list is read by every member at every membership change: one
/// request per registration made that M² requests per change, which at a
/// hundred members was most of what a join or a leave cost. The offsets a
/// step reads come the same way.
async fn read_all(ctx: &Ctx, paths: &[String]) -> Result<Vec<Read>, zk::Error> {
    let mut reads = Vec::with_capacity(paths.len());
    for chunk in paths.chunks(NODES_PER_READ) {
        let mut reader = ctx.client.new_multi_reader();
        for path in chunk {
            reader.add_get_data(path)?;
        }
        let results = ctx.call(|| reader.commit()).await?;
        if results.len() != chunk.len() {
            return Err(zk::Error::UnexpectedError(format!(
                "a multi-read of {} nodes answered {}",
                chunk.len(),
                results.len()
            )));
        }
        reads.extend(results.into_iter().map(|result| match result {
            zk::MultiReadResult::Data { data, stat } => Ok((data, stat)),
            zk::MultiReadResult::Error { err } => Err(err),
            _ => Err(zk::Error::UnexpectedError(
                "a multi-read answered with something else than data".to_owned(),
            )),
        }));
    }
    Ok(reads)
}

/// Reads every path's data with one request each, all sent at once: for a
/// server older than 3.6, which has no multi-read.
async fn read_each(ctx: &Ctx, paths: &[String]) -> Result<Vec<Read>, zk::Error> {
    // Requests go out when their futures are made: ask for every
    // registration at once, then collect the answers. Reads: their answers
    // are not heard from the leader (see `Ctx::call`).
    ctx.wire.count(paths.len() as u64);
    let pending: Vec<_> = paths.iter().map(|p| ctx.client.get_data(p)).collect();
    let mut reads = Vec::with_capacity(paths.len());
    for read in pending {
        reads.push(read.await);
    }
    Ok(reads)
}

/// Deletes `path` if it belongs to our session and, if `token` is given,
/// carries that token. Gone or not ours: nothing to do.
async fn delete_if_ours(
    ctx: &Ctx,
    path: &str,
    token: Option<FencingToken>,
    release: bool,
) -> Result<(), StoreError> {
    let stat = match ctx.call(|| ctx.client.check_stat(path)).await {
        Ok(Some(stat)) => stat,
        Ok(None) => return Ok(()),
        Err(e) => return Err(store_error(e)),
    };
    let ours =
        owner_session(&stat) == Some(ctx.session) && token.is_none_or(|t| t == token_of(&stat));
    if !ours {
        return Ok(());
    }
    if release {
        ctx.group.config.hooks.before_release().await;
    }
    // The version guards against the record changing between the read and
    // the delete.
    match ctx
        .call_leader(|| ctx.client.delete(path, Some(stat.version)))
        .await
    {
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(zk::Error::BadVersion) => Err(StoreError::Other(ClientError::message(
            "owner record changed during release",
        ))),
        Err(e) => Err(store_error(e)),
    }
}
