//! The backend against a real etcd (`TENURE_ETCD`, started by
//! `scripts/services start etcd`). Each test works under its own key prefix.
//!
//! Only what is this store's own is here (its sessions, how it starts and
//! ends them, its races); the scenarios every store shares (registration,
//! claims, fenced commits, batches, corrupt records, stale sessions) are
//! the conformance suite's (`tests/tests/it/conformance/`), which runs them
//! on etcd too.

mod common;

use std::time::{Duration, Instant};

use common::{lease, partition, Sandbox};
use etcd_client::{EventType, PutOptions, WatchOptions};
use tenure_core::{
    ClaimOutcome, Event, FencingToken, RegisterOutcome, StoreError, StoreOp, StoreRequest,
};
use tenure_etcd::{EtcdBackend, Hooks};
use tenure_tokio::{Backend, BackendError};

fn created(event: Event) -> FencingToken {
    match event {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { token, .. }),
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
            read_offset: false,
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

/// Waits until the server has ended the lease of member `member`'s
/// registration (its TTL run out unrenewed): the registration's deletion,
/// watched from the revision at which it was read.
async fn lease_ended(sandbox: &Sandbox, member: &str) {
    let key = sandbox.member_key(member);
    let mut raw = sandbox.raw.clone();
    let read = raw
        .get(key.as_str(), None)
        .await
        .expect("read the registration");
    if read.kvs().is_empty() {
        return;
    }
    let revision = read.header().map_or(0, |h| h.revision());
    let mut watch = raw
        .watch(
            key.as_str(),
            Some(WatchOptions::new().with_start_revision(revision + 1)),
        )
        .await
        .expect("watch the registration");
    let deleted = tokio::time::timeout(Duration::from_secs(60), async {
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
    assert!(
        deleted.is_ok(),
        "{member}'s lease still lives after a minute unrenewed"
    );
}

/// A lease the cluster keeps alive while the member cannot reach it — as a
/// new leader does, which extends every lease it takes over after an
/// election — outlives an outage longer than its TTL: the member suspends
/// (and stops handing out, by its own count), but does not give the
/// session up by its clock, and resumes it, its registration and claims
/// intact, once a server answers again. A member that gave up after a TTL
/// unheard revoked a live lease and moved every partition it held.
#[tokio::test]
async fn a_lease_the_cluster_keeps_outlives_an_outage_longer_than_its_ttl() {
    let sandbox = Sandbox::new("outlived").await;
    let (proxy, backend) = sandbox.behind_proxy(Duration::from_secs(1)).await;
    let session_timeout = Duration::from_secs(3);
    let mut a = common::Driver::start("etcd", backend, common::info("a"), session_timeout).await;
    let first = a.session;
    registered(a.register().await);
    assert!(matches!(
        a.claim(0).await,
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { .. }),
            ..
        }
    ));

    // The cluster's side: the lease renewed while the member is away.
    let mut raw = sandbox.raw.clone();
    let (mut renewer, mut renewed) = raw
        .lease_keep_alive(common::lease(first))
        .await
        .expect("keep the member's lease alive");
    proxy.down();
    a.wait_for("SessionSuspended", |e| {
        matches!(e, Event::SessionSuspended { .. }).then_some(())
    })
    .await;
    // Away for three TTLs, each a chance for the member to give up.
    for _ in 0..9 {
        renewer.keep_alive().await.expect("send a keep-alive");
        let answer = renewed
            .message()
            .await
            .expect("a keep-alive answer")
            .expect("the stream is open");
        assert!(
            answer.ttl() > 0,
            "the server ended the lease it was asked to keep"
        );
        let expired = a
            .wait_within(Duration::from_secs(1), |e| {
                matches!(e, Event::SessionExpired).then_some(())
            })
            .await;
        assert!(
            expired.is_none(),
            "the member gave up a session whose lease the cluster kept"
        );
    }
    drop((renewer, renewed));

    proxy.up();
    let resumed = a
        .wait_for("SessionResumed or SessionExpired", |e| match e {
            Event::SessionResumed => Some(true),
            Event::SessionExpired => Some(false),
            _ => None,
        })
        .await;
    assert!(resumed, "the session ended although its lease lived");
    assert_eq!(a.session, first);
    assert!(matches!(
        a.heartbeat().await,
        Event::HeartbeatResult { result: Ok(()), .. }
    ));
    assert!(sandbox.get(&sandbox.member_key("a")).await.is_some());
    assert!(
        sandbox.get(&sandbox.owner_key(0)).await.is_some(),
        "the claim lives on with its lease"
    );
    a.backend.shutdown().await;
}

/// A server that answers keep-alives later than the keeper first waits for
/// them (a loaded one) suspends the session, but its late answers, each
/// proving the lease was renewed after its keep-alive was sent, resume it:
/// the member neither gives the lease up nor stays suspended while the
/// server keeps renewing it.
#[tokio::test]
async fn late_keep_alive_answers_resume_the_session() {
    let sandbox = Sandbox::new("late-answers").await;
    let (proxy, backend) = sandbox.behind_proxy(Duration::from_secs(5)).await;
    // Keep-alives every 2 s, each awaited 1 s before the session is
    // suspended.
    let session_timeout = Duration::from_secs(6);
    let mut a = common::Driver::start("etcd", backend, common::info("a"), session_timeout).await;
    let first = a.session;
    registered(a.register().await);

    // From now on every answer takes 1.6 s: later than the keeper first
    // waits.
    proxy.delay(Duration::from_millis(800));
    a.wait_for("SessionSuspended", |e| {
        matches!(e, Event::SessionSuspended { .. }).then_some(())
    })
    .await;
    let resumed = a
        .wait_for("SessionResumed or SessionExpired", |e| match e {
            Event::SessionResumed => Some(true),
            Event::SessionExpired => Some(false),
            _ => None,
        })
        .await;
    assert!(
        resumed,
        "the late answers were not taken: the session expired"
    );
    assert_eq!(a.session, first);
    assert!(
        sandbox.get(&sandbox.member_key("a")).await.is_some(),
        "the lease and its registration live on"
    );
    a.backend.shutdown().await;
}

/// Suspension, resumption and expiry, with the connection cut by a proxy:
/// a request in flight fails with ConnectionLoss, `last_heard` follows the
/// keep-alives, the same lease resumes, a member watch survives the broken
/// connection, and after an expiry a new lease is granted.
#[tokio::test]
async fn session_suspends_resumes_and_expires() {
    let sandbox = Sandbox::new("session").await;
    let (proxy, backend) = sandbox.behind_proxy(Duration::from_secs(1)).await;
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

    // Down until the server has dropped the lease: the member does not
    // conclude that from the silence (only the cluster ends a lease), but
    // learns it from the server once it is reachable again, and is granted
    // a new lease.
    proxy.down();
    a.wait_for("SessionSuspended", |e| {
        matches!(e, Event::SessionSuspended { .. }).then_some(())
    })
    .await;
    lease_ended(&sandbox, "a").await;
    assert!(
        !a.has(|e| matches!(e, Event::SessionExpired)),
        "the session was given up by the member's clock"
    );
    proxy.up();
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
