//! The guarantees a group must keep, as checks over what the simulator and
//! the explorer both hold: the store model, the members, and the ledgers
//! they keep beside them (offsets committed, messages processed, the story
//! each application was told). Both run the same checks, so a property
//! means the same thing whether a seed or an exhaustive search breaks it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tenure_core::assignment::{self, PartitionCounts};
use tenure_core::model::store::Store;
use tenure_core::protocol::{AppEvent, Member, StoreOp};
use tenure_core::records::Layout;
use tenure_core::types::{FencingToken, MemberId, Offset, SessionId, TopicPartition};
use tenure_core::Progress;

/// One running member as the checks see it: its state machine and the
/// session its client holds.
#[derive(Clone, Copy)]
pub(crate) struct Seen<'a> {
    /// The member.
    pub member: &'a Member,
    /// The session its client holds now, if any.
    pub session: Option<SessionId>,
}

/// Whether `session` is alive and its claim `token` is the owner record of
/// `partition`: what a member must have to consume the partition.
/// The commit `op` asks for, if it is one or a release that carries one,
/// with whether its claim holds in the store as the request arrives
/// (before the store carries it out).
pub(crate) fn arriving_commit(
    store: &Store,
    layout: &Layout,
    session: SessionId,
    op: &StoreOp,
) -> Option<ArrivingCommit> {
    let (partition, offset, token, progress) = match op {
        StoreOp::CommitOffset {
            partition,
            offset,
            token,
            progress,
        }
        | StoreOp::Release {
            partition,
            commit: Some(offset),
            token: Some(token),
            progress,
        } => (partition, offset, token, progress),
        _ => return None,
    };
    let legit = owns(store, layout, session, partition, *token);
    Some(ArrivingCommit {
        partition: partition.clone(),
        offset: *offset,
        progress: progress.clone(),
        token: *token,
        legit,
    })
}

/// A commit on its way to the store ([`arriving_commit`]).
pub(crate) struct ArrivingCommit {
    pub(crate) partition: TopicPartition,
    pub(crate) offset: Offset,
    /// The progress record written with it.
    pub(crate) progress: Progress,
    pub(crate) token: FencingToken,
    /// Whether the committer owns the partition under `token` as the
    /// store has it.
    pub(crate) legit: bool,
}

/// The progress record the store holds for `partition`, as a new owner
/// reads it beside the committed offset: empty when there is none, or it
/// names another offset.
pub(crate) fn stored_progress(
    store: &Store,
    layout: &Layout,
    partition: &TopicPartition,
) -> Progress {
    let read = |path: String| store.get(&path).ok().map(|(data, _)| (path, data));
    let Some(offset) = read(layout.offset(partition))
        .and_then(|(path, data)| tenure_core::records::parse_offset(&path, &data).ok())
    else {
        return Progress::new();
    };
    read(layout.progress(partition))
        .and_then(|(path, data)| Progress::decode(&path, &data, offset).ok().flatten())
        .unwrap_or_default()
}

/// Whether `event` says the store wrote the commit its request asked for:
/// a commit's success, or that of a release that carried one (a release
/// without a commit also succeeds when it finds nothing to delete, but
/// [`arriving_commit`] names no commit for it).
pub(crate) fn stored_commit(event: &tenure_core::protocol::Event) -> bool {
    use tenure_core::protocol::Event;
    matches!(
        event,
        Event::CommitResult { result: Ok(()), .. } | Event::ReleaseResult { result: Ok(()), .. }
    )
}

pub(crate) fn owns(
    store: &Store,
    layout: &Layout,
    session: SessionId,
    partition: &TopicPartition,
    token: FencingToken,
) -> bool {
    store.session_alive(session)
        && store
            .exists(&layout.owner(partition))
            .is_some_and(|stat| stat.ephemeral_owner == Some(session) && stat.czxid == token.0)
}

/// What the properties checked after every step say of the running
/// members, each problem with the property it breaks: exclusive ownership
/// and leases within sessions.
pub(crate) fn every_step<'a>(
    store: &Store,
    layout: &Layout,
    now: Instant,
    running: impl Iterator<Item = Seen<'a>> + Clone,
) -> Vec<(&'static str, String)> {
    let owners = exclusive_ownership(store, layout, running.clone())
        .into_iter()
        .map(|problem| ("exclusive ownership", problem));
    let leases = leases_within_sessions(store, now, running)
        .into_iter()
        .map(|problem| ("lease within the session", problem));
    owners.chain(leases).collect()
}

/// Members whose lease runs past the deadline the store (the leader, on
/// an ensemble) keeps for their session, or on after the store ended it:
/// a member may hand out only until its session could end on the store.
fn leases_within_sessions<'a>(
    store: &Store,
    now: Instant,
    running: impl IntoIterator<Item = Seen<'a>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for seen in running {
        let member = seen.member;
        let (Some(session), Some(end)) = (member.session(), member.consume_deadline()) else {
            continue;
        };
        if end <= now {
            continue;
        }
        let id = &member.info().id;
        match store.session_deadline(session) {
            Some(deadline) if end <= deadline => {}
            Some(deadline) => problems.push(format!(
                "{id}: lease ends {:?} after the store's deadline for {session:?}",
                end - deadline
            )),
            None => problems.push(format!(
                "{id}: lease runs {:?} on, but the store ended {session:?}",
                end - now
            )),
        }
    }
    problems
}

/// Exclusive ownership: every partition a running member feeds its
/// application is recorded in the store as that member's live claim, with
/// the same token, and no partition is fed by two members. Returns what
/// breaks it, one line per problem.
fn exclusive_ownership<'a>(
    store: &Store,
    layout: &Layout,
    running: impl IntoIterator<Item = Seen<'a>>,
) -> Vec<String> {
    let mut fetchers: BTreeMap<TopicPartition, MemberId> = BTreeMap::new();
    let mut problems = Vec::new();
    for Seen { member, session } in running {
        for (partition, token) in member.fetching() {
            let owned = session.is_some_and(|s| owns(store, layout, s, partition, token));
            if !owned {
                let record = store.exists(&layout.owner(partition));
                problems.push(format!(
                    "{} fetches {partition} under token {token:?} but the store has {record:?} (session {session:?})",
                    member.id()
                ));
            }
            if let Some(other) = fetchers.insert(partition.clone(), member.id().clone()) {
                problems.push(format!(
                    "{partition} fetched by both {other} and {}",
                    member.id()
                ));
            }
        }
    }
    problems
}

/// Whether every partition of `counts` is owned in the store and fetched
/// by the member the assignment of the `live` members names (`strategy`,
/// by name); `Err` says which is not.
pub(crate) fn converged(
    store: &Store,
    layout: &Layout,
    strategy: &str,
    counts: &PartitionCounts,
    live: &[Seen<'_>],
) -> Result<(), String> {
    let infos: Vec<_> = live.iter().map(|seen| seen.member.info().clone()).collect();
    let strategy = assignment::by_name(strategy).ok_or("unknown strategy")?;
    let assignment = strategy.assign(&infos, counts);
    for (partition, owner) in assignment.iter() {
        let seen = live
            .iter()
            .find(|seen| seen.member.id() == owner)
            .ok_or("assigned to a missing member")?;
        let token = seen
            .member
            .fetching()
            .find(|(p, _)| *p == partition)
            .map(|(_, t)| t)
            .ok_or_else(|| format!("{partition} is not fetched by its assigned member {owner}"))?;
        let session = seen.session.ok_or("no session")?;
        if !owns(store, layout, session, partition, token) {
            return Err(format!("{partition} is not owned in the store by {owner}"));
        }
    }
    let total: u32 = counts.values().sum();
    if assignment.len() != total as usize {
        return Err(format!(
            "{} of {total} partitions assigned",
            assignment.len()
        ));
    }
    Ok(())
}

/// Checks a commit the store accepted: `commit`, written by `who` (its
/// `legit` when the committer's claim was the owner record as the commit
/// arrived). `committed` is the ledger of the highest offset committed per
/// partition (moved on here), `processed` how many times each offset of
/// the partition was processed. Returns each broken property with what
/// broke it.
pub(crate) fn commit(
    who: &MemberId,
    commit: &ArrivingCommit,
    committed: &mut BTreeMap<TopicPartition, Offset>,
    processed: &[u32],
) -> Vec<(&'static str, String)> {
    let ArrivingCommit {
        partition,
        offset,
        progress,
        token,
        legit,
    } = commit;
    let (offset, legit) = (*offset, *legit);
    let mut problems = Vec::new();
    if !legit {
        problems.push((
            "fenced offsets",
            format!(
                "{who} committed {offset} for {partition} under token {token:?} without owning it"
            ),
        ));
    }
    let previous = committed.get(partition).copied().unwrap_or(0);
    if offset < previous {
        problems.push((
            "monotone offsets",
            format!("{who} moved {partition} back from {previous} to {offset}"),
        ));
    }
    let upto = usize::try_from(offset).unwrap_or(0);
    if let Some(missing) = (0..upto).find(|&o| processed.get(o).is_none_or(|&c| c == 0)) {
        problems.push((
            "no lost messages",
            format!(
                "{who} committed {offset} for {partition} but offset {missing} was never processed"
            ),
        ));
    }
    // What the progress record names done above the offset, a next owner
    // skips: it must have been processed.
    let mut skipped = progress.done().iter().flat_map(Clone::clone);
    if let Some(missing) = skipped.find(|&o| processed.get(o as usize).is_none_or(|&c| c == 0)) {
        problems.push((
            "no lost messages",
            format!(
                "{who} committed {offset} for {partition} with {missing} done above it, but it was never processed"
            ),
        ));
    }
    committed.insert(partition.clone(), offset.max(previous));
    problems
}

/// What a member's application events have told so far: the claims it is
/// making and the claims it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Story {
    /// Partitions the member's events say it is claiming.
    pub claiming: BTreeSet<TopicPartition>,
    /// Claims the member's events say it holds.
    pub held: BTreeMap<TopicPartition, FencingToken>,
}

/// Checks that `event`, told by `who`, follows from its `story` (every
/// claim begins, then takes effect or is abandoned; only a held claim is
/// committed under, released or lost), and that a claim never takes effect
/// with a token below the `newest` one any member's claim of that
/// partition took effect with. Moves both on; `Err` says what is wrong.
pub(crate) fn story(
    story: &mut Story,
    newest: &mut BTreeMap<TopicPartition, FencingToken>,
    who: &MemberId,
    event: &AppEvent,
) -> Result<(), String> {
    let wrong = match event {
        AppEvent::Claiming { partition } => (story.held.contains_key(partition)
            || !story.claiming.insert(partition.clone()))
        .then(|| format!("{who} began claiming {partition} while claiming or holding it")),
        AppEvent::Claimed {
            partition, token, ..
        } => {
            if !story.claiming.remove(partition) {
                Some(format!("{who} claimed {partition} without claiming it"))
            } else {
                story.held.insert(partition.clone(), *token);
                let newest = newest.entry(partition.clone()).or_insert(FencingToken(0));
                if *token < *newest {
                    Some(format!(
                        "{who} claimed {partition} with token {} after token {}",
                        token.0, newest.0
                    ))
                } else {
                    *newest = *token;
                    None
                }
            }
        }
        AppEvent::ClaimAbandoned { partition } => (!story.claiming.remove(partition))
            .then(|| format!("{who} abandoned a claim of {partition} it was not making")),
        AppEvent::OffsetRead {
            partition, token, ..
        }
        | AppEvent::Committing {
            partition, token, ..
        }
        | AppEvent::Committed {
            partition, token, ..
        }
        | AppEvent::CommitFenced {
            partition, token, ..
        }
        | AppEvent::CommitFailed {
            partition, token, ..
        }
        | AppEvent::Releasing { partition, token } => (story.held.get(partition) != Some(token))
            .then(|| format!("{who} reported {event:?} without holding that claim")),
        AppEvent::Released { partition, token } | AppEvent::Lost { partition, token } => {
            (story.held.remove(partition) != Some(*token))
                .then(|| format!("{who} reported {event:?} without holding that claim"))
        }
        AppEvent::Problem(_) => None,
        // A new kind of event: the story it tells must be checked too.
        other => Some(format!(
            "{who} told an event the checker does not know: {other:?}"
        )),
    };
    wrong.map_or(Ok(()), Err)
}

/// Timers make progress: once woken at `now`, a member must not ask to be
/// woken before `now` again (it would spin). `Err` says when it asks for.
pub(crate) fn timers_progress(member: &Member, now: Instant) -> Result<(), String> {
    match member.poll_timeout().filter(|t| *t < now) {
        Some(t) => Err(format!(
            "{} asks to be woken at {t:?}, before now {now:?}",
            member.id()
        )),
        None => Ok(()),
    }
}
