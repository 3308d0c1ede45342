//! The backend against a real etcd (`TENURE_ETCD`, started by
//! `scripts/services start etcd`). Each test works under its own key prefix.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{lease, partition, Sandbox};
use etcd_client::{EventType, PutOptions, WatchOptions};
use tenure_core::{
    ClaimOutcome, Event, FencingToken, RegisterOutcome, SessionId, StoreError, StoreOp,
    StoreRequest,
};
use tenure_etcd::{EtcdBackend, Hooks};
use tenure_tokio::{Backend, BackendError};

fn created(event: Event) -> FencingToken {
    match event {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { token }),
            ..
        } => token,
        other => panic!("expected a created claim, got {other:?}"),
    }
}

fn registered(event: Event) {
    match event {
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Registered),
            ..
        } => {}
        other => panic!("expected a registration, got {other:?}"),
    }
}

#[tokio::test]
async fn registration_members_and_membership_watch() {
    let sandbox = Sandbox::new("members").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox.member("b").await;

    registered(a.register().await);
    let kv = sandbox
        .get(&sandbox.member_key("a"))
        .await
        .expect("registration written");
    assert_eq!(kv.lease(), lease(a.session), "registration is on our lease");
    let json = String::from_utf8(kv.value().to_vec()).expect("utf-8");
    assert!(
        json.contains("\"subscription\":{\"t\":1}"),
        "Kafka 0.8 registration JSON: {json}"
    );

    // Registering again meets our own record.
    match a.register().await {
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Exists { session }),
            ..
        } => assert_eq!(session, a.session),
        other => panic!("second registration answered {other:?}"),
    }

    assert_eq!(a.watch_members().await, vec!["a"]);
    assert!(!a.has(|e| matches!(e, Event::MembersChanged)));

    // A corrupt registration is left out (and reported), not guessed at.
    let garbage = sandbox.member_key("garbage");
    let mut raw = sandbox.raw.clone();
    raw.put(garbage.as_str(), "not json", None)
        .await
        .expect("write a corrupt registration");
    a.wait_for("MembersChanged after a corrupt registration", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a"]);
    a.wait_for("the corrupt registration reported", |e| match e {
        Event::StoreProblem {
            error: StoreError::Corrupt { path, .. },
            ..
        } if *path == garbage => Some(()),
        _ => None,
    })
    .await;
    raw.delete(garbage.as_str(), None).await.expect("remove it");
    a.wait_for("MembersChanged after the corrupt registration went", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a"]);

    registered(b.register().await);
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
    assert!(sandbox.get(&sandbox.member_key("b")).await.is_none());
    a.wait_for("MembersChanged after b left", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a"]);
    // One notification per WatchMembers.
    assert!(!a.has(|e| matches!(e, Event::MembersChanged)));

    assert!(matches!(
        a.heartbeat().await,
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
    let held = created(b.claim(5).await);

    // 300 claims in one step: more than one transaction holds (etcd takes
    // 128 operations at most by default), each claim nested in its own, so
    // that partition 5, held, fails its own claim only.
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
        let kv = sandbox
            .get(&sandbox.owner_key(p))
            .await
            .expect("every other partition's owner key is written");
        assert_eq!(
            token,
            FencingToken(kv.create_revision() as u64),
            "partition {p}'s token"
        );
        assert_eq!(kv.lease(), lease(a.session), "partition {p} is a's");
    }
    assert_eq!(sent, 3, "300 claims in batches took {sent} requests");
    let mut raw = sandbox.raw.clone();
    for (p, data) in [(42, "42"), (7, "garbage")] {
        raw.put(sandbox.offset_key(p).as_str(), data, None)
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

/// The commits and releases of one step go in batches too (one
/// transaction of one nested transaction per partition), each partition
/// with its own outcome: one committed under a stale token, or held by
/// another member, fails its own commit only and is left alone by its
/// release.
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
        let written = sandbox.get(&sandbox.offset_key(p)).await;
        let written = written.map(|kv| String::from_utf8_lossy(kv.value()).into_owned());
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
    assert_eq!(sent, 2, "131 commits in batches took {sent} requests");

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
        let owner = sandbox
            .get(&sandbox.owner_key(p))
            .await
            .map(|kv| kv.lease());
        match p {
            3 => assert_eq!(
                owner,
                Some(lease(a.session)),
                "a stale token releases nothing"
            ),
            200 => assert_eq!(owner, Some(lease(b.session)), "b's partition stays b's"),
            _ => assert_eq!(owner, None, "partition {p} is released"),
        }
    }
    assert_eq!(sent, 2, "131 releases in batches took {sent} requests");
    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

/// A batch of claims whose answer is lost: etcd made every claim in one
/// transaction, and the member learns none of their outcomes
/// (ConnectionLoss for each, as for a single claim); claimed again once
/// the connection is back, each finds its key held by its own lease and
/// token, which the core takes as its own.
#[tokio::test]
async fn a_batch_of_claims_whose_answer_is_lost_is_resolved_like_a_single_claim() {
    let sandbox = Sandbox::new("batchlost").await;
    let upstream = sandbox
        .address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = common::proxy::Proxy::start(&upstream).await;
    let backend = sandbox
        .backend(&format!("http://{}", proxy.address))
        .request_timeout(Duration::from_secs(1));
    let mut a =
        common::Driver::start("etcd", backend, common::info("a"), Duration::from_secs(8)).await;

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

    for (p, again) in (0..10u32).zip(a.claim_together(0..10).await) {
        let kv = sandbox
            .get(&sandbox.owner_key(p))
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
                assert_eq!(session, a.session, "partition {p} is held by a's lease");
                assert_eq!(
                    token,
                    FencingToken(kv.create_revision() as u64),
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
    let kv = sandbox
        .get(&sandbox.owner_key(0))
        .await
        .expect("owner key written");
    assert_eq!(kv.value(), b"a", "owner key holds the member id");
    assert_eq!(
        token,
        FencingToken(kv.create_revision() as u64),
        "token is the create_revision"
    );
    assert_eq!(kv.lease(), lease(a.session));

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
            assert_eq!(session, a.session, "held under a's lease");
            assert_eq!(held, token);
        }
        other => panic!("second claim answered {other:?}"),
    }
    // Our own claim again: held by our lease (a lost reply's reconciliation).
    match a.claim(0).await {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Held { session, .. }),
            ..
        } => assert_eq!(session, a.session),
        other => panic!("repeated claim answered {other:?}"),
    }
    assert!(matches!(
        b.watch_owner(0).await,
        Event::OwnerWatchResult {
            result: Ok(true),
            ..
        }
    ));

    // Releases that do not match the claim leave it alone.
    assert!(matches!(
        a.release(0, Some(FencingToken(token.0 + 1))).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        b.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        b.release(0, None).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert_eq!(
        sandbox
            .get(&sandbox.owner_key(0))
            .await
            .map(|kv| kv.create_revision() as u64),
        Some(token.0),
        "a release with the wrong token or lease is refused"
    );
    assert!(!b.has(|e| matches!(e, Event::OwnerDeleted { .. })));

    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(sandbox.get(&sandbox.owner_key(0)).await.is_none());
    let deleted = b
        .wait_for("OwnerDeleted", |e| match e {
            Event::OwnerDeleted { partition } => Some(partition.clone()),
            _ => None,
        })
        .await;
    assert_eq!(deleted, partition(0));

    let next = created(b.claim(0).await);
    assert!(next.0 > token.0, "tokens grow with every claim");
    // Releasing what is gone is fine.
    assert!(matches!(
        a.release(1, None).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(matches!(
        a.watch_owner(1).await,
        Event::OwnerWatchResult {
            result: Ok(false),
            ..
        }
    ));
    // A release without a token matches on the lease alone.
    assert!(matches!(
        b.release(0, None).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(sandbox.get(&sandbox.owner_key(0)).await.is_none());

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
    let kv = sandbox.get(&sandbox.offset_key(0)).await.expect("offset");
    assert_eq!(kv.value(), b"43", "ASCII decimal next offset");
    assert_eq!(kv.lease(), 0, "offsets outlive leases");

    // Not the owner: another lease, even with the right token...
    assert!(matches!(
        b.commit(0, 99, token).await,
        Event::CommitResult {
            result: Err(StoreError::NotOwner),
            ..
        }
    ));
    // ... or the owner's lease with another claim's token.
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

    // The owner's lease revoked behind its back: its claim is gone with it,
    // and so is its right to commit.
    let mut raw = sandbox.raw.clone();
    raw.lease_revoke(lease(b.session))
        .await
        .expect("revoke b's lease");
    let id = b.id();
    b.backend.submit(StoreRequest {
        id,
        session: b.session,
        op: StoreOp::CommitOffset {
            partition: partition(0),
            offset: 99,
            token: next,
        },
    });
    match b.result(id).await {
        // Fenced by the transaction, or refused because the lease is gone
        // (if the backend noticed the expiry first).
        Event::CommitResult {
            result: Err(StoreError::NotOwner | StoreError::SessionExpired),
            ..
        } => {}
        other => panic!("a commit after the lease was revoked answered {other:?}"),
    }
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
    let key = sandbox.offset_key(0);
    let mut raw = sandbox.raw.clone();
    raw.put(key.as_str(), "garbage", None)
        .await
        .expect("write a corrupt offset");
    let written = sandbox.get(&key).await.expect("written").mod_revision();
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
            assert_eq!(reported, key, "the error names the key");
            assert!(
                detail.contains("garbage"),
                "detail shows the data: {detail}"
            );
        }
        other => panic!("reading a corrupt offset answered {other:?}"),
    }
    let kv = sandbox.get(&key).await.expect("still there");
    assert_eq!(kv.value(), b"garbage", "nothing overwritten");
    assert_eq!(kv.mod_revision(), written, "nothing written at all");

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
        sandbox.get(&sandbox.owner_key(0)).await.is_none(),
        "a stale claim must not create anything"
    );
    assert!(sandbox.get(&sandbox.member_key("a")).await.is_none());
    assert!(matches!(
        a.heartbeat().await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    assert!(!a.has(|_| true), "no event other than the results");

    a.backend.shutdown().await;
}

/// The original system's NodeExists → NoNode race needs a create and a
/// separate read of the owner. On etcd a claim is one transaction, so a
/// release landing while the claim waits (the hook delays the claim's
/// start) simply lets the claim create the key.
#[tokio::test]
async fn a_claim_is_one_transaction_so_the_owner_cannot_vanish_in_between() {
    let sandbox = Sandbox::new("race").await;
    let mut a = sandbox.member("a").await;
    let mut b = sandbox
        .member_with(
            "b",
            Hooks {
                delay_owner_read: Duration::from_secs(3),
                ..Hooks::default()
            },
        )
        .await;
    let token = created(a.claim(0).await);

    let submitted = Instant::now();
    let claim = b.submit(|id, session| StoreRequest {
        id,
        session,
        op: StoreOp::Claim {
            partition: partition(0),
        },
    });
    assert!(matches!(
        a.release(0, Some(token)).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(
        submitted.elapsed() < Duration::from_secs(3),
        "the release took {:?}: too slow to land before the claim",
        submitted.elapsed()
    );
    let next = created(b.result(claim).await);
    assert!(next.0 > token.0);

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}

#[tokio::test]
async fn shutdown_revokes_the_lease_at_once() {
    let sandbox = Sandbox::new("shutdown").await;
    let mut a = sandbox.member("a").await;
    registered(a.register().await);
    created(a.claim(0).await);
    let mut raw = sandbox.raw.clone();
    let mut watch = raw
        .watch(
            sandbox.owner_key(0),
            Some(WatchOptions::new().with_start_revision(1)),
        )
        .await
        .expect("watch the owner key");

    a.backend.shutdown().await;
    // No waiting: the records are gone when shutdown returns.
    assert!(sandbox.get(&sandbox.member_key("a")).await.is_none());
    assert!(sandbox.get(&sandbox.owner_key(0)).await.is_none());
    let ttl = raw
        .lease_time_to_live(lease(a.session), None)
        .await
        .expect("ask for the lease");
    assert!(ttl.ttl() <= 0, "the lease is gone");
    let deleted = tokio::time::timeout(common::EVENT_TIMEOUT, async {
        loop {
            let response = watch.message().await.expect("watch").expect("open");
            if response
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return;
            }
        }
    })
    .await;
    assert!(deleted.is_ok(), "the owner key's deletion is seen");

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
async fn start_errors_name_the_endpoint_and_are_bounded() {
    let member = common::info("a");

    // Nothing listens on port 1.
    let started = Instant::now();
    match common::start_alone(
        EtcdBackend::new("http://127.0.0.1:1").connect_timeout(Duration::from_secs(2)),
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
        EtcdBackend::new("127.0.0.1:notaport"),
        &member,
        common::SESSION_TIMEOUT,
    )
    .await
    {
        Err(BackendError::Config(message)) => {
            assert!(message.contains("127.0.0.1:notaport"), "{message}")
        }
        other => panic!("bad endpoint: {other:?}"),
    }

    let backend = EtcdBackend::new(" , ");
    assert!(matches!(
        common::start_alone(backend, &member, common::SESSION_TIMEOUT).await,
        Err(BackendError::Config(_))
    ));
}

/// A lease revoked behind the backend's back: the next keep-alive learns it,
/// the session expires, a new lease is granted, and commands of the old
/// session fail as expired.
#[tokio::test]
async fn a_revoked_lease_expires_the_session_and_a_new_one_is_granted() {
    let sandbox = Sandbox::new("expiry").await;
    let backend = sandbox.backend(&sandbox.address);
    let session_timeout = Duration::from_secs(3);
    let mut a = common::Driver::start("etcd", backend, common::info("a"), session_timeout).await;
    let first = a.session;
    registered(a.register().await);

    let mut raw = sandbox.raw.clone();
    raw.lease_revoke(lease(first))
        .await
        .expect("revoke the lease");
    a.wait_for("SessionExpired", |e| {
        matches!(e, Event::SessionExpired).then_some(())
    })
    .await;
    let second = a
        .wait_for("SessionEstablished", |e| match e {
            Event::SessionEstablished { session } => Some(*session),
            _ => None,
        })
        .await;
    assert_ne!(second, first);
    assert!(!a.has(|e| matches!(e, Event::SessionResumed)));

    assert!(matches!(
        a.heartbeat().await,
        Event::HeartbeatResult {
            result: Err(StoreError::SessionExpired),
            ..
        }
    ));
    a.session = second;
    registered(a.register().await);
    assert_eq!(
        sandbox
            .get(&sandbox.member_key("a"))
            .await
            .map(|kv| kv.lease()),
        Some(lease(second))
    );
    assert!(matches!(
        a.heartbeat().await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));

    a.backend.shutdown().await;
}

/// Suspension, resumption and expiry, with the connection cut by a proxy:
/// a request in flight fails with ConnectionLoss, `last_heard` follows the
/// keep-alives, the same lease resumes, a member watch survives the broken
/// connection, and after an expiry a new lease is granted.
#[tokio::test]
async fn session_suspends_resumes_and_expires() {
    let sandbox = Sandbox::new("session").await;
    let upstream = sandbox
        .address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let proxy = common::proxy::Proxy::start(&upstream).await;
    let backend = sandbox
        .backend(&format!("http://{}", proxy.address))
        .request_timeout(Duration::from_secs(1));
    let session_timeout = Duration::from_secs(8);
    let mut a = common::Driver::start("etcd", backend, common::info("a"), session_timeout).await;
    let first = a.session;
    registered(a.register().await);
    assert_eq!(a.watch_members().await, vec!["a"]);

    let before_stall = Instant::now();
    // Stalled: requests go out and never come back.
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
        other => panic!("a heartbeat in flight at the stall answered {other:?}"),
    }
    let last_heard = a
        .wait_for("SessionSuspended", |e| match e {
            Event::SessionSuspended { last_heard } => Some(*last_heard),
            _ => None,
        })
        .await;
    assert!(last_heard <= Instant::now());
    assert!(
        before_stall.duration_since(last_heard) <= Duration::from_secs(3),
        "keep-alives every TTL/3 count as heard: {:?} before the stall",
        before_stall.duration_since(last_heard)
    );

    // A member joins while the connection is stalled.
    let mut b = sandbox.member("b").await;
    registered(b.register().await);

    proxy.up();
    a.wait_for("SessionResumed", |e| {
        matches!(e, Event::SessionResumed).then_some(())
    })
    .await;
    assert_eq!(a.session, first);
    // The watch, opened again from the last revision it saw, catches up.
    a.wait_for("MembersChanged across the broken connection", |e| {
        matches!(e, Event::MembersChanged).then_some(())
    })
    .await;
    assert_eq!(a.watch_members().await, vec!["a", "b"]);
    assert!(matches!(
        a.heartbeat().await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));

    // Down for longer than the TTL: the session expires (concluded here from
    // the silence) and a new lease is granted once etcd is reachable again.
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
    // The old lease is gone, and its registration with it.
    assert!(sandbox.get(&sandbox.member_key("a")).await.is_none());
    a.session = second;
    // The client's channel may still hold a connection from before the
    // outage, and a request over it fails as a connection loss: the core
    // sends the registration again, and so does this test (a few times). A
    // lost reply's registration is then found under our own session.
    let mut result = a.register().await;
    let mut retried = false;
    for _ in 0..5 {
        let lost = matches!(
            result,
            Event::RegisterResult {
                result: Err(StoreError::ConnectionLoss),
                ..
            }
        );
        if !lost {
            break;
        }
        retried = true;
        result = a.register().await;
    }
    match result {
        Event::RegisterResult {
            result: Ok(RegisterOutcome::Exists { session }),
            ..
        } if retried && session == second => {}
        other => registered(other),
    }

    // A key written with an unrelated lease is no business of ours.
    let mut raw = sandbox.raw.clone();
    let other = raw.lease_grant(10, None).await.expect("grant").id();
    raw.put(
        sandbox.owner_key(3),
        "x",
        Some(PutOptions::new().with_lease(other)),
    )
    .await
    .expect("put");
    assert!(matches!(
        a.release(3, None).await,
        Event::ReleaseResult { result: Ok(()), .. }
    ));
    assert!(sandbox.get(&sandbox.owner_key(3)).await.is_some());
    raw.lease_revoke(other).await.expect("revoke");

    a.backend.shutdown().await;
    b.backend.shutdown().await;
}
