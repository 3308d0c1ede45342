//! The store commands, carried out as etcd requests with the semantics of
//! the reference adapter (`tenure_core::model::adapter`) and of the ZooKeeper
//! backend.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse,
};
use tenure_core::records::{encode_offset, held_claim, parse_offset};
use tenure_core::{
    ClaimOutcome, ClientError, Committed, FencingToken, MemberInfo, Progress, RegisterOutcome,
    SessionId, StoreError, TopicPartition,
};
use tenure_tokio::store::{each_failed, MemberList, Registrations, StoreOps, Watch, Wire};

use crate::errors::store_error;
use crate::group::GroupClient;
use crate::session::Current;

/// One command's view of the store: the lease it was issued under, and the
/// member's wire.
pub(crate) struct Ctx {
    pub(crate) group: Arc<GroupClient>,
    pub(crate) current: Current,
    pub(crate) wire: Wire,
}

/// A token as etcd's revision type; one that does not fit matches nothing.
fn revision(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(-1)
}

/// The key-value pair read by the `get` of a transaction (its failure
/// branch's, or a claim's read of its offset).
fn got(response: &TxnResponse) -> Option<etcd_client::KeyValue> {
    response.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    })
}

/// What the `get`s of a transaction read, in order (`None`: the key is
/// absent); its puts and deletes are left out.
fn gets(response: &TxnResponse) -> Vec<Option<etcd_client::KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|r| match r {
            TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
            _ => None,
        })
        .collect()
}

/// The reads of a partition's committed offset and, in the same
/// transaction, its progress record.
fn committed_reads(keys: &crate::keys::Keys, partition: &TopicPartition) -> [TxnOp; 2] {
    [
        TxnOp::get(keys.offset(partition), None),
        TxnOp::get(keys.progress(partition), None),
    ]
}

/// The committed offset of `partition` and its progress from what
/// [`committed_reads`] read: a progress record written with another offset
/// counts for nothing.
fn committed(
    keys: &crate::keys::Keys,
    partition: &TopicPartition,
    read: &[Option<etcd_client::KeyValue>],
) -> Result<Option<Committed>, StoreError> {
    let [offset, progress] = read else {
        return Err(StoreError::Other(ClientError::message(format!(
            "etcd answered {} reads of an offset and its progress, not 2",
            read.len()
        ))));
    };
    let Some(offset) = offset else {
        return Ok(None);
    };
    let offset = parse_offset(&keys.offset(partition), offset.value())?;
    let progress = match progress {
        None => Progress::new(),
        Some(kv) => {
            Progress::decode(&keys.progress(partition), kv.value(), offset)?.unwrap_or_default()
        }
    };
    Ok(Some(Committed { offset, progress }))
}

/// The writes of a commit: the offset, and its progress record (deleted
/// when there is no progress above the offset, so that none outlives the
/// commit it was written with).
fn commit_writes(
    keys: &crate::keys::Keys,
    partition: &TopicPartition,
    commit: &Committed,
) -> [TxnOp; 2] {
    let progress_key = keys.progress(partition);
    let progress = if commit.progress.is_empty() {
        TxnOp::delete(progress_key, None)
    } else {
        TxnOp::put(progress_key, commit.progress.encode(commit.offset), None)
    };
    [
        TxnOp::put(keys.offset(partition), encode_offset(commit.offset), None),
        progress,
    ]
}

impl Ctx {
    fn lease(&self) -> i64 {
        self.current.lease
    }

    /// Runs one request once it has its turn on the wire, bounded by the
    /// request timeout from when it is sent: unanswered, it fails with
    /// ConnectionLoss. Its answer does not count as the store hearing from
    /// the session: only a lease's renewal does.
    async fn call<T, F, Fut>(&self, request: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let timeout = self.group.config.request_timeout();
        let client = self.group.client.clone();
        let sent = self
            .wire
            .send(|| tokio::time::timeout(timeout, request(client)))
            .await;
        match sent {
            Err(_) => Err(StoreError::ConnectionLoss),
            Ok(result) => result.map_err(store_error),
        }
    }

    /// The transaction of one claim of `partition`: the owner key made
    /// ours if absent, and then, if `read_offset`, the committed offset
    /// read in the same transaction (at the revision that made the key);
    /// the owner key read otherwise.
    fn claim_txn(&self, partition: &TopicPartition, read_offset: bool) -> Txn {
        let key = self.group.keys.owner(partition);
        let put = TxnOp::put(
            key.as_str(),
            self.group.member.id.as_str(),
            Some(PutOptions::new().with_lease(self.lease())),
        );
        let made = if read_offset {
            let [offset, progress] = committed_reads(&self.group.keys, partition);
            vec![put, offset, progress]
        } else {
            vec![put]
        };
        Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then(made)
            .or_else([TxnOp::get(key.as_str(), None)])
    }

    /// The transaction of one commit: the offset and its progress record
    /// written only while the owner key is the claim `token` and carries
    /// our lease.
    fn commit_txn(
        &self,
        partition: &TopicPartition,
        commit: &Committed,
        token: FencingToken,
    ) -> Txn {
        let owner = self.group.keys.owner(partition);
        Txn::new()
            .when([
                Compare::create_revision(owner.clone(), CompareOp::Equal, revision(token)),
                Compare::lease(owner, CompareOp::Equal, self.lease()),
            ])
            .and_then(commit_writes(&self.group.keys, partition, commit))
    }

    /// The transaction of one release: the owner key deleted only while it
    /// carries our lease and, if `token` is given, is that claim; with
    /// `commit`, the offset and its progress record written in the same
    /// transaction, and the owner key read when the compares fail, to tell
    /// a record gone from another's. Gone or not ours, it writes nothing.
    fn release_txn(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        commit: Option<&Committed>,
    ) -> Txn {
        let key = self.group.keys.owner(partition);
        let Some(commit) = commit else {
            return release_txn(self, key, token);
        };
        let [offset, progress] = commit_writes(&self.group.keys, partition, commit);
        Txn::new()
            .when(release_compares(self, &key, token))
            .and_then([offset, progress, TxnOp::delete(key.clone(), None)])
            .or_else([TxnOp::get(key, None)])
    }

    /// One transaction of `txns`, nested: each evaluates its own compares,
    /// so that one that fails leaves the others alone. etcd counts a
    /// nested transaction's operations against `--max-txn-ops` on top of
    /// the ones around it: [`OPS_PER_BATCH`] leaves them room.
    async fn txn_of_txns(&self, txns: Vec<Txn>) -> Result<TxnResponse, StoreError> {
        let txn = Txn::new().and_then(txns.into_iter().map(TxnOp::txn).collect::<Vec<_>>());
        self.txn(txn).await
    }

    /// Reads one key, or with `options` a range.
    async fn get(
        &self,
        key: &str,
        options: Option<GetOptions>,
    ) -> Result<etcd_client::GetResponse, StoreError> {
        let key = key.to_owned();
        self.call(|mut client| async move { client.get(key, options).await })
            .await
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.call(|mut client| async move { client.txn(txn).await })
            .await
    }
}

#[async_trait]
impl StoreOps for Ctx {
    /// Creates the registration if there is none; otherwise says whose lease
    /// holds it. One transaction: the answer is about the record the compare saw.
    async fn register(&self, info: &MemberInfo) -> Result<RegisterOutcome, StoreError> {
        let key = self.group.keys.member(&info.id);
        let data = tenure_tokio::registration_record(info);
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                data,
                Some(PutOptions::new().with_lease(self.lease())),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let response = self.txn(txn).await?;
        if response.succeeded() {
            return Ok(RegisterOutcome::Registered);
        }
        match got(&response) {
            Some(kv) if kv.lease() != 0 => Ok(RegisterOutcome::Exists {
                session: SessionId(kv.lease() as u64),
            }),
            Some(_) => Err(StoreError::Corrupt {
                path: key,
                detail: "member registration has no lease".to_owned(),
                source: None,
            }),
            // The compare saw the key, the get in the same transaction did not:
            // cannot happen; treated as gone.
            None => Err(StoreError::NoNode),
        }
    }

    async fn deregister(&self) -> Result<(), StoreError> {
        let key = self.group.keys.member(&self.group.member.id);
        self.txn(release_txn(self, key, None)).await.map(|_| ())
    }

    /// Renews nothing, but proves the lease alive: its remaining TTL also
    /// bounds when the server last renewed it.
    async fn heartbeat(&self) -> Result<(), StoreError> {
        let lease = self.lease();
        let sent = Instant::now();
        let response = self
            .call(|mut client| async move { client.lease_time_to_live(lease, None).await })
            .await?;
        if response.ttl() <= 0 {
            return Err(StoreError::SessionExpired);
        }
        // The server expires the lease `remaining` after it answered, so it
        // renewed it no earlier than TTL - remaining before `sent`.
        let remaining = Duration::from_secs(u64::try_from(response.ttl()).unwrap_or(0));
        if let Some(renewed) = sent.checked_sub(self.current.ttl.saturating_sub(remaining)) {
            self.wire.heard(renewed);
        }
        Ok(())
    }

    async fn watch_members(&self) -> Result<(MemberList, Watch), StoreError> {
        let (members, revision) = read_members(self).await?;
        let prefix = self.group.keys.members();
        // One notification per WatchMembers, whatever changed.
        let watch = watch(self, prefix, true, revision + 1, |_| true);
        Ok((members, watch))
    }

    /// Creates the owner key if there is none; otherwise reads it, in the same
    /// transaction.
    async fn claim(
        &self,
        partition: &TopicPartition,
        read_offset: bool,
    ) -> Result<ClaimOutcome, StoreError> {
        self.group.config.hooks.before_owner_read().await;
        let response = self.txn(self.claim_txn(partition, read_offset)).await?;
        let revision = response.header().map(|h| h.revision());
        claimed(
            &self.group.keys,
            partition,
            &response,
            revision,
            read_offset,
        )
    }

    /// One transaction of one claim per partition, nested: each has its
    /// own outcome, and the transaction's revision is the token of each
    /// it created.
    async fn claim_many(
        &self,
        partitions: &[TopicPartition],
        read_offset: bool,
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        if partitions.len() < 2 {
            return self.claim_each(partitions, read_offset).await;
        }
        let claims: Vec<Txn> = partitions
            .iter()
            .map(|p| self.claim_txn(p, read_offset))
            .collect();
        let response = match self.txn_of_txns(claims).await {
            Ok(response) => response,
            // Sent and not answered: the outcome of each is unknown, as a
            // single claim's would be.
            Err(error) => return each_failed(partitions.len(), error),
        };
        let revision = response.header().map(|h| h.revision());
        let keys = &self.group.keys;
        nested(&response, partitions.len(), "claims")
            .into_iter()
            .zip(partitions)
            .map(|(answer, p)| claimed(keys, p, &answer?, revision, read_offset))
            .collect()
    }

    async fn watch_owner(
        &self,
        partition: &TopicPartition,
    ) -> Result<(bool, Option<Watch>), StoreError> {
        let key = self.group.keys.owner(partition);
        let response = self.get(&key, None).await?;
        // Absent: no watch (etcd's watches are on keys, not on nodes that
        // may appear).
        let Some(kv) = response.kvs().first() else {
            return Ok((false, None));
        };
        let created = kv.create_revision();
        let revision = response
            .header()
            .map_or(kv.mod_revision(), |h| h.revision());
        // Gone, or made again by a later claim: either way the record that
        // was watched is no more.
        let gone = move |event: &etcd_client::Event| {
            event.event_type() == EventType::Delete
                || event.kv().map(|kv| kv.create_revision()) != Some(created)
        };
        Ok((true, Some(watch(self, key, false, revision + 1, gone))))
    }

    /// One transaction, with the final commit in it if there is one: a
    /// commit and a release took two.
    async fn release(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        commit: Option<&Committed>,
    ) -> Result<(), StoreError> {
        self.group.config.hooks.before_release().await;
        let response = self.txn(self.release_txn(partition, token, commit)).await?;
        released(&response, commit.is_some())
    }

    /// One transaction of one release per partition, nested.
    async fn release_many(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>, Option<Committed>)],
    ) -> Vec<Result<(), StoreError>> {
        self.group.config.hooks.before_release().await;
        let txns = releases
            .iter()
            .map(|(p, token, commit)| self.release_txn(p, *token, commit.as_ref()))
            .collect();
        match self.txn_of_txns(txns).await {
            Ok(response) => nested(&response, releases.len(), "releases")
                .into_iter()
                .zip(releases)
                .map(|(answer, (_, _, commit))| released(&answer?, commit.is_some()))
                .collect(),
            Err(error) => each_failed(releases.len(), error),
        }
    }

    /// The offset and its progress record, in one transaction: the record
    /// read is the one written with the offset read.
    async fn read_offset(
        &self,
        partition: &TopicPartition,
    ) -> Result<Option<Committed>, StoreError> {
        let keys = &self.group.keys;
        let txn = Txn::new().and_then(committed_reads(keys, partition));
        let response = self.txn(txn).await?;
        committed(keys, partition, &gets(&response))
    }

    /// One transaction of one read of an offset and its progress record per
    /// partition, nested (within `--max-txn-ops`): one consistent read of
    /// them all.
    async fn read_offset_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Committed>, StoreError>> {
        if partitions.len() < 2 {
            return self.read_offset_each(partitions).await;
        }
        let keys = &self.group.keys;
        let txns = partitions
            .iter()
            .map(|p| Txn::new().and_then(committed_reads(keys, p)))
            .collect();
        match self.txn_of_txns(txns).await {
            Ok(response) => nested(&response, partitions.len(), "offset reads")
                .into_iter()
                .zip(partitions)
                .map(|(answer, p)| committed(keys, p, &gets(&answer?)))
                .collect(),
            Err(error) => each_failed(partitions.len(), error),
        }
    }

    /// Writes the offset only while the owner key is the claim `token` and is
    /// attached to our lease, in one transaction: a released or re-made claim,
    /// or an expired lease, fails it.
    async fn commit(
        &self,
        partition: &TopicPartition,
        commit: &Committed,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let txn = self.commit_txn(partition, commit, token);
        if self.txn(txn).await?.succeeded() {
            Ok(())
        } else {
            Err(StoreError::NotOwner)
        }
    }

    /// One transaction of one commit per partition, nested: a partition
    /// no longer ours fails its own commit only.
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Committed, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        if commits.len() < 2 {
            return self.commit_each(commits).await;
        }
        let txns = commits
            .iter()
            .map(|(p, commit, token)| self.commit_txn(p, commit, *token))
            .collect();
        match self.txn_of_txns(txns).await {
            Ok(response) => nested(&response, commits.len(), "commits")
                .into_iter()
                .map(|answer| match answer?.succeeded() {
                    true => Ok(()),
                    false => Err(StoreError::NotOwner),
                })
                .collect(),
            Err(error) => each_failed(commits.len(), error),
        }
    }
}

/// The registered members and the revision they were read at.
///
/// After the first read, a read asks only for the registrations written
/// since the last one (`min_mod_revision`); the count of every
/// registration, which the filter leaves whole, says whether some were
/// deleted meanwhile, and then the keys alone at the same revision say
/// which.
async fn read_members(ctx: &Ctx) -> Result<(MemberList, i64), StoreError> {
    let before = ctx
        .group
        .registrations
        .lock()
        .map(|mut r| r.take())
        .unwrap_or(None);
    let (mut registrations, since) = match before {
        Some((revision, registrations)) => (registrations, Some(revision)),
        None => (Registrations::default(), None),
    };
    let prefix = ctx.group.keys.members();
    let mut options = GetOptions::new().with_prefix();
    if let Some(since) = since {
        options = options.with_min_mod_revision(since + 1);
    }
    let response = ctx.get(&prefix, Some(options)).await?;
    let revision = revision_of(response.header())?;
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key());
        let id = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
        registrations.read(id, &key, kv.value());
    }
    if i64::try_from(registrations.len()) != Ok(response.count()) {
        // Some were deleted since: the keys there are at the same revision.
        let options = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_revision(revision);
        let listed = ctx.get(&prefix, Some(options)).await?;
        let listed: HashSet<&[u8]> = listed
            .kvs()
            .iter()
            .filter_map(|kv| kv.key().strip_prefix(prefix.as_bytes()))
            .collect();
        registrations.retain(|id| listed.contains(id.as_bytes()));
    }
    let members = registrations.list();
    if let Ok(mut kept) = ctx.group.registrations.lock() {
        *kept = Some((revision, registrations));
    }
    Ok((members, revision))
}

/// The revision a response was answered at.
fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> Result<i64, StoreError> {
    header
        .map(|h| h.revision())
        .ok_or_else(|| StoreError::Other(ClientError::message("etcd answered without a header")))
}

/// What a release's transaction `response` says: done; or, for one that
/// carries a commit, why nothing was written (the owner key gone, or
/// another's). A release alone finds nothing to do just as well.
fn released(response: &TxnResponse, committing: bool) -> Result<(), StoreError> {
    if response.succeeded() || !committing {
        return Ok(());
    }
    match got(response) {
        Some(_) => Err(StoreError::NotOwner),
        None => Err(StoreError::NoNode),
    }
}

/// The compares of a release: `key` carries our lease and, if `token` is
/// given, is that claim. A missing key compares as lease 0 and
/// create_revision 0: no match.
fn release_compares(ctx: &Ctx, key: &str, token: Option<FencingToken>) -> Vec<Compare> {
    let mut compares = vec![Compare::lease(key, CompareOp::Equal, ctx.lease())];
    if let Some(token) = token {
        compares.push(Compare::create_revision(
            key,
            CompareOp::Equal,
            revision(token),
        ));
    }
    compares
}

/// The transaction that deletes `key` only while it carries our lease and,
/// if `token` is given, is that claim: gone or not ours, it does nothing.
fn release_txn(ctx: &Ctx, key: String, token: Option<FencingToken>) -> Txn {
    Txn::new()
        .when(release_compares(ctx, &key, token))
        .and_then([TxnOp::delete(key, None)])
}

/// What a claim's transaction `response` says of the owner key of
/// `partition`: made by it, with `revision` (the revision of the
/// transaction it was part of) as token, and the committed offset read
/// with it if `read_offset`; or held, as read.
fn claimed(
    keys: &crate::keys::Keys,
    partition: &TopicPartition,
    response: &TxnResponse,
    revision: Option<i64>,
    read_offset: bool,
) -> Result<ClaimOutcome, StoreError> {
    let key = keys.owner(partition);
    if response.succeeded() {
        // The put is the claim's only write: the key's create_revision is
        // the revision the transaction made.
        let revision = revision.ok_or_else(|| {
            StoreError::Other(ClientError::message("etcd answered without a header"))
        })?;
        // The gets that follow the put: the offset and its progress at the
        // claim's revision.
        let committed = read_offset.then(|| committed(keys, partition, &gets(response)));
        return Ok(ClaimOutcome::Created {
            token: FencingToken(revision as u64),
            committed,
        });
    }
    let key = key.as_str();
    match got(response) {
        Some(kv) => held_claim(
            key,
            kv.value(),
            (kv.lease() != 0).then_some(SessionId(kv.lease() as u64)),
            FencingToken(kv.create_revision() as u64),
        ),
        None => Err(StoreError::NoNode),
    }
}

/// The answers of the `count` transactions nested in `response`, in order
/// (`what` they are, for the error when etcd answered otherwise).
fn nested(
    response: &TxnResponse,
    count: usize,
    what: &str,
) -> Vec<Result<TxnResponse, StoreError>> {
    let answers = response.op_responses();
    if answers.len() != count {
        let error = StoreError::Other(ClientError::message(format!(
            "etcd answered {} of {count} {what} in one transaction",
            answers.len()
        )));
        return each_failed(count, error);
    }
    answers
        .into_iter()
        .map(|answer| match answer {
            TxnOpResponse::Txn(txn) => Ok(txn),
            _ => Err(StoreError::Other(ClientError::message(format!(
                "etcd answered one of {what} with something else than a transaction"
            )))),
        })
        .collect()
}

/// Watches `key` (a prefix if `prefix`) from revision `from` until an event
/// `fires` accepts, or history is lost to compaction (so such an event may
/// have been missed): the watch fires. The session loop drops it when the
/// session it was set under ends, which cancels it. The watch rides on the
/// backend's one watch stream, which registers it again from the revision
/// after the last event seen when the stream breaks, so nothing is missed
/// across disconnects.
fn watch(
    ctx: &Ctx,
    key: String,
    prefix: bool,
    from: i64,
    fires: impl FnMut(&etcd_client::Event) -> bool + Send + 'static,
) -> Watch {
    let mut registration = ctx.group.watches.add(key, prefix, from, Box::new(fires));
    // Dropping the registration cancels the watch if it has not fired.
    Box::pin(async move { registration.fired().await })
}
