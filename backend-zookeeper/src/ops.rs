//! The store commands, carried out as ZooKeeper requests with the semantics
//! of the reference adapter (`tenure_core::model::adapter`).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tenure_core::records::{encode_offset, held_claim, parse_offset};
use tenure_core::{
    ClaimOutcome, ClientError, FencingToken, MemberInfo, Offset, RegisterOutcome, SessionId,
    StoreError, TopicPartition,
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

/// How a commit writes its offset node: its data set at the version read,
/// or the node created (none was there).
#[derive(Clone, Copy, Debug)]
enum Write {
    Set(i32),
    Create,
}

impl Ctx {
    /// Adds to `writer` a release that carries a commit: the owner record
    /// at `owner_path` checked at the version of `owner` (as read), the
    /// offset written to `path` as `write` says, and the owner record
    /// deleted, in this order; the check comes first so that a refusal at
    /// index 0 says the record changed since it was read.
    fn add_release_committing(
        &self,
        writer: &mut zk::MultiWriter<'_>,
        owner_path: &str,
        owner: &zk::Stat,
        path: &str,
        offset: Offset,
        write: Write,
    ) -> Result<(), zk::Error> {
        let data = encode_offset(offset);
        writer.add_check_version(owner_path, owner.version)?;
        match write {
            Write::Set(version) => writer.add_set_data(path, &data, Some(version))?,
            Write::Create => writer.add_create(
                path,
                &data,
                &zk::CreateMode::Persistent.with_acls(self.group.config.security.acls()),
            )?,
        }
        writer.add_delete(owner_path, Some(owner.version))
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

/// The committed offset a read of its node at `path` found: none if there
/// is no node.
fn committed_from(path: &str, read: Read) -> Result<Option<Offset>, StoreError> {
    match read {
        Ok((data, _)) => parse_offset(path, &data).map(Some),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(store_error(e)),
    }
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
    /// read if it is ours. With one, the owner record and the offset read
    /// in one multi-read, then one `multi` that checks the owner record is
    /// the one read, writes the offset and deletes the record: two
    /// requests where a commit (three) and a release (two) took five.
    async fn release(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        commit: Option<Offset>,
    ) -> Result<(), StoreError> {
        let owner_path = self.group.layout.owner(partition);
        let Some(offset) = commit else {
            return delete_if_ours(self, &owner_path, token, true).await;
        };
        let path = self.group.layout.offset(partition);
        let paths = [owner_path.clone(), path.clone()];
        let reads = match read_all(self, &paths).await {
            // A server before multi-reads (3.6): both at once.
            Err(zk::Error::Unimplemented) => read_each(self, &paths).await,
            other => other,
        }
        .map_err(store_error)?;
        let [owner, existing]: [Read; 2] = reads.try_into().map_err(|_| {
            StoreError::Other(ClientError::message(
                "a read of an owner record and an offset answered otherwise",
            ))
        })?;
        let owner = owned(owner, self.session, token)?;
        let write = match existing {
            Ok((_, stat)) => Write::Set(stat.version),
            Err(zk::Error::NoNode) => {
                self.create_parents(&path).await.map_err(store_error)?;
                Write::Create
            }
            Err(error) => return Err(store_error(error)),
        };
        let mut writer = self.client.new_multi_writer();
        self.add_release_committing(&mut writer, &owner_path, &owner, &path, offset, write)
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

    /// The owner records, and the offsets of the releases that carry a
    /// commit, read in one multi-read; then those still ours deleted at
    /// the version read, each with its commit written and its record
    /// checked first, in one `multi`. Refused as a whole (a record changed
    /// in between, an offsets parent missing), each is released on its own.
    async fn release_many(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>, Option<Offset>)],
    ) -> Vec<Result<(), StoreError>> {
        if releases.len() < 2 {
            return self.release_each(releases).await;
        }
        let owners: Vec<String> = releases
            .iter()
            .map(|(p, _, _)| self.group.layout.owner(p))
            .collect();
        let offsets: Vec<String> = releases
            .iter()
            .filter(|(_, _, commit)| commit.is_some())
            .map(|(p, _, _)| self.group.layout.offset(p))
            .collect();
        let paths: Vec<String> = owners.iter().chain(&offsets).cloned().collect();
        let mut owner_reads = match read_all(self, &paths).await {
            Err(zk::Error::Unimplemented) => return self.release_each(releases).await,
            Err(error) => return each_failed(releases.len(), store_error(error)),
            Ok(reads) => reads,
        };
        let mut offset_reads = owner_reads.split_off(releases.len()).into_iter();
        let mut offset_paths = offsets.iter();
        // Decided by the read (gone, not ours: nothing to do, or nothing
        // written where a commit rides; unreadable), or `None`: deleted by
        // the multi.
        let mut decided: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(owners.len());
        let mut writer = self.client.new_multi_writer();
        for ((owner_path, (_, token, commit)), read) in owners.iter().zip(releases).zip(owner_reads)
        {
            let Some(offset) = commit else {
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
            let (Some(existing), Some(path)) = (offset_reads.next(), offset_paths.next()) else {
                return self.release_each(releases).await;
            };
            let owner = match owned(read, self.session, *token) {
                Ok(owner) => owner,
                Err(error) => {
                    decided.push(Some(Err(error)));
                    continue;
                }
            };
            let write = match existing {
                Ok((_, stat)) => Write::Set(stat.version),
                // Its parent may be missing: then the multi is refused and
                // the release goes on its own, which makes it.
                Err(zk::Error::NoNode) => Write::Create,
                Err(error) => {
                    decided.push(Some(Err(store_error(error))));
                    continue;
                }
            };
            let added =
                self.add_release_committing(&mut writer, owner_path, &owner, path, *offset, write);
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

    async fn read_offset(&self, partition: &TopicPartition) -> Result<Option<Offset>, StoreError> {
        let path = self.group.layout.offset(partition);
        let read = self.call(|| self.client.get_data(&path)).await;
        committed_from(&path, read)
    }

    async fn read_offset_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Offset>, StoreError>> {
        if partitions.len() < 2 {
            return self.read_offset_each(partitions).await;
        }
        let paths: Vec<String> = partitions
            .iter()
            .map(|p| self.group.layout.offset(p))
            .collect();
        let reads = match read_all(self, &paths).await {
            // A server before multi-reads (3.6).
            Err(zk::Error::Unimplemented) => return self.read_offset_each(partitions).await,
            Err(error) => return each_failed(partitions.len(), store_error(error)),
            Ok(reads) => reads,
        };
        reads
            .into_iter()
            .zip(&paths)
            .map(|(read, path)| match read {
                Ok((data, _)) => parse_offset(path, &data).map(Some),
                Err(zk::Error::NoNode) => Ok(None),
                Err(error) => Err(store_error(error)),
            })
            .collect()
    }

    async fn commit(
        &self,
        partition: &TopicPartition,
        offset: Offset,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let owner_path = self.group.layout.owner(partition);
        let owner = match self.call(|| self.client.check_stat(&owner_path)).await {
            Ok(Some(stat)) => stat,
            Ok(None) => return Err(StoreError::NotOwner),
            Err(e) => return Err(store_error(e)),
        };
        if owner_session(&owner) != Some(self.session) || token_of(&owner) != token {
            return Err(StoreError::NotOwner);
        }
        let path = self.group.layout.offset(partition);
        let data = encode_offset(offset);
        let existing = self
            .call(|| self.client.check_stat(&path))
            .await
            .map_err(store_error)?;
        if existing.is_none() {
            self.create_parents(&path).await.map_err(store_error)?;
        }
        // The check ties the write to the owner record as read above: only our
        // own release or the end of our session can remove it, and either makes
        // this multi fail as a whole.
        let mut writer = self.client.new_multi_writer();
        let built = writer
            .add_check_version(&owner_path, owner.version)
            .and_then(|()| match &existing {
                Some(stat) => writer.add_set_data(&path, &data, Some(stat.version)),
                None => writer.add_create(
                    &path,
                    &data,
                    &zk::CreateMode::Persistent.with_acls(self.group.config.security.acls()),
                ),
            });
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

    /// The owner records and offsets read in one multi-read, then every
    /// offset still ours written in one `multi`, each write tied to its
    /// owner record as read (as [`StoreOps::commit`] ties one); refused as
    /// a whole (a record changed in between, an offsets parent missing),
    /// each is committed on its own.
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Offset, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        if commits.len() < 2 {
            return self.commit_each(commits).await;
        }
        let owners: Vec<String> = commits
            .iter()
            .map(|(p, _, _)| self.group.layout.owner(p))
            .collect();
        let offsets: Vec<String> = commits
            .iter()
            .map(|(p, _, _)| self.group.layout.offset(p))
            .collect();
        let paths: Vec<String> = owners.iter().chain(&offsets).cloned().collect();
        let mut owner_reads = match read_all(self, &paths).await {
            Err(zk::Error::Unimplemented) => return self.commit_each(commits).await,
            Err(error) => return each_failed(commits.len(), store_error(error)),
            Ok(reads) => reads,
        };
        let offset_reads = owner_reads.split_off(commits.len());
        // Decided by the read (not ours, unreadable), or `None`: written
        // by the multi.
        let mut decided: Vec<Option<Result<(), StoreError>>> = Vec::with_capacity(commits.len());
        let mut writer = self.client.new_multi_writer();
        let options = zk::CreateMode::Persistent.with_acls(self.group.config.security.acls());
        let reads = owner_reads.into_iter().zip(offset_reads);
        for (i, ((_, offset, token), (owner, existing))) in commits.iter().zip(reads).enumerate() {
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
            let data = encode_offset(*offset);
            let built = writer
                .add_check_version(&owners[i], owner.version)
                .and_then(|()| match existing {
                    Ok((_, stat)) => writer.add_set_data(&offsets[i], &data, Some(stat.version)),
                    Err(zk::Error::NoNode) => writer.add_create(&offsets[i], &data, &options),
                    Err(error) => Err(error),
                });
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
