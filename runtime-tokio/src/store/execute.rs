//! A store command, or a batch of them, carried out by the store's
//! operations under the session it was issued under, and answered to the
//! member with one event per command.

use std::sync::Arc;

use tenure_core::{
    ClientError, Committed, Event, RequestId, StoreError, StoreOp, StoreRequest, TopicPartition,
};

use super::shared::Shared;
use super::{MemberList, RequestKind, StoreClient, StoreOps, Watch};

/// Carries out `command` under `session` and sends its result event to the
/// member; for a watch, goes on (with the operations and the session
/// dropped, so that it holds no session open) to wait for the notification
/// and send it, unless the session ends first.
///
/// Claims, releases and commits of one partition run one at a time, in the
/// order they were submitted: a commit submitted before a release reaches
/// the store before it.
pub(crate) async fn execute<C: StoreClient>(
    shared: Arc<Shared<C>>,
    session: C::Session,
    command: StoreRequest,
) {
    let partition_turn = match &command.op {
        StoreOp::Claim { partition, .. }
        | StoreOp::Release { partition, .. }
        | StoreOp::CommitOffset { partition, .. } => Some(shared.locks.lock(partition).await),
        _ => None,
    };
    let session_id = C::session_id(&session);
    let kind = RequestKind::of(&command.op);
    shared.wire.counts().command(kind);
    let ops = shared.client.ops(&session, &shared.wire.for_kind(kind));
    drop(session);
    let id = command.id;
    let (event, watch) = match command.op {
        StoreOp::Register { member } => {
            let result = ops.register(&member).await;
            (Event::RegisterResult { id, result }, None)
        }
        StoreOp::Deregister => {
            let result = ops.deregister().await;
            (Event::DeregisterResult { id, result }, None)
        }
        StoreOp::Heartbeat => {
            let result = ops.heartbeat().await;
            (Event::HeartbeatResult { id, result }, None)
        }
        StoreOp::WatchMembers => match ops.watch_members().await {
            Ok((list, watch)) => {
                let members = report_problems(&shared, list);
                (
                    Event::MembersResult {
                        id,
                        result: Ok(members),
                    },
                    Some((watch, Event::MembersChanged)),
                )
            }
            Err(e) => (Event::MembersResult { id, result: Err(e) }, None),
        },
        StoreOp::Claim {
            partition,
            read_offset,
        } => {
            let result = ops.claim(&partition, read_offset).await;
            (Event::ClaimResult { id, result }, None)
        }
        StoreOp::WatchOwner { partition } => match ops.watch_owner(&partition).await {
            Ok((exists, watch)) => (
                Event::OwnerWatchResult {
                    id,
                    result: Ok(exists),
                },
                watch.map(|watch| (watch, Event::OwnerDeleted { partition })),
            ),
            Err(e) => (Event::OwnerWatchResult { id, result: Err(e) }, None),
        },
        StoreOp::Release {
            partition,
            token,
            commit,
            progress,
        } => {
            let commit = commit.map(|offset| Committed { offset, progress });
            let result = ops.release(&partition, token, commit.as_ref()).await;
            (Event::ReleaseResult { id, result }, None)
        }
        StoreOp::ReadOffset { partition } => {
            let result = ops.read_offset(&partition).await;
            (Event::OffsetResult { id, result }, None)
        }
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
            progress,
        } => {
            let result = ops
                .commit(&partition, &Committed { offset, progress }, token)
                .await;
            (Event::CommitResult { id, result }, None)
        }
    };
    shared.answer(event);
    if let Some((watch, notification)) = watch {
        // The watch must not keep the session open (at shutdown, say), nor
        // the partition's lock.
        drop(partition_turn);
        drop(ops);
        if fired(&shared, session_id, watch).await {
            shared.send(notification);
        }
    }
}

/// Whether `watch` fired before `session` ended. A watch that outlives its
/// session has nobody waiting for it any more: it is dropped, which
/// cancels it.
async fn fired<C: StoreClient>(
    shared: &Shared<C>,
    session: tenure_core::SessionId,
    watch: Watch,
) -> bool {
    tokio::select! {
        () = shared.session_ended(session) => false,
        fired = watch => fired,
    }
}

/// Tells the member of the problems a member list's read found, and gives
/// the members.
fn report_problems<C: StoreClient>(
    shared: &Shared<C>,
    list: MemberList,
) -> Vec<tenure_core::MemberInfo> {
    for (operation, error) in list.problems {
        shared.send(Event::StoreProblem { operation, error });
    }
    list.members
}

/// Carries out requests of one kind gathered together (at most
/// [`OPS_PER_BATCH`](super::OPS_PER_BATCH)) under `session` with the
/// `_many` methods of [`StoreOps`], and answers each with its own result
/// event. The partitions of claims, commits and releases are locked first,
/// as [`execute`] locks each.
pub(crate) async fn execute_batch<C: StoreClient>(
    shared: Arc<Shared<C>>,
    session: C::Session,
    commands: Vec<StoreRequest>,
) {
    let mut claims = Vec::new();
    let mut reads = Vec::new();
    let mut commits = Vec::new();
    let mut releases = Vec::new();
    for command in commands {
        let id = command.id;
        shared.wire.counts().command(RequestKind::of(&command.op));
        match command.op {
            StoreOp::Claim {
                partition,
                read_offset,
            } => claims.push((id, (partition, read_offset))),
            StoreOp::ReadOffset { partition } => reads.push((id, partition)),
            StoreOp::CommitOffset {
                partition,
                offset,
                token,
                progress,
            } => commits.push((id, (partition, Committed { offset, progress }, token))),
            StoreOp::Release {
                partition,
                token,
                commit,
                progress,
            } => {
                let commit = commit.map(|offset| Committed { offset, progress });
                releases.push((id, (partition, token, commit)));
            }
            op => {
                let command = StoreRequest { op, ..command };
                tracing::error!(?command, "a command that does not go in batches in a batch");
                shared.send(command.failed(StoreError::Other(ClientError::message(
                    "a command that does not go in batches in a batch",
                ))));
            }
        }
    }
    // Locked in order, so that two batches never wait for each other.
    let mut locked: Vec<&TopicPartition> = claims
        .iter()
        .map(|(_, (p, _))| p)
        .chain(commits.iter().map(|(_, (p, _, _))| p))
        .chain(releases.iter().map(|(_, (p, _, _))| p))
        .collect();
    locked.sort();
    locked.dedup();
    let mut turns = Vec::with_capacity(locked.len());
    for partition in locked {
        turns.push(shared.locks.lock(partition).await);
    }
    // Each kind's requests counted as its own.
    let ops = |kind| shared.client.ops(&session, &shared.wire.for_kind(kind));
    let (read_ops, claim_ops, commit_ops, release_ops) = (
        ops(RequestKind::ReadOffset),
        ops(RequestKind::Claim),
        ops(RequestKind::Commit),
        ops(RequestKind::Release),
    );
    drop(session);
    if !reads.is_empty() {
        let (ids, partitions) = reads.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = read_ops.read_offset_many(&partitions).await;
        answer(&shared, ids, results, "offset reads", |id, result| {
            Event::OffsetResult { id, result }
        });
    }
    // A member asks the same of all its claims; should a batch mix them,
    // each kind goes as its own batch.
    let (reading, bare): (Vec<_>, Vec<_>) = claims.into_iter().partition(|(_, (_, read))| *read);
    for (claims, read_offset) in [(reading, true), (bare, false)] {
        if claims.is_empty() {
            continue;
        }
        let (ids, partitions) = claims
            .into_iter()
            .map(|(id, (partition, _))| (id, partition))
            .unzip::<_, _, Vec<_>, Vec<_>>();
        let results = claim_ops.claim_many(&partitions, read_offset).await;
        answer(&shared, ids, results, "claims", |id, result| {
            Event::ClaimResult { id, result }
        });
    }
    if !commits.is_empty() {
        let (ids, commits) = commits.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = commit_ops.commit_many(&commits).await;
        answer(&shared, ids, results, "commits", |id, result| {
            Event::CommitResult { id, result }
        });
    }
    if !releases.is_empty() {
        let (ids, releases) = releases.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        let results = release_ops.release_many(&releases).await;
        answer(&shared, ids, results, "releases", |id, result| {
            Event::ReleaseResult { id, result }
        });
    }
}

/// Sends the result event of each of `ids`, from `results` in the same
/// order; a request the store's batch (of `what`) left unanswered fails.
fn answer<C: StoreClient, T>(
    shared: &Shared<C>,
    ids: Vec<RequestId>,
    results: Vec<Result<T, StoreError>>,
    what: &str,
    event: impl Fn(RequestId, Result<T, StoreError>) -> Event,
) {
    let mut results = results.into_iter();
    for id in ids {
        let result = results.next().unwrap_or_else(|| {
            Err(StoreError::Other(ClientError::message(format!(
                "the store's batch of {what} answered fewer than it was given"
            ))))
        });
        shared.answer(event(id, result));
    }
}
