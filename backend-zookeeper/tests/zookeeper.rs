//! The backend against a real ZooKeeper (`TENURE_ZOOKEEPER`, started by
//! `scripts/services start zookeeper`). Each test works in its own chroot.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{partition, Sandbox, GROUP};
use tenure_core::{
    ClaimOutcome, Event, FencingToken, RegisterOutcome, SessionId, StoreError, StoreOp,
    StoreRequest,
};
use tenure_tokio::{Backend, BackendError};
use tenure_zookeeper::{Hooks, ZooKeeperBackend};
use zookeeper_client as zk;

fn created(event: Event) -> FencingToken {
    match event {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { token }),
            ..
        } => token,
        other => panic!("expected a created claim, got {other:?}"),
    }
}

#[tokio::test]
async fn registration_members_and_membership_watch() {
    let sandbox = Sandbox::new("members").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;

    assert!(matches!(
        a.register().await,
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        }
    ));
    let (data, stat) = sandbox
        .raw
        .get_data(&sandbox.member_path("a"))
        .await
        .expect("registration written");
    assert_eq!(
        stat.ephemeral_owner as u64, a.session.0,
        "registration is ephemeral, ours"
    );
    let json = String::from_utf8(data).expect("utf-8");
    assert!(
        json.contains("\"subscription\":{\"t\":1}"),
        "Kafka 0.8 registration JSON: {json}"
    );

    // Registering again meets our own record.
    match a.register().await {
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Exists { session }),
            ..
        } => {
            assert_eq!(session, a.session)
        }
        other => panic!("second registration answered {other:?}"),
    }

    assert_eq!(a.watch_members().await, vec!["a"]);
    assert!(!a.has(|e| matches!(e, Event::MembersChanged)));

    // A corrupt registration is left out (and logged), not guessed at.
    sandbox
        .raw
        .create(
            &sandbox.member_path("garbage"),
            b"not json",
            &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("write a corrupt registration");
    a.wait_for("MembersChanged after a corrupt registration", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a"]);
    // ... and reported with its path, for the error stream.
    let garbage = sandbox.member_path("garbage");
    a.wait_for("the corrupt registration reported", |e| match e {
        Event::StoreProblem {
            error: StoreError::Corrupt { path, .. },
            ..
        } if *path == garbage => Some(()),
        _ => None,
    })
    .await;

    assert!(matches!(
        b.register().await,
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        }
    ));
    a.wait_for("MembersChanged after b registered", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a", "b"]);

    // Deregistering removes the record and wakes the watch again.
    let id = b.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Deregister,
    });
    assert!(matches!(
        b.result(id).await,
        Event::DeregisterResult { result: Ok(()), .. }
    ));
    a.wait_for("MembersChanged after b left", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a"]);

    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

#[tokio::test]
async fn claims_of_one_step_go_in_batches_each_with_its_own_outcome() {
    let sandbox = Sandbox::new("batch").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;
    // b holds partition 5 (its claim also makes the owners' parents).
    let held = created(b.claim(5).await);

    // 300 claims in one step: more than one batch holds (120 at most),
    // and the batch with partition 5 in it is refused as a whole.
    let requests = a.backend.request_counter();
    let before = requests.load(Ordering::Relaxed);
    let results = a.claim_together(0..300).await;
    let sent = requests.load(Ordering::Relaxed) - before;
    for (p, result) in (0..300u32).zip(results) {
        if p == 5 {
            match result {
                Event::ClaimResult {
                    result:
                        Ok(ClaimOutcome::Held {
                            owner,
                            session,
                            token,
                        }),
                    ..
                } => {
                    assert_eq!(owner.as_ref().map(|m| m.as_str()), Some("b"));
                    assert_eq!((session, token), (b.session, held));
                }
                other => panic!("the held partition's claim answered {other:?}"),
            }
            continue;
        }
        let token = created(result);
        let (_, stat) = sandbox
            .raw
            .get_data(&sandbox.owner_path(p))
            .await
            .expect("every other partition's owner node is written");
        assert_eq!(
            token,
            FencingToken(stat.czxid as u64),
            "partition {p}'s token"
        );
        assert_eq!(
            stat.ephemeral_owner as u64, a.session.0,
            "partition {p} is a's"
        );
    }
    // Three batches of creates in one request each; for the refused one,
    // one multi-read of its owners and one batch of its 119 free
    // partitions; and, on a server that answers a multi's creates without
    // their stat (ZOOKEEPER-4026, before 3.9), one multi-read of the
    // tokens for each batch made: not one request per partition.
    assert!(sent <= 8, "300 claims in batches took {sent} requests");
    for (p, data) in [(42, &b"42"[..]), (7, &b"garbage"[..])] {
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        sandbox
            .raw
            .mkdir(
                &format!("/consumers/{GROUP}/offsets/{}", common::TOPIC),
                &options,
            )
            .await
            .ok();
        sandbox
            .raw
            .create(&sandbox.offset_path(p), data, &options)
            .await
            .expect("write an offset");
    }

    // The offsets of the same 300 in one step: one read for every 120,
    // each partition with its own answer (none, a number, or corrupt).
    let before = requests.load(Ordering::Relaxed);
    let reads = a.read_offsets_together(0..300).await;
    let sent = requests.load(Ordering::Relaxed) - before;
    for (p, read) in (0..300u32).zip(reads) {
        let Event::OffsetResult { result, .. } = read else {
            panic!("partition {p}'s offset read answered {read:?}");
        };
        match (p, result) {
            (42, Ok(Some(42))) | (7, Err(StoreError::Corrupt { .. })) => {}
            (p, Ok(None)) if p != 42 && p != 7 => {}
            (p, other) => panic!("partition {p}'s offset read answered {other:?}"),
        }
    }
    assert_eq!(sent, 3, "300 offset reads in batches took {sent} requests");
    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

/// The commits and releases of one step go in batches too (a multi-read
/// of the records, then one `multi` of the writes), each partition with
/// its own outcome: one committed under a stale token, or held by another
/// member, fails its own commit only and is left alone by its release.
#[tokio::test]
async fn commits_and_releases_of_one_step_go_in_batches_each_with_its_own_outcome() {
    let sandbox = Sandbox::new("batchcommit").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;
    created(b.claim(200).await);
    let tokens: Vec<FencingToken> = a
        .claim_together(0..130)
        .await
        .into_iter()
        .map(created)
        .collect();
    // The offsets' parents are made by the first commit.
    assert!(matches!(
        a.commit(0, 1, tokens[0]).await,
        Event::CommitResult { result: Ok(()), .. }
    ));

    // 130 commits (two batches: 120 and 10), partition 3 under a token
    // that is not its claim's, and partition 200, b's.
    let commits = (0..130u32)
        .map(|p| {
            let token = tokens[p as usize];
            let token = if p == 3 {
                FencingToken(token.0 + 1)
            } else {
                token
            };
            (p, i64::from(p) + 10, token)
        })
        .chain([(200, 210, tokens[0])]);
    let requests = a.backend.request_counter();
    let before = requests.load(Ordering::Relaxed);
    let results = a.commit_together(commits).await;
    let sent = requests.load(Ordering::Relaxed) - before;
    for (p, result) in (0..130u32).chain([200]).zip(results) {
        let Event::CommitResult { result, .. } = result else {
            panic!("partition {p}'s commit answered {result:?}");
        };
        let written = sandbox.raw.get_data(&sandbox.offset_path(p)).await.ok();
        let written = written.map(|(data, _)| String::from_utf8_lossy(&data).into_owned());
        match p {
            3 | 200 => {
                assert_eq!(result, Err(StoreError::NotOwner), "partition {p}'s commit");
                assert_eq!(written, None, "partition {p}'s offset is not written");
            }
            _ => {
                assert_eq!(result, Ok(()), "partition {p}'s commit");
                assert_eq!(
                    written,
                    Some((p + 10).to_string()),
                    "partition {p}'s offset"
                );
            }
        }
    }
    // A multi-read and a multi for each batch.
    assert!(sent <= 4, "131 commits in batches took {sent} requests");

    // Their releases, 3 under the stale token and 200 not a's: those two
    // are left alone, the others deleted.
    let releases = (0..130u32)
        .map(|p| {
            let token = tokens[p as usize];
            let token = if p == 3 {
                FencingToken(token.0 + 1)
            } else {
                token
            };
            (p, Some(token))
        })
        .chain([(200, None)]);
    let before = requests.load(Ordering::Relaxed);
    let results = a.release_together(releases).await;
    let sent = requests.load(Ordering::Relaxed) - before;
    for (p, result) in (0..130u32).chain([200]).zip(results) {
        assert!(
            matches!(result, Event::ReleaseResult { result: Ok(()), .. }),
            "partition {p}'s release answered {result:?}"
        );
        let owner = sandbox.raw.get_data(&sandbox.owner_path(p)).await.ok();
        let owner = owner.map(|(_, stat)| stat.ephemeral_owner as u64);
        match p {
            3 => assert_eq!(owner, Some(a.session.0), "a stale token releases nothing"),
            200 => assert_eq!(owner, Some(b.session.0), "b's partition stays b's"),
            _ => assert_eq!(owner, None, "partition {p} is released"),
        }
    }
    assert!(sent <= 4, "131 releases in batches took {sent} requests");
    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

/// A batch of claims whose answer is lost: the store made every claim,
/// and the member learns none of their outcomes (ConnectionLoss for each,
/// as for a single claim); claimed again once the connection is back, each
/// finds its record held by its own session and token, which the core takes
/// as its own.
#[tokio::test]
async fn a_batch_of_claims_whose_answer_is_lost_is_resolved_like_a_single_claim() {
    let sandbox = Sandbox::new("batchlost").await;
    let proxy = common::proxy::Proxy::start(&common::address()).await;
    let backend = ZooKeeperBackend::new(format!("{}{}", proxy.address, sandbox.chroot));
    let mut a = common::Driver::start(
        "zookeeper",
        backend,
        common::info("a"),
        Duration::from_secs(6),
    )
    .await;
    // The owners' parent exists: the batch is not refused for want of it.
    created(a.claim(99).await);

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
            "partition {p}'s claim, its answer lost, answered {lost:?}"
        );
    }
    proxy.up();
    a.wait_for("SessionResumed", |e| {
        matches!(e, Event::SessionResumed).then_some(())
    })
    .await;

    for (p, again) in (0..10u32).zip(a.claim_together(0..10).await) {
        let (_, stat) = sandbox
            .raw
            .get_data(&sandbox.owner_path(p))
            .await
            .expect("the lost batch was carried out whole");
        match again {
            Event::ClaimResult {
                result:
                    Ok(ClaimOutcome::Held {
                        owner,
                        session,
                        token,
                    }),
                ..
            } => {
                assert_eq!(owner.as_ref().map(|m| m.as_str()), Some("a"));
                assert_eq!(session, a.session, "partition {p} is held by a's session");
                assert_eq!(
                    token,
                    FencingToken(stat.czxid as u64),
                    "partition {p}'s token"
                );
            }
            other => panic!("partition {p}'s claim after the lost batch answered {other:?}"),
        }
    }
    a.backend.shutdown().await;
}

#[tokio::test]
async fn claim_hold_watch_and_handoff() {
    let sandbox = Sandbox::new("claim").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;

    let token = created(a.claim(0).await);
    let (data, stat) = sandbox
        .raw
        .get_data(&sandbox.owner_path(0))
        .await
        .expect("owner node written");
    assert_eq!(data, b"a", "owner node holds the member id");
    assert_eq!(token, FencingToken(stat.czxid as u64), "token is the czxid");
    assert_eq!(stat.ephemeral_owner as u64, a.session.0);

    match b.claim(0).await {
        Event::ClaimResult {
            result:
                Ok(ClaimOutcome::Held {
                    owner,
                    session,
                    token: held,
                }),
            ..
        } => {
            assert_eq!(owner.as_ref().map(|m| m.as_str()), Some("a"));
            assert_eq!(session, a.session);
            assert_eq!(held, token);
        }
        other => panic!("second claim answered {other:?}"),
    }
    assert!(matches!(
        b.watch_owner(0).await,
        Event::OwnerWatchResult {
            result: Ok(true),
            ..
        }
    ));

    // A release with another claim's token leaves the record alone.
    assert!(matches!(
        a.release(0, Some(FencingToken(token.0 + 1))).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    // ... and so does a release by another session.
    assert!(matches!(
        b.release(0, None).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(
        sandbox
            .raw
            .check_stat(&sandbox.owner_path(0))
            .await
            .expect("stat")
            .is_some(),
        "wrong-token and foreign releases must not delete the owner node"
    );
    assert!(!b.has(|e| matches!(e, Event::OwnerDeleted { .. })));

    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    let deleted = b
        .wait_for("OwnerDeleted", |e| match e {
            Event::OwnerDeleted { partition } => Some(partition.clone()),
            _ => None,
        })
        .await;
    assert_eq!(deleted, partition(0));
    // Releasing what is gone is fine.
    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));

    let next = created(b.claim(0).await);
    assert!(
        next > token,
        "a new claim's token grows: {next:?} after {token:?}"
    );
    // Watching a record that is gone answers false.
    assert!(matches!(
        a.watch_owner(1).await,
        Event::OwnerWatchResult {
            result: Ok(false),
            ..
        }
    ));

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

#[tokio::test]
async fn commits_are_fenced_by_the_claim() {
    let sandbox = Sandbox::new("commit").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;

    assert!(matches!(
        a.read_offset(0).await,
        Event::OffsetResult {
            result: Ok(None),
            ..
        }
    ));
    let token = created(a.claim(0).await);
    assert!(matches!(
        a.commit(0, 42, token).await,
        Event::CommitResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        a.read_offset(0).await,
        Event::OffsetResult {
            result: Ok(Some(42)),
            ..
        }
    ));
    assert!(matches!(
        a.commit(0, 43, token).await,
        Event::CommitResult { result: Ok(()), .. }
    ));
    let (data, stat) = sandbox
        .raw
        .get_data(&sandbox.offset_path(0))
        .await
        .expect("offset");
    assert_eq!(data, b"43", "ASCII decimal next offset");
    assert_eq!(stat.ephemeral_owner, 0, "offsets are persistent");

    // Not the owner: another session, even with the right token...
    assert!(matches!(
        b.commit(0, 99, token).await,
        Event::CommitResult {
            result: Err(StoreError::NotOwner),
            ..
        }
    ));
    // ... or the owner's session with another claim's token.
    assert!(matches!(
        a.commit(0, 99, FencingToken(token.0 + 1)).await,
        Event::CommitResult {
            result: Err(StoreError::NotOwner),
            ..
        }
    ));
    // After the release the claim no longer guards anything.
    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        a.commit(0, 99, token).await,
        Event::CommitResult {
            result: Err(StoreError::NotOwner),
            ..
        }
    ));
    // A partition nobody ever claimed.
    assert!(matches!(
        a.commit(5, 1, token).await,
        Event::CommitResult {
            result: Err(StoreError::NotOwner),
            ..
        }
    ));
    assert!(matches!(
        b.read_offset(0).await,
        Event::OffsetResult {
            result: Ok(Some(43)),
            ..
        }
    ));

    // The next owner commits over it.
    let next = created(b.claim(0).await);
    assert!(matches!(
        b.commit(0, 50, next).await,
        Event::CommitResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        a.read_offset(0).await,
        Event::OffsetResult {
            result: Ok(Some(50)),
            ..
        }
    ));

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

#[tokio::test]
async fn corrupt_offsets_are_reported_and_left_alone() {
    let sandbox = Sandbox::new("corrupt").await;
    let path = sandbox.offset_path(0);
    sandbox
        .raw
        .mkdir(
            &format!("/consumers/{GROUP}/offsets/{}", common::TOPIC),
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("offset parents");
    sandbox
        .raw
        .create(
            &path,
            b"garbage",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .expect("write a corrupt offset");
    let mut a = sandbox.member("a").await;

    match a.read_offset(0).await {
        Event::OffsetResult {
            result:
                Err(StoreError::Corrupt {
                    path: reported,
                    detail,
                    source,
                }),
            ..
        } => {
            // The parser's own error is kept as the cause.
            let cause = source.expect("a cause");
            assert!(
                cause
                    .get_ref()
                    .downcast_ref::<std::num::ParseIntError>()
                    .is_some(),
                "{cause:?}"
            );
            assert_eq!(reported, path, "the error names the znode");
            assert!(
                detail.contains("garbage"),
                "detail shows the data: {detail}"
            );
        }
        other => panic!("reading a corrupt offset answered {other:?}"),
    }
    let (data, stat) = sandbox.raw.get_data(&path).await.expect("still there");
    assert_eq!(data, b"garbage", "nothing overwritten");
    assert_eq!(stat.version, 0, "nothing written at all");

    a.backend.shutdown().await;
}

#[tokio::test]
async fn commands_of_another_session_fail_as_expired() {
    let sandbox = Sandbox::new("stale").await;
    let mut a = sandbox.member("a").await;
    let stale = SessionId(a.session.0 ^ 1);
    let id = a.id();
    a.backend.submit(StoreRequest {
        id,
        session: stale,
        op: StoreOp::Claim {
            partition: partition(0),
        },
    });
    assert!(matches!(
        a.result(id).await,
        Event::ClaimResult {
            result: Err(StoreError::SessionExpired),
            ..
        }
    ));
    let id = a.id();
    a.backend.submit(StoreRequest {
        id,
        session: stale,
        op: StoreOp::Register {
            member: a.info.clone(),
        },
    });
    assert!(matches!(
        a.result(id).await,
        Event::RegisterResult {
            result: Err(StoreError::SessionExpired),
            ..
        }
    ));
    assert!(
        sandbox
            .raw
            .check_stat(&sandbox.owner_path(0))
            .await
            .expect("stat")
            .is_none(),
        "a stale claim must not create anything"
    );
    assert!(sandbox
        .raw
        .check_stat(&sandbox.member_path("a"))
        .await
        .expect("stat")
        .is_none());
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    assert!(!a.has(|_| true), "no event other than the results");

    a.backend.shutdown().await;
}

/// The original system's NodeExists → NoNode race: the claimant's create
/// fails because the record exists, the owner releases, the claimant's
/// follow-up read finds nothing. Reported as NoNode (the core claims again).
#[tokio::test]
async fn owner_read_hook_reproduces_node_exists_then_no_node() {
    let sandbox = Sandbox::new("race").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox
        .member_with(
            "b",
            Hooks {
                delay_owner_read: Duration::from_secs(6),
                ..Hooks::default()
            },
        )
        .await;
    let token = created(a.claim(0).await);

    let claim = b.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Claim {
            partition: partition(0),
        },
    });
    // A session's requests are answered in order: once this heartbeat
    // (submitted after the claim, on a current-thread runtime that runs
    // tasks in spawn order) is answered, the claim's create has failed.
    let beat = b.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        b.result(beat).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    assert!(
        !b.has(|e| e.request_id() == Some(claim)),
        "claim answered too early"
    );

    // The release must land inside the claim's 6 s window; on a machine
    // loaded enough to miss it the claim would answer Held instead.
    let releasing = Instant::now();
    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(
        releasing.elapsed() < Duration::from_secs(5),
        "the release took {:?}: too slow to land inside the claim's window",
        releasing.elapsed()
    );
    match b.result(claim).await {
        Event::ClaimResult {
            result: Err(StoreError::NoNode),
            ..
        } => {}
        other => panic!("the claim whose owner read met the release answered {other:?}"),
    }
    // Claiming again works.
    created(b.claim(0).await);

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

#[tokio::test]
async fn shutdown_removes_ephemerals_at_once() {
    let sandbox = Sandbox::new("shutdown").await;
    let mut a = sandbox.member("a").await;
    assert!(matches!(
        a.register().await,
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        }
    ));
    created(a.claim(0).await);
    let (_, watcher) = sandbox
        .raw
        .check_and_watch_stat(&sandbox.owner_path(0))
        .await
        .expect("watch the owner node");

    a.backend.shutdown().await;
    // No waiting: the records are gone when shutdown returns.
    assert!(sandbox
        .raw
        .check_stat(&sandbox.member_path("a"))
        .await
        .expect("stat")
        .is_none());
    assert!(sandbox
        .raw
        .check_stat(&sandbox.owner_path(0))
        .await
        .expect("stat")
        .is_none());
    let event = watcher.changed().await;
    assert_eq!(event.event_type, zk::EventType::NodeDeleted);

    // After shutdown, commands go nowhere and nothing panics.
    let id = a.id();
    a.backend.submit(StoreRequest {
        id,
        session: a.session,
        op: StoreOp::Heartbeat,
    });
    a.backend.shutdown().await;
}

#[tokio::test]
async fn start_errors_name_the_address_and_are_bounded() {
    let member = common::info("a");

    // Nothing listens on port 1.
    let started = Instant::now();
    match common::start_alone(
        ZooKeeperBackend::new("127.0.0.1:1").connect_timeout(Duration::from_secs(2)),
        &member,
        common::SESSION_TIMEOUT,
    )
    .await
    {
        Err(BackendError::Connect { store, .. }) => {
            assert!(store.contains("127.0.0.1:1"), "{store}")
        }
        other => panic!("unreachable server: {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );

    match common::start_alone(
        ZooKeeperBackend::new("127.0.0.1:notaport"),
        &member,
        common::SESSION_TIMEOUT,
    )
    .await
    {
        Err(error @ BackendError::InvalidSetting { .. }) => {
            let message = error.to_string();
            assert!(message.contains("127.0.0.1:notaport"), "{message}");
            // The client's own refusal is the cause.
            let cause = std::error::Error::source(&error).expect("a cause");
            assert!(message.ends_with(&cause.to_string()), "{message} / {cause}");
        }
        other => panic!("bad connect string: {other:?}"),
    }

    // A chroot that does not exist.
    let connect = format!("{}/tenure-test-no-such-chroot", common::address());
    let _server = common::raw_client(&common::address()).await;
    match common::start_alone(
        ZooKeeperBackend::new(connect.clone()),
        &member,
        common::SESSION_TIMEOUT,
    )
    .await
    {
        Err(BackendError::Config(message)) => {
            assert!(message.contains(&connect), "{message}");
            assert!(message.contains("chroot"), "{message}");
        }
        other => panic!("missing chroot: {other:?}"),
    }

    // A session timeout above the server's maxSessionTimeout (60 s in
    // scripts/services): the server would expire the session before the
    // member stopped consuming, so the session is refused.
    let asked = Duration::from_secs(90);
    match common::start_alone(ZooKeeperBackend::new(common::address()), &member, asked).await {
        Err(
            error @ BackendError::SessionTimeout {
                asked: refused,
                granted,
                ..
            },
        ) => {
            assert_eq!(refused, asked);
            assert_eq!(granted, Duration::from_secs(60));
            assert!(error.to_string().contains("maxSessionTimeout"), "{error}");
        }
        other => panic!("a shorter granted session: {other:?}"),
    }
}

/// Suspension, resumption and expiry, with the connection cut by a proxy:
/// a request in flight fails with ConnectionLoss, `last_heard` is tracked,
/// the same session resumes, and after an expiry a new session opens while
/// commands of the old one fail as expired.
#[tokio::test]
async fn session_suspends_resumes_and_expires() {
    let sandbox = Sandbox::new("session").await;
    let proxy = common::proxy::Proxy::start(&common::address()).await;
    let session_timeout = Duration::from_secs(3);
    let backend = ZooKeeperBackend::new(format!("{}{}", proxy.address, sandbox.chroot));
    let mut a =
        common::Driver::start("zookeeper", backend, common::info("a"), session_timeout).await;
    let first = a.session;
    assert!(matches!(
        a.register().await,
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        }
    ));

    let before_beat = Instant::now();
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));

    // Stalled: the request goes out and never comes back; the client gives
    // up on the connection.
    proxy.stall();
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    match a.result(id).await {
        Event::HeartbeatResult {
            result: Err(StoreError::ConnectionLoss),
            ..
        } => {}
        other => panic!("a heartbeat in flight at the disconnect answered {other:?}"),
    }
    let last_heard = a
        .wait_for("SessionSuspended", |e| match e {
            Event::SessionSuspended { last_heard } => Some(*last_heard),
            _ => None,
        })
        .await;
    assert!(
        last_heard >= before_beat,
        "the answered heartbeat counts as heard"
    );
    assert!(last_heard <= Instant::now());

    proxy.up();
    a.wait_for("SessionResumed", |e| {
        matches!(e, Event::SessionResumed).then_some(())
    })
    .await;
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    assert_eq!(a.session, first);

    // Down for longer than the session timeout: the session expires and a
    // new one opens once the server is reachable again.
    proxy.down();
    a.wait_for("SessionSuspended", |e| {
        matches!(e, Event::SessionSuspended { .. }).then_some(())
    })
    .await;
    a.wait_for("SessionExpired", |e| {
        matches!(e, Event::SessionExpired).then_some(())
    })
    .await;
    proxy.up();
    let second = a
        .wait_for("SessionEstablished", |e| match e {
            Event::SessionEstablished { session } => Some(*session),
            _ => None,
        })
        .await;
    assert_ne!(second, first);
    assert!(
        !a.has(|e| matches!(e, Event::SessionResumed)),
        "an expired session does not resume"
    );

    // Commands of the old session fail as expired; the new one works.
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult {
            result: Err(StoreError::SessionExpired),
            ..
        }
    ));
    a.session = second;
    match a.register().await {
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        } => {}
        // The server may not have deleted the old session's record yet.
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Exists { session }),
            ..
        } => {
            assert_eq!(session, first)
        }
        other => panic!("registration under the new session answered {other:?}"),
    }
    let id = a.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Heartbeat,
    });
    assert!(matches!(
        a.result(id).await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));

    a.backend.shutdown().await;
}
