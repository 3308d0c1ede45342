//! Carries the core's store commands to the in-memory [`Store`], in the
//! znode layout of Kafka 0.8's ZooKeeper consumer ([`crate::records`]), and
//! turns the store's answers and watch events back into core events.
//!
//! Every command is carried out as the ZooKeeper backend carries it out, one
//! store call after another, so the simulator exercises the same races.

use std::time::{Duration, Instant};

use super::store::{CreateMode, Op, OpError, OpResult, Stat, Store, WatchEvent};
use crate::error::{ClientError, StoreError};
use crate::progress::{Committed, Progress};
use crate::protocol::{ClaimOutcome, Event, RegisterOutcome, StoreOp, StoreRequest};
use crate::records::{
    decode_registration, encode_offset, encode_registration, held_claim, parse_offset, Layout,
    Watched,
};
use crate::subscription::MemberInfo;
use crate::types::{FencingToken, Offset, RequestId, SessionId, TopicPartition};

/// The result of carrying out one command.
#[derive(Clone, Debug, PartialEq)]
pub enum Execution {
    /// The command's result event.
    Done(Event),
    /// A claim found the record taken; the backend reads the owner in a
    /// second round trip ([`claim_read_owner`]) — where the original
    /// system's NodeExists → NoNode race lives.
    ReadOwner {
        /// The claim's request id.
        id: RequestId,
        /// The partition.
        partition: TopicPartition,
    },
}

fn store_error(error: OpError) -> StoreError {
    match error {
        OpError::NoNode => StoreError::NoNode,
        OpError::SessionExpired => StoreError::SessionExpired,
        other => StoreError::Other(ClientError::new(other)),
    }
}

fn token_of(stat: &Stat) -> FencingToken {
    FencingToken(stat.czxid)
}

/// Carries out `command` for the member `member` under `session`.
/// `timestamp_secs` is written into registrations.
/// Watch events the store fired along the way are appended to `fired`, for
/// the caller to deliver.
pub fn execute(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    member: &MemberInfo,
    command: StoreRequest,
    timestamp_secs: u64,
    fired: &mut Vec<WatchEvent>,
) -> Execution {
    // A command issued under another session (one that ended while the
    // command waited) must not act under this one: a claim would leave a
    // record that no member tracks.
    if command.session != session {
        return Execution::Done(command.failed(StoreError::SessionExpired));
    }
    let id = command.id;
    match command.op {
        StoreOp::Register { member: info } => {
            let result = register(store, layout, session, &info, timestamp_secs, fired);
            Execution::Done(Event::RegisterResult { id, result })
        }
        StoreOp::Deregister => {
            let path = layout.member(&member.id);
            let result = delete_if_ours(store, session, &path, None, fired);
            Execution::Done(Event::DeregisterResult { id, result })
        }
        StoreOp::WatchMembers => {
            let result = read_members(store, layout, session, fired);
            Execution::Done(Event::MembersResult { id, result })
        }
        StoreOp::Heartbeat => {
            let result = if store.session_alive(session) {
                Ok(())
            } else {
                Err(StoreError::SessionExpired)
            };
            Execution::Done(Event::HeartbeatResult { id, result })
        }
        // A single claim leaves the offset's read to the member, as the
        // ZooKeeper backend's claims do: the reads of a step go together
        // then. (A batch reads, as etcd's claims do.)
        StoreOp::Claim { partition, .. } => {
            let path = layout.owner(&partition);
            let created = store.create_parents(session, &path).and_then(|parents| {
                fired.extend(parents);
                store.create(
                    session,
                    &path,
                    member.id.as_str().as_bytes().to_vec(),
                    CreateMode::Ephemeral,
                )
            });
            match created {
                Ok((stat, events)) => {
                    fired.extend(events);
                    Execution::Done(Event::ClaimResult {
                        id,
                        result: Ok(ClaimOutcome::Created {
                            token: token_of(&stat),
                            committed: None,
                        }),
                    })
                }
                Err(OpError::NodeExists) => Execution::ReadOwner { id, partition },
                Err(error) => Execution::Done(Event::ClaimResult {
                    id,
                    result: Err(store_error(error)),
                }),
            }
        }
        StoreOp::WatchOwner { partition } => {
            let result = store
                .exists_watch(session, &layout.owner(&partition))
                .map(|stat| stat.is_some())
                .map_err(store_error);
            Execution::Done(Event::OwnerWatchResult { id, result })
        }
        StoreOp::Release {
            partition,
            token,
            commit: None,
            ..
        } => {
            let result = delete_if_ours(store, session, &layout.owner(&partition), token, fired);
            Execution::Done(Event::ReleaseResult { id, result })
        }
        StoreOp::Release {
            partition,
            token,
            commit: Some(offset),
            progress,
        } => {
            let commit = Committed { offset, progress };
            let result =
                release_committing(store, layout, session, &partition, token, &commit, fired);
            Execution::Done(Event::ReleaseResult { id, result })
        }
        StoreOp::ReadOffset { partition } => {
            let result = read_offset(store, layout, &partition);
            Execution::Done(Event::OffsetResult { id, result })
        }
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
            progress,
        } => {
            let commit_value = Committed { offset, progress };
            let result = commit(
                store,
                layout,
                session,
                &partition,
                &commit_value,
                token,
                fired,
            );
            Execution::Done(Event::CommitResult { id, result })
        }
    }
}

/// How requests sent together ended ([`execute_batch`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Batched {
    /// Carried out in one step: each request's result event, in order.
    Done(Vec<Event>),
    /// Refused as a whole, nothing written (a record is there or changed,
    /// a parent is missing, a request is not of this session): the backend
    /// sends each request on its own.
    Refused(Vec<StoreRequest>),
    /// The session is gone: each request's failure.
    Failed(Vec<Event>),
}

/// Carries out requests a member's step sent together (claims, offset
/// reads, commits or releases), as the ZooKeeper backend does: what must
/// be read is read, then every write goes in one `multi` that lands whole
/// or not at all. A commit or a release whose record is not ours is
/// decided by the read and writes nothing. Watch events the store fired
/// are appended to `fired`.
pub fn execute_batch(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    member: &MemberInfo,
    commands: Vec<StoreRequest>,
    fired: &mut Vec<WatchEvent>,
) -> Batched {
    if commands.iter().any(|c| c.session != session) {
        return Batched::Refused(commands);
    }
    if !store.session_alive(session) {
        let failed = commands
            .into_iter()
            .map(|c| c.failed(StoreError::SessionExpired));
        return Batched::Failed(failed.collect());
    }
    // Each request's result if the reads decide it, else how many of the
    // multi's operations are its own.
    let mut decided: Vec<Result<Event, usize>> = Vec::with_capacity(commands.len());
    let mut ops = Vec::new();
    for command in &commands {
        let id = command.id;
        match &command.op {
            StoreOp::Claim { partition, .. } => {
                ops.push(Op::Create {
                    path: layout.owner(partition),
                    data: member.id.as_str().as_bytes().to_vec(),
                    mode: CreateMode::Ephemeral,
                });
                decided.push(Err(1));
            }
            StoreOp::ReadOffset { partition } => {
                let result = read_offset(store, layout, partition);
                decided.push(Ok(Event::OffsetResult { id, result }));
            }
            StoreOp::CommitOffset {
                partition,
                offset,
                token,
                progress,
            } => match ours(store, session, &layout.owner(partition), Some(*token)) {
                Ok(Some(owner)) => {
                    let writes =
                        checked_commit(store, layout, partition, &owner, *offset, progress);
                    decided.push(Err(writes.len()));
                    ops.extend(writes);
                }
                Ok(None) => decided.push(Ok(Event::CommitResult {
                    id,
                    result: Err(StoreError::NotOwner),
                })),
                Err(error) => decided.push(Ok(Event::CommitResult {
                    id,
                    result: Err(error),
                })),
            },
            StoreOp::Release {
                partition,
                token,
                commit,
                progress,
            } => {
                let path = layout.owner(partition);
                match ours(store, session, &path, *token) {
                    Ok(Some(owner)) => {
                        let mut count = 1;
                        if let Some(offset) = commit {
                            // The final commit rides in the same multi,
                            // guarded as a commit is.
                            let writes =
                                checked_commit(store, layout, partition, &owner, *offset, progress);
                            count += writes.len();
                            ops.extend(writes);
                        }
                        ops.push(Op::Delete {
                            path,
                            version: Some(owner.version),
                        });
                        decided.push(Err(count));
                    }
                    Ok(None) if commit.is_some() => decided.push(Ok(Event::ReleaseResult {
                        id,
                        result: Err(not_ours(store, &path)),
                    })),
                    result => decided.push(Ok(Event::ReleaseResult {
                        id,
                        result: result.map(|_| ()),
                    })),
                }
            }
            _ => return Batched::Refused(commands),
        }
    }
    let mut results = match store.multi(session, ops) {
        Ok((results, events)) => {
            fired.extend(events);
            results.into_iter()
        }
        Err((_, OpError::SessionExpired)) => {
            let failed = commands
                .into_iter()
                .map(|c| c.failed(StoreError::SessionExpired));
            return Batched::Failed(failed.collect());
        }
        Err(_) => return Batched::Refused(commands),
    };
    let events = commands.iter().zip(decided).map(|(command, decided)| {
        let count = match decided {
            Ok(event) => return event,
            Err(count) => count,
        };
        let mine: Vec<OpResult> = results.by_ref().take(count).collect();
        let id = command.id;
        match (&command.op, mine.as_slice()) {
            (
                StoreOp::Claim {
                    partition,
                    read_offset: read,
                },
                [OpResult::Created(stat)],
            ) => Event::ClaimResult {
                id,
                result: Ok(ClaimOutcome::Created {
                    token: token_of(stat),
                    // Read at the multi that made the record, as the etcd
                    // backend reads in a batch's transaction (the ZooKeeper
                    // backend leaves it to the member, as a single claim
                    // here does: the simulator takes both ways).
                    committed: read.then(|| read_offset(store, layout, partition)),
                }),
            },
            (StoreOp::CommitOffset { .. }, _) => Event::CommitResult { id, result: Ok(()) },
            (StoreOp::Release { .. }, _) => Event::ReleaseResult { id, result: Ok(()) },
            (_, other) => command
                .clone()
                .failed(StoreError::Other(ClientError::message(format!(
                    "a multi answered {other:?}"
                )))),
        }
    });
    Batched::Done(events.collect())
}

/// The record at `path` if it belongs to `session` and, if `token` is
/// given, is that claim; `None` if it is gone or not ours.
fn ours(
    store: &Store,
    session: SessionId,
    path: &str,
    token: Option<FencingToken>,
) -> Result<Option<Stat>, StoreError> {
    match store.get(path) {
        Ok((_, stat)) => Ok((stat.ephemeral_owner == Some(session)
            && token.is_none_or(|t| t.0 == stat.czxid))
        .then_some(stat)),
        Err(OpError::NoNode) => Ok(None),
        Err(error) => Err(store_error(error)),
    }
}

/// Why a release carrying a commit found the owner record at `path` not
/// this claim's: gone ([`StoreError::NoNode`]), or another's
/// ([`StoreError::NotOwner`]).
fn not_ours(store: &Store, path: &str) -> StoreError {
    match store.exists(path) {
        Some(_) => StoreError::NotOwner,
        None => StoreError::NoNode,
    }
}

/// The operations of a commit of `offset` of `partition` with `progress`,
/// under the owner record as read (`owner`): that record checked at its
/// version first, which ties the writes to it (only our own release or the
/// end of our session can remove it, and either makes the multi fail at
/// index 0); then the offset and the progress record, each record's data
/// set at the version it has, or created if there is none (its parent
/// must exist, or the multi they go in is refused); an empty progress
/// deletes the record there is.
fn checked_commit(
    store: &Store,
    layout: &Layout,
    partition: &TopicPartition,
    owner: &Stat,
    offset: Offset,
    progress: &Progress,
) -> Vec<Op> {
    let write = |path: String, data: Vec<u8>| match store.exists(&path) {
        Some(stat) => Op::SetData {
            path,
            data,
            version: Some(stat.version),
        },
        None => Op::Create {
            path,
            data,
            mode: CreateMode::Persistent,
        },
    };
    let mut writes = vec![
        Op::Check {
            path: layout.owner(partition),
            version: owner.version,
        },
        write(layout.offset(partition), encode_offset(offset)),
    ];
    let path = layout.progress(partition);
    if !progress.is_empty() {
        writes.push(write(path, progress.encode(offset)));
    } else if let Some(stat) = store.exists(&path) {
        // A progress record of an earlier commit must not outlive it: an
        // offset written again later would make it count anew.
        writes.push(Op::Delete {
            path,
            version: Some(stat.version),
        });
    }
    writes
}

/// Creates the parents of the records a commit of `progress` writes
/// that are missing, so that its `multi` can create the records.
fn commit_parents(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    partition: &TopicPartition,
    progress: &Progress,
    fired: &mut Vec<WatchEvent>,
) -> Result<(), StoreError> {
    let mut paths = vec![layout.offset(partition)];
    if !progress.is_empty() {
        paths.push(layout.progress(partition));
    }
    for path in paths {
        if store.exists(&path).is_none() {
            fired.extend(store.create_parents(session, &path).map_err(store_error)?);
        }
    }
    Ok(())
}

/// Reads the committed offset of `partition`, with the progress record
/// written beside it.
fn read_offset(
    store: &Store,
    layout: &Layout,
    partition: &TopicPartition,
) -> Result<Option<Committed>, StoreError> {
    let path = layout.offset(partition);
    let offset = match store.get(&path) {
        Ok((data, _)) => parse_offset(&path, &data)?,
        Err(OpError::NoNode) => return Ok(None),
        Err(error) => return Err(store_error(error)),
    };
    let path = layout.progress(partition);
    let progress = match store.get(&path) {
        Ok((data, _)) => Progress::decode(&path, &data, offset)?.unwrap_or_default(),
        Err(OpError::NoNode) => Progress::new(),
        Err(error) => return Err(store_error(error)),
    };
    Ok(Some(Committed { offset, progress }))
}

/// The second round trip of a claim that met an existing record: who holds
/// it. NoNode here is the race where the owner released between our create
/// and this read.
pub fn claim_read_owner(
    store: &Store,
    layout: &Layout,
    id: RequestId,
    partition: &TopicPartition,
) -> Event {
    let path = layout.owner(partition);
    let result = match store.get(&path) {
        Ok((data, stat)) => held_claim(&path, &data, stat.ephemeral_owner, token_of(&stat)),
        Err(error) => Err(store_error(error)),
    };
    Event::ClaimResult { id, result }
}

/// What a single store node (its own leader) vouches for when it answers a
/// request sent at `sent` with `reply`: the session renewed then
/// ([`Event::SessionRenewed`], counted at once), if the store itself
/// answered, rather than the connection failing or the session being gone.
/// Send it before the reply. A backend for a replicated store reports
/// renewals by what its requests went through instead.
pub fn renewal(sent: Instant, reply: &Event) -> Option<Event> {
    let answered = |error: Option<&StoreError>| {
        matches!(
            error,
            None | Some(StoreError::NoNode | StoreError::NotOwner | StoreError::Corrupt { .. })
        )
    };
    let by_store = match reply {
        Event::RegisterResult { result, .. } => answered(result.as_ref().err()),
        Event::DeregisterResult { result, .. } => answered(result.as_ref().err()),
        Event::MembersResult { result, .. } => answered(result.as_ref().err()),
        Event::HeartbeatResult { result, .. } => answered(result.as_ref().err()),
        Event::ClaimResult { result, .. } => answered(result.as_ref().err()),
        Event::OwnerWatchResult { result, .. } => answered(result.as_ref().err()),
        Event::OffsetResult { result, .. } => answered(result.as_ref().err()),
        Event::CommitResult { result, .. } => answered(result.as_ref().err()),
        Event::ReleaseResult { result, .. } => answered(result.as_ref().err()),
        _ => false,
    };
    by_store.then_some(Event::SessionRenewed {
        sent,
        counted_after: Duration::ZERO,
    })
}

/// Turns a store watch event into the core event it means, if any.
pub fn watch_event(layout: &Layout, event: &WatchEvent) -> Option<Event> {
    match layout.classify(&event.path)? {
        Watched::Members => Some(Event::MembersChanged),
        Watched::Owner(partition) => Some(Event::OwnerDeleted { partition }),
    }
}

fn register(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    info: &MemberInfo,
    timestamp_secs: u64,
    fired: &mut Vec<WatchEvent>,
) -> Result<RegisterOutcome, StoreError> {
    let path = layout.member(&info.id);
    fired.extend(store.create_parents(session, &path).map_err(store_error)?);
    match store.create(
        session,
        &path,
        encode_registration(info, timestamp_secs, None),
        CreateMode::Ephemeral,
    ) {
        Ok((_, events)) => {
            fired.extend(events);
            Ok(RegisterOutcome::Registered)
        }
        Err(OpError::NodeExists) => match store.get(&path) {
            Ok((_, stat)) => match stat.ephemeral_owner {
                Some(session) => Ok(RegisterOutcome::Exists { session }),
                None => Err(StoreError::Corrupt {
                    path,
                    detail: "member registration is not ephemeral".to_owned(),
                    source: None,
                }),
            },
            // Gone between the create and the read: try again.
            Err(error) => Err(store_error(error)),
        },
        Err(error) => Err(store_error(error)),
    }
}

fn read_members(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    fired: &mut Vec<WatchEvent>,
) -> Result<Vec<MemberInfo>, StoreError> {
    let ids = layout.ids();
    fired.extend(
        store
            .create_parents(session, &format!("{ids}/x"))
            .map_err(store_error)?,
    );
    let children = store.children_watch(session, &ids).map_err(store_error)?;
    let mut members = Vec::with_capacity(children.len());
    for child in children {
        // A member that left between the listing and the read is simply
        // not a member any more; an unreadable registration is left out
        // rather than guessed at (the others leave it out too).
        if let Ok((data, _)) = store.get(&format!("{ids}/{child}")) {
            if let Ok(info) = decode_registration(&child, &data) {
                members.push(info);
            }
        }
    }
    Ok(members)
}

fn delete_if_ours(
    store: &mut Store,
    session: SessionId,
    path: &str,
    token: Option<FencingToken>,
    fired: &mut Vec<WatchEvent>,
) -> Result<(), StoreError> {
    let Some(stat) = ours(store, session, path, token)? else {
        return Ok(());
    };
    // The version guards against the record changing between the read and
    // the delete.
    match store.delete(session, path, Some(stat.version)) {
        Ok(events) => {
            fired.extend(events);
            Ok(())
        }
        Err(OpError::NoNode) => Ok(()),
        Err(OpError::BadVersion) => Err(StoreError::Other(ClientError::message(
            "owner record changed during release",
        ))),
        Err(error) => Err(store_error(error)),
    }
}

/// A release carrying the claim's final commit, as the ZooKeeper backend
/// carries one out: the owner record read, then one `multi` that checks it
/// is still the record read, writes the offset and deletes the record.
/// Gone or another's, nothing is written.
fn release_committing(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    partition: &TopicPartition,
    token: Option<FencingToken>,
    commit: &Committed,
    fired: &mut Vec<WatchEvent>,
) -> Result<(), StoreError> {
    let owner_path = layout.owner(partition);
    let Some(owner) = ours(store, session, &owner_path, token)? else {
        return Err(not_ours(store, &owner_path));
    };
    commit_parents(store, layout, session, partition, &commit.progress, fired)?;
    let mut ops = checked_commit(
        store,
        layout,
        partition,
        &owner,
        commit.offset,
        &commit.progress,
    );
    ops.push(Op::Delete {
        path: owner_path,
        version: Some(owner.version),
    });
    match store.multi(session, ops) {
        Ok((_, events)) => {
            fired.extend(events);
            Ok(())
        }
        Err((0, OpError::NoNode | OpError::BadVersion)) => Err(StoreError::NotOwner),
        Err((_, error)) => Err(store_error(error)),
    }
}

fn commit(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    partition: &TopicPartition,
    commit: &Committed,
    token: FencingToken,
    fired: &mut Vec<WatchEvent>,
) -> Result<(), StoreError> {
    let owner_path = layout.owner(partition);
    let Some(owner) = ours(store, session, &owner_path, Some(token))? else {
        return Err(StoreError::NotOwner);
    };
    commit_parents(store, layout, session, partition, &commit.progress, fired)?;
    let ops = checked_commit(
        store,
        layout,
        partition,
        &owner,
        commit.offset,
        &commit.progress,
    );
    match store.multi(session, ops) {
        Ok((_, events)) => {
            fired.extend(events);
            Ok(())
        }
        Err((0, OpError::NoNode | OpError::BadVersion)) => Err(StoreError::NotOwner),
        Err((_, error)) => Err(store_error(error)),
    }
}
