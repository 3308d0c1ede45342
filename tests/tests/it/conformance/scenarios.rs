//! The scenarios, each run unchanged on every store. Where stores part ways
//! a scenario branches on the store's [`Quirks`](super::stores::Quirks),
//! whose fields say which store does what.
//!
//! Fencing tokens are the owner node's czxid on ZooKeeper, the owner key's
//! create_revision on etcd and the model's zxid in memory: only their order
//! is compared, never their values. Likewise session ids (ZooKeeper session
//! ids, etcd lease ids, the model's counter) are only compared for equality.

use tenure::core::{
    ClaimOutcome, Committed, Event, FencingToken, Offset, Progress, RegisterOutcome, SessionId,
    StoreError, StoreOp, StoreRequest,
};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::harness::{partition, QUIET};
use super::stores::{Store, Stored, Which};

const G: &str = super::harness::GROUP;

fn no_members() -> Vec<String> {
    Vec::new()
}

/// Registration: a record of our own; registering again meets it under our
/// own session; a registration after a watch fires it once; deregistering
/// removes it.
pub async fn registration(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;

    assert_eq!(
        a.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    // The record is Kafka 0.8's registration JSON, under a's session (an
    // ephemeral znode, a key on a's lease).
    let record = store
        .record(G, Which::Member("a"))
        .await
        .unwrap_or_else(|| panic!("{name}: a's registration is written"));
    assert_eq!(
        record.session,
        Some(a.session),
        "{name}: a's, under its session"
    );
    let json = String::from_utf8(record.data).expect("UTF-8");
    assert!(
        json.contains("\"subscription\":{\"t\":1}"),
        "{name}: Kafka 0.8 registration JSON: {json}"
    );
    // Registering again (as after a lost reply) meets our own record.
    assert_eq!(
        a.register().await,
        Ok(RegisterOutcome::Exists { session: a.session }),
        "{name}: a second registration names our own session"
    );
    assert_eq!(a.watch_members().await, ["a"], "{name}");
    assert!(!a.has(|e| matches!(e, Event::MembersChanged)), "{name}");

    assert_eq!(
        b.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    a.members_changed().await;
    assert_eq!(b.watch_members().await, ["a", "b"], "{name}");

    // Deregistering removes the record and fires b's own watch; a, which
    // has not watched again, hears nothing more: it heard one
    // MembersChanged for two changes.
    assert_eq!(b.deregister().await, Ok(()), "{name}");
    b.members_changed().await;
    a.assert_quiet("MembersChanged without a new watch", |e| {
        matches!(e, Event::MembersChanged)
    })
    .await;
    assert_eq!(a.watch_members().await, ["a"], "{name}");
    // Deregistering what is gone is fine.
    assert_eq!(b.deregister().await, Ok(()), "{name}");

    a.shutdown().await;
    b.shutdown().await;
}

fn assert_held_by(
    name: &str,
    outcome: Result<ClaimOutcome, StoreError>,
    owner: &str,
    session: SessionId,
    token: FencingToken,
) {
    match outcome {
        Ok(ClaimOutcome::Held {
            owner: held_by,
            session: held_under,
            token: held,
        }) => {
            assert_eq!(held_by.as_ref().map(|m| m.as_str()), Some(owner), "{name}");
            assert_eq!(
                held_under, session,
                "{name}: held under the owner's session"
            );
            assert_eq!(held, token, "{name}: the record's token is the claim's");
        }
        other => panic!("{name}: a claim of a held partition answered {other:?}"),
    }
}

/// Two members race for a partition: one creates the record, the other
/// learns who holds it, watches it, and takes over once it is released.
pub async fn claim_race(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;

    let token = a.claim_created(0).await;
    assert_eq!(store.owner(G, 0).await.as_deref(), Some("a"), "{name}");
    assert_owner_record(store, 0, "a", a.session, token).await;
    assert_held_by(name, b.claim(0).await, "a", a.session, token);
    // Our own claim again (a lost reply's reconciliation): held by us.
    assert_held_by(name, a.claim(0).await, "a", a.session, token);
    assert_eq!(b.watch_owner(0).await, Ok(true), "{name}");

    // Releases that do not match the claim leave it alone: the owner's
    // session with another token, another session with the right token or
    // none.
    assert_eq!(
        a.release(0, Some(FencingToken(token.0 + 1))).await,
        Ok(()),
        "{name}"
    );
    assert_eq!(b.release(0, Some(token)).await, Ok(()), "{name}");
    assert_eq!(b.release(0, None).await, Ok(()), "{name}");
    b.assert_quiet("OwnerDeleted after releases that do not match", |e| {
        matches!(e, Event::OwnerDeleted { .. })
    })
    .await;
    assert_eq!(store.owner(G, 0).await.as_deref(), Some("a"), "{name}");

    assert_eq!(a.release(0, Some(token)).await, Ok(()), "{name}");
    b.owner_deleted(0).await;
    assert_eq!(store.owner(G, 0).await, None, "{name}");
    // Releasing what is gone is fine.
    assert_eq!(a.release(0, Some(token)).await, Ok(()), "{name}");

    let next = b.claim_created(0).await;
    assert!(
        next > token,
        "{name}: a later claim's token is larger: {next:?} after {token:?}"
    );
    assert_eq!(store.owner(G, 0).await.as_deref(), Some("b"), "{name}");

    a.shutdown().await;
    b.shutdown().await;
}

/// Commits are fenced by the claim: only the owner's session with the
/// claim's token writes, and not after the release.
pub async fn fenced_commits(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;

    assert_eq!(
        a.read_offset(0).await,
        Ok(None),
        "{name}: nothing committed"
    );
    let token = a.claim_created(0).await;
    assert_eq!(a.commit(0, 10, token).await, Ok(()), "{name}");
    assert_eq!(a.commit(0, 20, token).await, Ok(()), "{name}");
    assert_eq!(a.read_offset(0).await, Ok(Some(20)), "{name}");
    assert_eq!(b.read_offset(0).await, Ok(Some(20)), "{name}");

    // Not the owner: another session, even with the right token...
    assert_eq!(
        b.commit(0, 99, token).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    // ... the owner's session with another claim's token...
    assert_eq!(
        a.commit(0, 99, FencingToken(token.0 + 1)).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    // ... a partition nobody claimed...
    assert_eq!(
        a.commit(5, 1, token).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    // ... and the owner after its release.
    assert_eq!(a.release(0, Some(token)).await, Ok(()), "{name}");
    assert_eq!(
        a.commit(0, 99, token).await,
        Err(StoreError::NotOwner),
        "{name}"
    );

    assert_eq!(b.read_offset(0).await, Ok(Some(20)), "{name}");
    assert_eq!(b.read_offset(5).await, Ok(None), "{name}");
    assert_eq!(store.committed(G, 0).await, Some(20), "{name}");

    a.shutdown().await;
    b.shutdown().await;
}

/// A progress record (what is done above the committed offset) is written
/// in the same fenced write as the offset, read back with it, by a commit
/// and by a release's final commit, one partition or many; a commit with
/// nothing done above it deletes the record, so that an earlier record
/// never counts for a later commit of the same offset.
pub async fn progress_records(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;
    let progress = |done: &[i64], failed: &[i64]| {
        let mut progress = Progress::new();
        for &offset in done {
            progress.mark_done(offset);
        }
        for &offset in failed {
            progress.fail(offset);
        }
        progress
    };
    let committed = |offset, progress| Ok(Some(Committed { offset, progress }));

    let token = a.claim_created(0).await;
    let first = progress(&[12, 13, 15], &[11, 11, 14]);
    assert_eq!(
        a.commit_progress(0, 10, token, first.clone()).await,
        Ok(()),
        "{name}"
    );
    assert_eq!(
        a.read_committed(0).await,
        committed(10, first.clone()),
        "{name}"
    );
    assert_eq!(
        b.read_committed(0).await,
        committed(10, first.clone()),
        "{name}"
    );

    // Fenced as the offset is: another session writes neither.
    assert_eq!(
        b.commit_progress(0, 20, token, progress(&[22], &[])).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    assert_eq!(
        b.read_committed(0).await,
        committed(10, first.clone()),
        "{name}"
    );

    // Nothing done above the next offset: the record goes, and the
    // offset written again later finds none.
    assert_eq!(a.commit(0, 16, token).await, Ok(()), "{name}");
    assert_eq!(
        a.read_committed(0).await,
        committed(16, Progress::new()),
        "{name}"
    );
    assert_eq!(a.commit(0, 10, token).await, Ok(()), "{name}");
    assert_eq!(
        b.read_committed(0).await,
        committed(10, Progress::new()),
        "{name}: the record of an earlier commit outlived it"
    );

    // A release's final commit carries one, and a claim that reads the
    // offset reads it too.
    let last = progress(&[30, 31], &[29]);
    assert_eq!(
        a.release_progressing(0, token, 28, last.clone()).await,
        Ok(()),
        "{name}"
    );
    match b.claim_reading(0).await {
        Ok(ClaimOutcome::Created {
            committed: None, ..
        }) => {}
        Ok(ClaimOutcome::Created {
            committed: Some(read),
            ..
        }) => assert_eq!(
            read,
            committed(28, last.clone()),
            "{name}: read with the claim"
        ),
        other => panic!("{name}: a claim of a free partition answered {other:?}"),
    }
    assert_eq!(
        b.read_committed(0).await,
        committed(28, last.clone()),
        "{name}"
    );

    // Many partitions in one step: each its own record, or none.
    let tokens: Vec<FencingToken> = {
        let mut tokens = Vec::new();
        for p in 1..=3 {
            tokens.push(a.claim_created(p).await);
        }
        tokens
    };
    let done = |p: u32| match p {
        2 => Progress::new(),
        p => progress(&[i64::from(p) * 10 + 2], &[]),
    };
    let commits = (1..=3u32)
        .zip(&tokens)
        .map(|(p, token)| StoreOp::CommitOffset {
            partition: partition(p),
            offset: i64::from(p) * 10,
            token: *token,
            progress: done(p),
        });
    for (p, result) in (1..=3u32).zip(a.together(commits).await) {
        assert!(
            matches!(result, Event::CommitResult { result: Ok(()), .. }),
            "{name}: partition {p}'s commit in a batch answered {result:?}"
        );
    }
    let reads = b.read_offsets_together(1..=3).await;
    for (p, read) in (1..=3u32).zip(reads) {
        let Event::OffsetResult { result, .. } = read else {
            panic!("{name}: partition {p}'s offset read answered {read:?}");
        };
        assert_eq!(
            result,
            committed(i64::from(p) * 10, done(p)),
            "{name}: partition {p}"
        );
    }

    a.shutdown().await;
    b.shutdown().await;
}

/// A member's session ends on the server while the member lives on: its
/// records go (and the watchers hear it), its claim no longer guards a
/// commit, and its backend learns the session expired.
pub async fn expiry(store: &dyn Store) {
    let name = store.name();
    let quirks = store.quirks();
    let mut a = store.mortal("a").await;
    let mut b = store.member("b").await;
    let first = a.session;

    assert_eq!(
        a.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    let token = a.claim_created(0).await;
    assert_eq!(a.commit(0, 5, token).await, Ok(()), "{name}");
    assert_eq!(b.watch_owner(0).await, Ok(true), "{name}");
    assert_eq!(b.watch_members().await, ["a"], "{name}");

    a.end_session().await;

    // The server ends the session: a's ephemeral records go, and b hears
    // about both.
    b.owner_deleted(0).await;
    b.members_changed().await;
    assert_eq!(b.watch_members().await, no_members(), "{name}");
    assert_eq!(store.owner(G, 0).await, None, "{name}");

    // a's backend learns it (memory: when its keep-alive runs again;
    // ZooKeeper: concluded from the silence; etcd: the next keep-alive).
    a.wait_for("SessionExpired", |e| {
        matches!(e, Event::SessionExpired).then_some(())
    })
    .await;

    // A commit under the old session with the old token writes nothing.
    let commit = StoreRequest {
        id: a.id(),
        session: first,
        op: StoreOp::CommitOffset {
            partition: partition(0),
            offset: 99,
            token,
            progress: Progress::new(),
        },
    };
    let id = commit.id;
    a.backend.submit(commit);
    let fenced = |answer: &Event| {
        matches!(
            answer,
            Event::CommitResult {
                result: Err(StoreError::NotOwner | StoreError::SessionExpired),
                ..
            }
        )
    };
    if quirks.answers_commands_after_expiry {
        let answer = a.result(id).await;
        assert!(
            fenced(&answer),
            "{name}: a commit under an expired session answered {answer:?}"
        );
    } else {
        // Memory: once the store has reaped the session the backend drops
        // the command without an answer, contrary to the contract of
        // `Backend` (which wants `SessionExpired`): its keep-alive, the last
        // holder of the event channel, ended with the session.
        let answer = a
            .wait_within(QUIET, |e| (e.request_id() == Some(id)).then(|| e.clone()))
            .await;
        assert_eq!(answer, None, "{name}: the quirk is gone; update `Quirks`");
        assert!(
            a.events_closed(),
            "{name}: the backend can still send events; update `Quirks`"
        );
    }

    a.restore().await;
    if quirks.reopens_session_after_expiry {
        let second = a
            .wait_for("SessionEstablished after the expiry", |e| match e {
                Event::SessionEstablished { session } => Some(*session),
                _ => None,
            })
            .await;
        assert_ne!(second, first, "{name}: a new session");
        assert!(
            !a.has(|e| matches!(e, Event::SessionResumed)),
            "{name}: an expired session does not resume"
        );
        a.session = second;
        assert_eq!(
            a.register().await,
            Ok(RegisterOutcome::Registered),
            "{name}: the old registration went with the old session"
        );
        assert_eq!(a.heartbeat().await, Ok(()), "{name}");
    }
    // Else (memory): the backend stays without a session; its event channel
    // is closed (asserted above), so no `SessionEstablished` can follow.

    assert_eq!(
        b.read_offset(0).await,
        Ok(Some(5)),
        "{name}: nothing written"
    );
    assert_eq!(store.committed(G, 0).await, Some(5), "{name}");
    let next = b.claim_created(0).await;
    assert!(next > token, "{name}: {next:?} after {token:?}");

    a.shutdown().await;
    b.shutdown().await;
}

/// Watches are one-shot: an owner watch on an absent record answers false,
/// a member watch fires once for any number of changes.
pub async fn watches(store: &dyn Store) {
    let name = store.name();
    let quirks = store.quirks();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;

    assert_eq!(
        a.watch_owner(0).await,
        Ok(false),
        "{name}: an absent record"
    );
    assert_eq!(a.watch_members().await, no_members(), "{name}");

    assert_eq!(
        b.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    a.members_changed().await;
    // A second change without a new watch: nothing.
    assert_eq!(b.deregister().await, Ok(()), "{name}");
    a.assert_quiet("a second MembersChanged without a new watch", |e| {
        matches!(e, Event::MembersChanged)
    })
    .await;

    // The record a watched while absent is created.
    let token = b.claim_created(0).await;
    if quirks.absent_owner_watch_fires_on_create {
        // ZooKeeper and the model: the `exists` watch set on the absent
        // node fires on its creation, which the backend reports as
        // `OwnerDeleted` (the core takes it as "look again").
        a.owner_deleted(0).await;
    } else {
        // etcd: no watch was set.
        a.assert_quiet("OwnerDeleted for a record watched while absent", |e| {
            matches!(e, Event::OwnerDeleted { .. })
        })
        .await;
    }

    // A watch on a present record fires once.
    assert_eq!(a.watch_owner(0).await, Ok(true), "{name}");
    assert_eq!(b.release(0, Some(token)).await, Ok(()), "{name}");
    a.owner_deleted(0).await;
    let token = b.claim_created(0).await;
    assert_eq!(b.release(0, Some(token)).await, Ok(()), "{name}");
    a.assert_quiet("OwnerDeleted without a new watch", |e| {
        matches!(e, Event::OwnerDeleted { .. })
    })
    .await;

    a.shutdown().await;
    b.shutdown().await;
}

/// Data tenure cannot read: an offset is reported as corrupt, naming the
/// record, and left alone; a registration is left out of the member list.
pub async fn corrupt_data(store: &dyn Store) {
    let name = store.name();
    let quirks = store.quirks();
    store.corrupt_offset(G, 0).await;
    let mut a = store.member("a").await;

    let expected_path = store.offset_path(G, 0);
    for attempt in ["first", "second"] {
        match a.read_offset(0).await {
            Err(StoreError::Corrupt {
                path,
                detail,
                source,
            }) => {
                assert_eq!(path, expected_path, "{name}: the error names the record");
                // The parser's own error is kept as the cause.
                let cause = source.unwrap_or_else(|| panic!("{name}: a cause"));
                assert!(
                    cause
                        .get_ref()
                        .downcast_ref::<std::num::ParseIntError>()
                        .is_some(),
                    "{name}: {cause:?}"
                );
                // The detail shows the data: still the garbage written, so
                // the first read left it as it was.
                assert!(
                    detail.contains("garbage"),
                    "{name}: {attempt} read, detail {detail:?}"
                );
            }
            other => panic!("{name}: {attempt} read of a corrupt offset answered {other:?}"),
        }
    }
    assert_eq!(
        store.committed(G, 0).await,
        None,
        "{name}: still unreadable"
    );

    assert_eq!(
        a.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    assert_eq!(a.watch_members().await, ["a"], "{name}");
    store.corrupt_registration(G, "garbage").await;
    a.members_changed().await;
    assert_eq!(
        a.watch_members().await,
        ["a"],
        "{name}: an unreadable registration is left out"
    );
    let reported = |e: &Event| match e {
        Event::StoreProblem {
            error: StoreError::Corrupt { path, .. },
            ..
        } => Some(path.clone()),
        _ => None,
    };
    if quirks.reports_corrupt_registrations {
        let path = a
            .wait_for("StoreProblem for the registration", reported)
            .await;
        assert!(path.ends_with("/garbage"), "{name}: reported {path}");
    } else {
        // Memory: the adapter leaves it out silently. It answers
        // synchronously, so a report would have come before the result.
        assert!(
            !a.has(|e| reported(e).is_some()),
            "{name}: unexpected StoreProblem"
        );
    }

    a.shutdown().await;
}

/// Commands issued under a session that is not the backend's fail as
/// expired and change nothing.
pub async fn stale_session(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.member("b").await;
    let token = a.claim_created(1).await;

    // A session that never was this backend's, and another member's.
    for stale in [SessionId(a.session.0 ^ 1), b.session] {
        if stale == a.session {
            continue;
        }
        let commands = [
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::Register {
                    member: a.info.clone(),
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::WatchMembers,
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::Claim {
                    partition: partition(0),
                    read_offset: false,
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::WatchOwner {
                    partition: partition(1),
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::CommitOffset {
                    partition: partition(1),
                    offset: 7,
                    token,
                    progress: Progress::new(),
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::Release {
                    partition: partition(1),
                    token: Some(token),
                    commit: None,
                    progress: Progress::new(),
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::ReadOffset {
                    partition: partition(1),
                },
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::Heartbeat,
            },
            StoreRequest {
                id: a.id(),
                session: stale,
                op: StoreOp::Deregister,
            },
        ];
        for command in commands {
            let id = command.id;
            let expected = command.clone().failed(StoreError::SessionExpired);
            a.backend.submit(command.clone());
            assert_eq!(a.result(id).await, expected, "{name}: {command:?}");
        }
    }

    // Nothing was written: no claim of 0, a's claim of 1 still there, no
    // offset, no registration.
    assert_eq!(store.owner(G, 0).await, None, "{name}");
    assert_eq!(store.owner(G, 1).await.as_deref(), Some("a"), "{name}");
    assert_eq!(store.committed(G, 1).await, None, "{name}");
    assert_eq!(b.watch_members().await, no_members(), "{name}");
    // The backend's own session is untouched.
    assert_eq!(a.heartbeat().await, Ok(()), "{name}");
    assert_eq!(a.commit(1, 7, token).await, Ok(()), "{name}");
    assert_eq!(store.committed(G, 1).await, Some(7), "{name}");

    a.shutdown().await;
    b.shutdown().await;
}

/// The member list after changes between two reads, whatever a backend
/// keeps of its last read to read less the next time: a registration
/// deleted and written anew under the same id is read anew, and one
/// deleted while another is made is left out.
pub async fn member_list(store: &dyn Store) {
    let name = store.name();
    let mut a = store.member("a").await;
    let mut b = store.mortal("b").await;
    let mut c = store.member("c").await;
    let mut d = store.member("d").await;

    for member in [&mut a, &mut b, &mut c] {
        assert_eq!(
            member.register().await,
            Ok(RegisterOutcome::Registered),
            "{name}"
        );
    }
    assert_eq!(a.watch_members().await, ["a", "b", "c"], "{name}");

    // b's session ends, and a record that does not decode takes its place
    // before a reads again: the list has the same names as before, but b's
    // registration is not the one read before.
    b.end_session().await;
    a.members_changed().await;
    store.corrupt_registration(G, "b").await;
    assert_eq!(
        a.watch_members().await,
        ["a", "c"],
        "{name}: b's registration was made anew, unreadable"
    );

    // One leaves and another joins between two reads.
    assert_eq!(c.deregister().await, Ok(()), "{name}");
    a.members_changed().await;
    assert_eq!(
        d.register().await,
        Ok(RegisterOutcome::Registered),
        "{name}"
    );
    assert_eq!(
        a.watch_members().await,
        ["a", "d"],
        "{name}: c left, d joined"
    );

    // A leave alone.
    assert_eq!(d.deregister().await, Ok(()), "{name}");
    a.members_changed().await;
    assert_eq!(a.watch_members().await, ["a"], "{name}: d left");

    b.restore().await;
    for member in [a, b, c, d] {
        member.shutdown().await;
    }
}

/// The claim's record as the store holds it: the member's id, under its
/// session, created by the claim whose token it is.
async fn assert_owner_record(
    store: &dyn Store,
    p: u32,
    member: &str,
    session: SessionId,
    token: FencingToken,
) {
    let name = store.name();
    match store.record(G, Which::Owner(p)).await {
        Some(Stored {
            data,
            session: held_under,
            created,
        }) => {
            assert_eq!(
                data,
                member.as_bytes(),
                "{name}: partition {p}'s owner record names {member}"
            );
            assert_eq!(
                held_under,
                Some(session),
                "{name}: partition {p}'s record is {member}'s session's"
            );
            assert_eq!(
                created, token,
                "{name}: partition {p}'s token is its record's creation"
            );
        }
        None => panic!("{name}: partition {p} has no owner record"),
    }
}

/// Requests counted since `before`, where the store counts them.
fn sent(counter: &Option<Arc<AtomicU64>>, before: u64) -> u64 {
    counter
        .as_ref()
        .map_or(0, |c| c.load(Ordering::Relaxed) - before)
}

fn count(counter: &Option<Arc<AtomicU64>>) -> u64 {
    counter.as_ref().map_or(0, |c| c.load(Ordering::Relaxed))
}

/// The requests of one kind a step decides go to the store together, in
/// batches of at most 120 (and, where the store counts them, in as few
/// requests as its quirks allow), each with its own outcome: a partition
/// held by another member fails its own claim only, an offset that does not
/// parse fails its own read only, a commit under a stale token or of a
/// partition that is not ours fails alone and writes nothing, and their
/// releases leave those two alone and delete the others.
pub async fn batches(store: &dyn Store) {
    let name = store.name();
    let bounds = store.quirks().batch_requests;
    let (mut a, requests) = store.counted("a").await;
    let mut b = store.member("b").await;
    // b holds partition 5 (its claim also makes the owners' parents).
    let held = b.claim_created(5).await;

    // 300 claims in one step: more than two batches hold.
    let before = count(&requests);
    let results = a.claim_together(0..300).await;
    let claims = sent(&requests, before);
    let mut tokens = Vec::with_capacity(300);
    for (p, result) in (0..300u32).zip(results) {
        let Event::ClaimResult { result, .. } = result else {
            panic!("{name}: partition {p}'s claim answered {result:?}");
        };
        if p == 5 {
            assert_held_by(name, result, "b", b.session, held);
            tokens.push(held);
            continue;
        }
        match result {
            Ok(ClaimOutcome::Created { token, .. }) => {
                assert_owner_record(store, p, "a", a.session, token).await;
                tokens.push(token);
            }
            other => panic!("{name}: partition {p}'s claim answered {other:?}"),
        }
    }
    store.put_offset(G, 42, b"42").await;
    store.put_offset(G, 7, b"garbage").await;

    // Their offsets in one step: none, a number, or corrupt, each its own.
    let before = count(&requests);
    let reads = a.read_offsets_together(0..300).await;
    let offset_reads = sent(&requests, before);
    for (p, read) in (0..300u32).zip(reads) {
        let Event::OffsetResult { result, .. } = read else {
            panic!("{name}: partition {p}'s offset read answered {read:?}");
        };
        match (p, result) {
            (42, Ok(Some(Committed { offset: 42, .. }))) | (7, Err(StoreError::Corrupt { .. })) => {
            }
            (p, Ok(None)) if p != 42 && p != 7 => {}
            (p, other) => panic!("{name}: partition {p}'s offset read answered {other:?}"),
        }
    }

    // 131 commits (two batches): partition 3 under a token that is not its
    // claim's, and partition 5, b's, under one of a's.
    let stale = |p: u32| {
        let token = tokens[p as usize];
        if p == 3 {
            FencingToken(token.0 + 1)
        } else {
            token
        }
    };
    let commits = (0..130u32)
        .filter(|p| *p != 5)
        .map(|p| (p, i64::from(p) + 10, stale(p)))
        .chain([(5, 15, tokens[0])])
        .chain([(130, 140, tokens[130])]);
    // The partitions in the order of the commits above.
    let committed: Vec<u32> = (0..130u32).filter(|p| *p != 5).chain([5, 130]).collect();
    let before = count(&requests);
    let results = a.commit_together(commits).await;
    let commit_requests = sent(&requests, before);
    for (p, result) in committed.iter().copied().zip(results) {
        let Event::CommitResult { result, .. } = result else {
            panic!("{name}: partition {p}'s commit answered {result:?}");
        };
        match p {
            3 | 5 => {
                assert_eq!(
                    result,
                    Err(StoreError::NotOwner),
                    "{name}: partition {p}'s commit"
                );
                assert_eq!(
                    store.committed(G, p).await,
                    None,
                    "{name}: partition {p}'s offset is not written"
                );
            }
            _ => {
                assert_eq!(result, Ok(()), "{name}: partition {p}'s commit");
                assert_eq!(
                    store.committed(G, p).await,
                    Some(i64::from(p) + 10),
                    "{name}: partition {p}'s offset"
                );
            }
        }
    }

    // Their releases: 3 under the stale token and 5 not a's are left alone.
    let releases = committed
        .iter()
        .map(|&p| (p, (p != 5).then(|| stale(p)), None));
    let before = count(&requests);
    let results = a.release_together(releases).await;
    let release_requests = sent(&requests, before);
    for (p, result) in committed.iter().copied().zip(results) {
        assert!(
            matches!(result, Event::ReleaseResult { result: Ok(()), .. }),
            "{name}: partition {p}'s release answered {result:?}"
        );
        let owner = store
            .record(G, Which::Owner(p))
            .await
            .and_then(|r| r.session);
        match p {
            3 => assert_eq!(
                owner,
                Some(a.session),
                "{name}: a stale token releases nothing"
            ),
            5 => assert_eq!(owner, Some(b.session), "{name}: b's partition stays b's"),
            _ => assert_eq!(owner, None, "{name}: partition {p} is released"),
        }
    }

    if let Some(bounds) = bounds {
        assert!(
            claims <= bounds.claims,
            "{name}: 300 claims in batches took {claims} requests"
        );
        assert!(
            offset_reads <= bounds.reads,
            "{name}: 300 offset reads took {offset_reads} requests"
        );
        assert!(
            commit_requests <= bounds.commits,
            "{name}: 131 commits took {commit_requests} requests"
        );
        assert!(
            release_requests <= bounds.releases,
            "{name}: 131 releases took {release_requests} requests"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A release carries the claim's final commit: the offset written and the
/// owner record deleted in one step, only while the record is the claim
/// (gone: NoNode, another's: NotOwner, and nothing written either way);
/// alone, or with other releases, with and without commits, in one go.
pub async fn final_commits(store: &dyn Store) {
    let name = store.name();
    let bounds = store.quirks().batch_requests;
    let (mut a, requests) = store.counted("a").await;
    let mut b = store.member("b").await;

    // The group's first commit: the offsets' parents are made for it.
    let token = a.claim_created(0).await;
    assert_eq!(b.watch_owner(0).await, Ok(true), "{name}");
    assert_eq!(a.release_committing(0, token, 10).await, Ok(()), "{name}");
    b.owner_deleted(0).await;
    assert_eq!(store.owner(G, 0).await, None, "{name}: released");
    assert_eq!(
        store.committed(G, 0).await,
        Some(10),
        "{name}: and committed"
    );

    // Gone (a lost answer's second attempt): nothing written.
    assert_eq!(
        a.release_committing(0, token, 11).await,
        Err(StoreError::NoNode),
        "{name}"
    );
    assert_eq!(store.committed(G, 0).await, Some(10), "{name}");
    // Another's claim, named by its own token: nothing written, nothing
    // deleted.
    let theirs = b.claim_created(0).await;
    assert_eq!(
        a.release_committing(0, theirs, 12).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    assert_eq!(store.owner(G, 0).await.as_deref(), Some("b"), "{name}");
    assert_eq!(store.committed(G, 0).await, Some(10), "{name}");
    // Our own record under another token: the same.
    let ours = a.claim_created(1).await;
    assert_eq!(
        a.release_committing(1, FencingToken(ours.0 + 1), 5).await,
        Err(StoreError::NotOwner),
        "{name}"
    );
    assert_eq!(store.owner(G, 1).await.as_deref(), Some("a"), "{name}");
    assert_eq!(store.committed(G, 1).await, None, "{name}");
    // Over an offset stored already.
    store.put_offset(G, 1, b"3").await;
    let before = count(&requests);
    assert_eq!(a.release_committing(1, ours, 6).await, Ok(()), "{name}");
    let single = sent(&requests, before);
    assert_eq!(store.owner(G, 1).await, None, "{name}");
    assert_eq!(store.committed(G, 1).await, Some(6), "{name}");

    // Together: a holds 10 to 14, b holds 16; 11 has an offset already,
    // 12 goes without a commit, 13 under a stale token, 2 was never
    // claimed.
    let mut tokens = std::collections::BTreeMap::new();
    for p in 10..15u32 {
        tokens.insert(p, a.claim_created(p).await);
    }
    let held = b.claim_created(16).await;
    store.put_offset(G, 11, b"1").await;
    let releases = [
        (10, Some(tokens[&10]), Some(110)),
        (11, Some(tokens[&11]), Some(111)),
        (12, Some(tokens[&12]), None),
        (13, Some(FencingToken(tokens[&13].0 + 1)), Some(113)),
        (16, Some(held), Some(116)),
        (2, Some(tokens[&10]), Some(102)),
        (14, Some(tokens[&14]), Some(114)),
    ];
    let before = count(&requests);
    let results = a.release_together(releases).await;
    let together = sent(&requests, before);
    let expected = [
        (10, Ok(()), None, Some(110)),
        (11, Ok(()), None, Some(111)),
        (12, Ok(()), None, None),
        (13, Err(StoreError::NotOwner), Some("a"), None),
        (16, Err(StoreError::NotOwner), Some("b"), None),
        (2, Err(StoreError::NoNode), None, None),
        (14, Ok(()), None, Some(114)),
    ];
    assert_eq!(results.len(), expected.len(), "{name}: {results:?}");
    for (result, (p, wanted, owner, committed)) in results.into_iter().zip(expected) {
        let Event::ReleaseResult { result, .. } = result else {
            panic!("{name}: partition {p}'s release answered {result:?}");
        };
        assert_eq!(result, wanted, "{name}: partition {p}'s release");
        assert_eq!(
            store.owner(G, p).await.as_deref(),
            owner,
            "{name}: partition {p}'s owner"
        );
        assert_eq!(
            store.committed(G, p).await,
            committed,
            "{name}: partition {p}'s offset"
        );
    }

    if let Some(bounds) = bounds {
        assert!(
            single <= bounds.final_commit,
            "{name}: a release with its commit took {single} requests"
        );
        assert!(
            together <= bounds.final_commits,
            "{name}: 7 releases, 5 with commits, took {together} requests"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// A claim reads the committed offset with it when asked, from a state
/// that has its record: the offset its previous owner's release wrote
/// with the record's deletion, none, or a corrupt one, each as an offset
/// read answers; alone and in one go where the store reads with a claim
/// (etcd), and where it leaves the read to the member (ZooKeeper, the
/// model alone), the member's read finds the same. A claim that meets a
/// record held reads nothing.
pub async fn claims_read_offsets(store: &dyn Store) {
    let name = store.name();
    let quirks = store.quirks();
    let bounds = quirks.batch_requests;
    let reads = quirks.single_claim_reads_offset;
    let together = quirks.batch_claims_read_offset;
    let (mut a, requests) = store.counted("a").await;
    let mut b = store.member("b").await;
    let created = read_with_claim;

    // b leaves partition 0 with 7 committed.
    let token = b.claim_created(0).await;
    assert_eq!(b.release_committing(0, token, 7).await, Ok(()), "{name}");
    let before = count(&requests);
    let outcome = a.claim_reading(0).await;
    let single = sent(&requests, before);
    let read = match reads {
        true => created(name, 0, outcome),
        false => read_after_claim(name, &mut a, 0, outcome).await,
    };
    assert_eq!(
        read,
        Ok(Some(7)),
        "{name}: the offset written with the release"
    );
    assert_eq!(
        claim_alone(name, &mut a, 1, reads).await,
        Ok(None),
        "{name}"
    );
    store.put_offset(G, 3, b"garbage").await;
    assert!(
        matches!(
            claim_alone(name, &mut a, 3, reads).await,
            Err(StoreError::Corrupt { .. })
        ),
        "{name}: a corrupt offset is reported as a read reports it"
    );
    let held = b.claim_created(2).await;
    assert_held_by(name, a.claim_reading(2).await, "b", b.session, held);

    // Together, none held: 21 has an offset.
    store.put_offset(G, 21, b"21").await;
    let before = count(&requests);
    let results = a.claim_reading_together(20..30, true).await;
    let free = sent(&requests, before);
    for (p, result) in (20..30u32).zip(results) {
        let Event::ClaimResult { result, .. } = result else {
            panic!("{name}: partition {p}'s claim answered {result:?}");
        };
        let wanted = if p == 21 { Some(21) } else { None };
        assert_eq!(
            found(name, &mut a, p, result, together).await,
            Ok(wanted),
            "{name}: partition {p}"
        );
    }

    // Together, one held by b: 12 has an offset.
    store.put_offset(G, 12, b"12").await;
    let held = b.claim_created(15).await;
    let before = count(&requests);
    let results = a.claim_reading_together(10..20, true).await;
    let refused = sent(&requests, before);
    for (p, result) in (10..20u32).zip(results) {
        let Event::ClaimResult { result, .. } = result else {
            panic!("{name}: partition {p}'s claim answered {result:?}");
        };
        match p {
            15 => assert_held_by(name, result, "b", b.session, held),
            12 => assert_eq!(
                found(name, &mut a, p, result, together).await,
                Ok(Some(12)),
                "{name}"
            ),
            _ => assert_eq!(
                found(name, &mut a, p, result, together).await,
                Ok(None),
                "{name}: partition {p}"
            ),
        }
    }

    if let Some(bounds) = bounds {
        assert!(
            single <= bounds.claim_reading,
            "{name}: a claim reading its offset took {single} requests"
        );
        assert!(
            free <= bounds.claims_reading,
            "{name}: 10 free claims reading their offsets took {free} requests"
        );
        assert!(
            refused <= bounds.claims_reading_held,
            "{name}: 10 claims reading their offsets, one held, took {refused} requests"
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

/// The committed offset a claim of `p` that took effect read with it.
fn read_with_claim(
    name: &str,
    p: u32,
    outcome: Result<ClaimOutcome, StoreError>,
) -> Result<Option<Offset>, StoreError> {
    match outcome {
        Ok(ClaimOutcome::Created {
            committed: Some(committed),
            ..
        }) => committed.map(|c| c.map(|c| c.offset)),
        other => panic!("{name}: partition {p}'s claim answered {other:?}"),
    }
}

/// The committed offset of `p` after a claim that took effect without
/// reading it (`outcome`): the member's own read.
async fn read_after_claim(
    name: &str,
    a: &mut super::harness::Driver,
    p: u32,
    outcome: Result<ClaimOutcome, StoreError>,
) -> Result<Option<Offset>, StoreError> {
    assert!(
        matches!(
            outcome,
            Ok(ClaimOutcome::Created {
                committed: None,
                ..
            })
        ),
        "{name}: partition {p}'s claim answered {outcome:?}"
    );
    a.read_offset(p).await
}

/// The committed offset a claim of `p` alone finds: read with it where the
/// store `reads` with a single claim, by the member after it otherwise.
async fn claim_alone(
    name: &str,
    a: &mut super::harness::Driver,
    p: u32,
    reads: bool,
) -> Result<Option<Offset>, StoreError> {
    let outcome = a.claim_reading(p).await;
    found(name, a, p, outcome, reads).await
}

/// The committed offset of `p` a claim that took effect (`outcome`)
/// finds: read with it where the store `reads` with such a claim, by the
/// member after it otherwise.
async fn found(
    name: &str,
    a: &mut super::harness::Driver,
    p: u32,
    outcome: Result<ClaimOutcome, StoreError>,
    reads: bool,
) -> Result<Option<Offset>, StoreError> {
    match reads {
        true => read_with_claim(name, p, outcome),
        false => read_after_claim(name, a, p, outcome).await,
    }
}

/// A batch of claims whose answer is lost: the store made every claim, and
/// the member learns none of their outcomes (ConnectionLoss for each, as
/// for a single claim); claimed again once the connection is back, each
/// finds its record held by its own session and token, which the core
/// takes as its own. (The in-memory store answers in place: there is no
/// answer to lose.)
pub async fn lost_batch(store: &dyn Store) {
    let name = store.name();
    let Some((backend, proxy)) = store.proxied_backend("a").await else {
        return;
    };
    let mut a = super::harness::Driver::start(name, backend, "a", super::stores::SESSION).await;
    // The owners' parent exists: the batch is not refused for want of it.
    a.claim_created(99).await;

    proxy.deaf();
    for (p, lost) in (0..10u32).zip(a.claim_together(0..10).await) {
        assert!(
            matches!(
                lost,
                Event::ClaimResult {
                    result: Err(StoreError::ConnectionLoss),
                    ..
                }
            ),
            "{name}: partition {p}'s claim, its answer lost, answered {lost:?}"
        );
    }
    proxy.up();

    // Claimed again until the connection carries answers again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let again = loop {
        let again = a.claim_together(0..10).await;
        let lost = again.iter().any(|e| {
            matches!(
                e,
                Event::ClaimResult {
                    result: Err(StoreError::ConnectionLoss),
                    ..
                }
            )
        });
        if !lost {
            break again;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: claims still unanswered 20 s after the proxy came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (p, again) in (0..10u32).zip(again) {
        let record = store
            .record(G, Which::Owner(p))
            .await
            .unwrap_or_else(|| panic!("{name}: the lost batch was carried out whole"));
        let Event::ClaimResult { result, .. } = again else {
            panic!("{name}: partition {p}'s claim answered {again:?}");
        };
        assert_held_by(name, result, "a", a.session, record.created);
    }
    a.shutdown().await;
    drop(proxy);
}
