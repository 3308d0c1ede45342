//! Carries the core's store commands to the in-memory [`Store`], in the
//! znode layout of Kafka 0.8's ZooKeeper consumer ([`crate::records`]), and
//! turns the store's answers and watch events back into core events.
//!
//! Every command is carried out as the ZooKeeper backend carries it out, one
//! store call after another, so the simulator exercises the same races.

use super::store::{CreateMode, Op, OpError, OpResult, Stat, Store, WatchEvent};
use crate::error::{ClientError, StoreError};
use crate::protocol::{ClaimOutcome, Event, RegisterOutcome, StoreOp, StoreRequest};
use crate::records::{
    decode_registration, encode_registration, held_claim, parse_offset, Layout, Watched,
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
        StoreOp::Claim { partition } => {
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
        StoreOp::Release { partition, token } => {
            let result = delete_if_ours(store, session, &layout.owner(&partition), token, fired);
            Execution::Done(Event::ReleaseResult { id, result })
        }
        StoreOp::ReadOffset { partition } => {
            let path = layout.offset(&partition);
            let result = match store.get(&path) {
                Ok((data, _)) => parse_offset(&path, &data).map(Some),
                Err(OpError::NoNode) => Ok(None),
                Err(error) => Err(store_error(error)),
            };
            Execution::Done(Event::OffsetResult { id, result })
        }
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
        } => {
            let result = commit(store, layout, session, &partition, offset, token, fired);
            Execution::Done(Event::CommitResult { id, result })
        }
    }
}

/// How claims sent together ended ([`execute_claims`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Claims {
    /// Every record was created in one step: each claim's result event, in
    /// the order of the claims.
    Created(Vec<Event>),
    /// Refused as a whole, nothing written (a record is there, a parent is
    /// missing, a claim is not of this session): the backend sends each
    /// claim on its own.
    Refused(Vec<StoreRequest>),
    /// The session is gone: each claim's failure.
    Failed(Vec<Event>),
}

/// Carries out claims a member's step sent together, as the ZooKeeper
/// backend does: one `multi` of ephemeral creates that lands whole or not
/// at all. Watch events the store fired are appended to `fired`.
pub fn execute_claims(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    member: &MemberInfo,
    commands: Vec<StoreRequest>,
    fired: &mut Vec<WatchEvent>,
) -> Claims {
    let mut creates = Vec::with_capacity(commands.len());
    for command in &commands {
        match &command.op {
            StoreOp::Claim { partition } if command.session == session => {
                creates.push(Op::Create {
                    path: layout.owner(partition),
                    data: member.id.as_str().as_bytes().to_vec(),
                    mode: CreateMode::Ephemeral,
                })
            }
            _ => return Claims::Refused(commands),
        }
    }
    match store.multi(session, creates) {
        Ok((results, events)) => {
            fired.extend(events);
            let created = commands.iter().zip(results).map(|(command, result)| {
                let result = match result {
                    OpResult::Created(stat) => Ok(ClaimOutcome::Created {
                        token: token_of(&stat),
                    }),
                    other => Err(StoreError::Other(ClientError::message(format!(
                        "a create in a multi answered {other:?}"
                    )))),
                };
                Event::ClaimResult {
                    id: command.id,
                    result,
                }
            });
            Claims::Created(created.collect())
        }
        Err((_, OpError::SessionExpired)) => Claims::Failed(
            commands
                .into_iter()
                .map(|command| command.failed(StoreError::SessionExpired))
                .collect(),
        ),
        Err(_) => Claims::Refused(commands),
    }
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
    let stat = match store.get(path) {
        Ok((_, stat)) => stat,
        Err(OpError::NoNode) => return Ok(()),
        Err(error) => return Err(store_error(error)),
    };
    let ours = stat.ephemeral_owner == Some(session) && token.is_none_or(|t| t.0 == stat.czxid);
    if !ours {
        return Ok(());
    }
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

fn commit(
    store: &mut Store,
    layout: &Layout,
    session: SessionId,
    partition: &TopicPartition,
    offset: Offset,
    token: FencingToken,
    fired: &mut Vec<WatchEvent>,
) -> Result<(), StoreError> {
    let owner_path = layout.owner(partition);
    let owner = match store.get(&owner_path) {
        Ok((_, stat)) => stat,
        Err(OpError::NoNode) => return Err(StoreError::NotOwner),
        Err(error) => return Err(store_error(error)),
    };
    if owner.ephemeral_owner != Some(session) || owner.czxid != token.0 {
        return Err(StoreError::NotOwner);
    }
    let path = layout.offset(partition);
    let data = offset.to_string().into_bytes();
    let write = match store.exists(&path) {
        Some(stat) => Op::SetData {
            path: path.clone(),
            data,
            version: Some(stat.version),
        },
        None => {
            fired.extend(store.create_parents(session, &path).map_err(store_error)?);
            Op::Create {
                path: path.clone(),
                data,
                mode: CreateMode::Persistent,
            }
        }
    };
    // The check ties the write to the owner record as read above: only our
    // own release or the end of our session can remove it, and either makes
    // this multi fail.
    let ops = vec![
        Op::Check {
            path: owner_path,
            version: owner.version,
        },
        write,
    ];
    match store.multi(session, ops) {
        Ok((_, events)) => {
            fired.extend(events);
            Ok(())
        }
        Err((0, OpError::NoNode | OpError::BadVersion)) => Err(StoreError::NotOwner),
        Err((_, error)) => Err(store_error(error)),
    }
}
