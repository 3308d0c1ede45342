//! The store commands, carried out as etcd requests with the semantics of
//! the reference adapter (`tenure_core::model::adapter`) and of the ZooKeeper
//! backend.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchOptions,
};
use tenure_core::records::{decode_registration, parse_offset};
use tenure_core::{
    ClaimOutcome, ClientError, Command, Event, FencingToken, MemberId, MemberInfo, Offset,
    Operation, RegisterOutcome, SessionId, StoreError, TopicPartition,
};

use crate::{Current, Shared};

/// The pause before a broken watch is opened again.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// One command's view of the store: the lease it was issued under.
struct Ctx {
    shared: Arc<Shared>,
    current: Current,
}

/// Whether the server said that a lease does not exist.
pub(crate) fn lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            status.code() == tonic::Code::NotFound && status.message().contains("lease not found")
        }
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Whether `error` is an answer (rather than a failure of the connection,
/// after which the request's outcome is unknown).
pub(crate) fn answered(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => !matches!(
            status.code(),
            tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
                | tonic::Code::DeadlineExceeded
                | tonic::Code::Internal
                | tonic::Code::Aborted
        ),
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => false,
        _ => true,
    }
}

/// Maps a client error to the core's terms.
///
/// Transport failures (and etcd's own "leader changed" / "no leader", which
/// are `Unavailable`) leave the request's outcome unknown: ConnectionLoss.
/// A lease the server does not know is an expired session.
pub(crate) fn store_error(error: etcd_client::Error) -> StoreError {
    if lease_not_found(&error) {
        StoreError::SessionExpired
    } else if !answered(&error) {
        StoreError::ConnectionLoss
    } else {
        StoreError::Other(ClientError::new(error))
    }
}

/// A token as etcd's revision type; one that does not fit matches nothing.
fn revision(token: FencingToken) -> i64 {
    i64::try_from(token.0).unwrap_or(-1)
}

/// The key-value pair read by the `get` of a transaction's failure branch.
fn got(response: &TxnResponse) -> Option<etcd_client::KeyValue> {
    response.op_responses().into_iter().find_map(|r| match r {
        TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    })
}

impl Ctx {
    fn lease(&self) -> i64 {
        self.current.lease
    }

    fn session(&self) -> SessionId {
        self.current.session
    }

    /// Runs one request, bounded by the request timeout: unanswered, it
    /// fails with ConnectionLoss.
    async fn call<T, F, Fut>(&self, request: F) -> Result<T, StoreError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.shared.count(1);
        let timeout = self.shared.config.request_timeout();
        match tokio::time::timeout(timeout, request(self.shared.client.clone())).await {
            Err(_) => Err(StoreError::ConnectionLoss),
            Ok(result) => result.map_err(store_error),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        self.call(|mut client| async move { client.txn(txn).await })
            .await
    }
}

/// Carries out `command` (issued under `current`, the live lease) and sends
/// its result; for watches, goes on to wait for the notification.
pub(crate) async fn execute(shared: Arc<Shared>, current: Current, command: Command) {
    let ctx = Ctx { shared, current };
    // Claims, releases and commits of one partition run one at a time.
    let _partition = match &command {
        Command::Claim { partition, .. }
        | Command::Release { partition, .. }
        | Command::CommitOffset { partition, .. } => {
            Some(ctx.shared.partition_locks.lock(partition).await)
        }
        _ => None,
    };
    let event = match command {
        Command::Register { id, member, .. } => Event::RegisterResult {
            id,
            result: register(&ctx, &member).await,
        },
        Command::Deregister { id, .. } => {
            let key = ctx.shared.keys.member(&ctx.shared.member.id);
            Event::DeregisterResult {
                id,
                result: delete_if_ours(&ctx, key, None).await,
            }
        }
        Command::WatchMembers { id, .. } => {
            match read_members(&ctx).await {
                Ok((members, revision)) => {
                    ctx.shared.send(Event::MembersResult {
                        id,
                        result: Ok(members),
                    });
                    let prefix = ctx.shared.keys.members();
                    // One notification per WatchMembers, whatever changed.
                    if let Watched::Fired = watch(&ctx, prefix, true, revision + 1, |_| true).await
                    {
                        ctx.shared.send(Event::MembersChanged);
                    }
                }
                Err(e) => ctx.shared.send(Event::MembersResult { id, result: Err(e) }),
            }
            return;
        }
        Command::Heartbeat { id, .. } => Event::HeartbeatResult {
            id,
            result: heartbeat(&ctx).await,
        },
        Command::Claim { id, partition, .. } => Event::ClaimResult {
            id,
            result: claim(&ctx, &partition).await,
        },
        Command::WatchOwner { id, partition, .. } => {
            let key = ctx.shared.keys.owner(&partition);
            let read = ctx
                .call(|mut client| {
                    let key = key.clone();
                    async move { client.get(key, None).await }
                })
                .await;
            let (created, revision) = match read {
                Err(e) => {
                    ctx.shared
                        .send(Event::OwnerWatchResult { id, result: Err(e) });
                    return;
                }
                Ok(response) => match response.kvs().first() {
                    None => {
                        ctx.shared.send(Event::OwnerWatchResult {
                            id,
                            result: Ok(false),
                        });
                        return;
                    }
                    Some(kv) => (
                        kv.create_revision(),
                        response
                            .header()
                            .map_or(kv.mod_revision(), |h| h.revision()),
                    ),
                },
            };
            ctx.shared.send(Event::OwnerWatchResult {
                id,
                result: Ok(true),
            });
            // Gone, or made again by a later claim: either way the record
            // that was watched is no more.
            let gone = |event: &etcd_client::Event| {
                event.event_type() == EventType::Delete
                    || event.kv().map(|kv| kv.create_revision()) != Some(created)
            };
            if let Watched::Fired = watch(&ctx, key, false, revision + 1, gone).await {
                ctx.shared.send(Event::OwnerDeleted { partition });
            }
            return;
        }
        Command::Release {
            id,
            partition,
            token,
            ..
        } => {
            let delay = ctx.shared.config.hooks.delay_release;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let key = ctx.shared.keys.owner(&partition);
            Event::ReleaseResult {
                id,
                result: delete_if_ours(&ctx, key, token).await,
            }
        }
        Command::ReadOffset { id, partition, .. } => Event::OffsetResult {
            id,
            result: read_offset(&ctx, &partition).await,
        },
        Command::CommitOffset {
            id,
            partition,
            offset,
            token,
            ..
        } => Event::CommitResult {
            id,
            result: commit(&ctx, &partition, offset, token).await,
        },
    };
    ctx.shared.send(event);
}

/// Creates the registration if there is none; otherwise says whose lease
/// holds it. One transaction: the answer is about the record the compare saw.
async fn register(ctx: &Ctx, info: &MemberInfo) -> Result<RegisterOutcome, StoreError> {
    let key = ctx.shared.keys.member(&info.id);
    let data = tenure_tokio::registration_record(info);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            data,
            Some(PutOptions::new().with_lease(ctx.lease())),
        )])
        .or_else([TxnOp::get(key.clone(), None)]);
    let response = ctx.txn(txn).await?;
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
        }),
        // The compare saw the key, the get in the same transaction did not:
        // cannot happen; treated as gone.
        None => Err(StoreError::NoNode),
    }
}

/// The registered members and the revision they were read at.
async fn read_members(ctx: &Ctx) -> Result<(Vec<MemberInfo>, i64), StoreError> {
    let prefix = ctx.shared.keys.members();
    let response = ctx
        .call(|mut client| {
            let prefix = prefix.clone();
            async move {
                client
                    .get(prefix, Some(GetOptions::new().with_prefix()))
                    .await
            }
        })
        .await?;
    let revision = response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| StoreError::Other(ClientError::message("etcd answered without a header")))?;
    let mut members = Vec::with_capacity(response.kvs().len());
    for kv in response.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let id = key.strip_prefix(&prefix).unwrap_or(&key);
        match decode_registration(id, kv.value()) {
            Ok(info) => members.push(info),
            // Left out rather than guessed at (the others leave it out too),
            // but worth an operator's look.
            Err(detail) => {
                tracing::warn!(%key, %detail, "ignoring corrupt member registration");
                ctx.shared.send(Event::StoreProblem {
                    operation: Operation::ReadRegistration,
                    error: StoreError::Corrupt { path: key, detail },
                });
            }
        }
    }
    members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((members, revision))
}

/// Renews nothing, but proves the lease alive: its remaining TTL also
/// bounds when the server last renewed it.
async fn heartbeat(ctx: &Ctx) -> Result<(), StoreError> {
    let lease = ctx.lease();
    let sent = Instant::now();
    let response = ctx
        .call(|mut client| async move { client.lease_time_to_live(lease, None).await })
        .await?;
    if response.ttl() <= 0 {
        return Err(StoreError::SessionExpired);
    }
    // The server expires the lease `remaining` after it answered, so it
    // renewed it no earlier than TTL - remaining before `sent`.
    let remaining = Duration::from_secs(u64::try_from(response.ttl()).unwrap_or(0));
    if let Some(renewed) = sent.checked_sub(ctx.current.ttl.saturating_sub(remaining)) {
        ctx.shared.last_heard.heard(renewed);
    }
    Ok(())
}

/// Creates the owner key if there is none; otherwise reads it, in the same
/// transaction.
async fn claim(ctx: &Ctx, partition: &TopicPartition) -> Result<ClaimOutcome, StoreError> {
    let delay = ctx.shared.config.hooks.delay_owner_read;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let key = ctx.shared.keys.owner(partition);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key.clone(),
            ctx.shared.member.id.as_str(),
            Some(PutOptions::new().with_lease(ctx.lease())),
        )])
        .or_else([TxnOp::get(key.clone(), None)]);
    let response = ctx.txn(txn).await?;
    if response.succeeded() {
        // The put is the transaction's only write: the key's create_revision
        // is the revision the transaction made.
        let revision = response.header().map(|h| h.revision()).ok_or_else(|| {
            StoreError::Other(ClientError::message("etcd answered without a header"))
        })?;
        return Ok(ClaimOutcome::Created {
            token: FencingToken(revision as u64),
        });
    }
    match got(&response) {
        Some(kv) if kv.lease() != 0 => Ok(ClaimOutcome::Held {
            owner: std::str::from_utf8(kv.value())
                .ok()
                .and_then(|s| MemberId::new(s).ok()),
            session: SessionId(kv.lease() as u64),
            token: FencingToken(kv.create_revision() as u64),
        }),
        Some(_) => Err(StoreError::Corrupt {
            path: key,
            detail: "owner record has no lease".to_owned(),
        }),
        None => Err(StoreError::NoNode),
    }
}

/// Deletes `key` if it is attached to our lease and, if `token` is given,
/// has that create_revision. Gone or not ours: nothing to do.
async fn delete_if_ours(
    ctx: &Ctx,
    key: String,
    token: Option<FencingToken>,
) -> Result<(), StoreError> {
    // A missing key compares as lease 0 and create_revision 0: no match.
    let mut compares = vec![Compare::lease(key.clone(), CompareOp::Equal, ctx.lease())];
    if let Some(token) = token {
        compares.push(Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            revision(token),
        ));
    }
    let txn = Txn::new()
        .when(compares)
        .and_then([TxnOp::delete(key, None)]);
    ctx.txn(txn).await.map(|_| ())
}

async fn read_offset(ctx: &Ctx, partition: &TopicPartition) -> Result<Option<Offset>, StoreError> {
    let key = ctx.shared.keys.offset(partition);
    let response = ctx
        .call(|mut client| {
            let key = key.clone();
            async move { client.get(key, None).await }
        })
        .await?;
    match response.kvs().first() {
        None => Ok(None),
        Some(kv) => parse_offset(&key, kv.value()).map(Some),
    }
}

/// Writes the offset only while the owner key is the claim `token` and is
/// attached to our lease, in one transaction: a released or re-made claim,
/// or an expired lease, fails it.
async fn commit(
    ctx: &Ctx,
    partition: &TopicPartition,
    offset: Offset,
    token: FencingToken,
) -> Result<(), StoreError> {
    let owner = ctx.shared.keys.owner(partition);
    let key = ctx.shared.keys.offset(partition);
    let txn = Txn::new()
        .when([
            Compare::create_revision(owner.clone(), CompareOp::Equal, revision(token)),
            Compare::lease(owner, CompareOp::Equal, ctx.lease()),
        ])
        .and_then([TxnOp::put(key, offset.to_string(), None)]);
    if ctx.txn(txn).await?.succeeded() {
        Ok(())
    } else {
        Err(StoreError::NotOwner)
    }
}

/// How a watch ended.
enum Watched {
    /// An event `fires` accepted, or history lost to compaction (so such an
    /// event may have been missed).
    Fired,
    /// The session the watch was set under ended (or the backend shut
    /// down): nobody waits for it any more.
    SessionEnded,
}

/// Watches `key` (a prefix if `prefix`) from revision `from` until an event
/// `fires` accepts. A broken watch is opened again from the revision after
/// the last event seen, so nothing is missed across disconnects.
async fn watch(
    ctx: &Ctx,
    key: String,
    prefix: bool,
    mut from: i64,
    mut fires: impl FnMut(&etcd_client::Event) -> bool,
) -> Watched {
    let shared = &ctx.shared;
    let session = ctx.session();
    let timeout = shared.config.request_timeout();
    loop {
        let mut options = WatchOptions::new().with_start_revision(from);
        if prefix {
            options = options.with_prefix();
        }
        shared.count(1);
        let mut client = shared.client.clone();
        let opened = tokio::select! {
            () = shared.session_ended(session) => return Watched::SessionEnded,
            opened = tokio::time::timeout(timeout, client.watch(key.clone(), Some(options))) => opened,
        };
        match opened {
            Ok(Ok(mut stream)) => loop {
                let message = tokio::select! {
                    () = shared.session_ended(session) => return Watched::SessionEnded,
                    message = stream.message() => message,
                };
                match message {
                    Ok(Some(response)) => {
                        if response.compact_revision() > 0 {
                            tracing::debug!(
                                %key,
                                compacted = response.compact_revision(),
                                "watched history compacted; reporting a change"
                            );
                            return Watched::Fired;
                        }
                        for event in response.events() {
                            if fires(event) {
                                return Watched::Fired;
                            }
                            if let Some(kv) = event.kv() {
                                from = from.max(kv.mod_revision() + 1);
                            }
                        }
                        if response.canceled() {
                            tracing::debug!(%key, reason = response.cancel_reason(), "watch canceled");
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(%key, %error, "watch broken");
                        break;
                    }
                }
            },
            Ok(Err(error)) => tracing::debug!(%key, %error, "cannot open watch"),
            Err(_) => tracing::debug!(%key, "no answer to a watch within {timeout:?}"),
        }
        tokio::select! {
            () = shared.session_ended(session) => return Watched::SessionEnded,
            () = tokio::time::sleep(WATCH_RETRY) => {}
        }
    }
}
