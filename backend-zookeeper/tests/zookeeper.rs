//! The backend against a real ZooKeeper (`TENURE_ZOOKEEPER`, started by
//! `scripts/services start zookeeper`). Each test works in its own chroot.
//!
//! Only what is this store's own is here (its sessions, how it starts and
//! ends them, its races); the scenarios every store shares (registration,
//! claims, fenced commits, batches, corrupt records, stale sessions) are
//! the conformance suite's (`tests/tests/it/conformance/`), which runs them
//! on ZooKeeper too.

mod common;

use std::time::{Duration, Instant};

use common::{partition, Sandbox};
use tenure_core::{
    ClaimOutcome, Event, FencingToken, RegisterOutcome, StoreError, StoreOp, StoreRequest,
};
use tenure_tokio::{Backend, BackendError};
use tenure_zookeeper::{Hooks, ZooKeeperBackend};
use zookeeper_client as zk;

fn created(event: Event) -> FencingToken {
    match event {
        Event::ClaimResult {
            result: Ok(ClaimOutcome::Created { token, .. }),
            ..
        } => token,
        other => panic!("expected a created claim, got {other:?}"),
    }
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
            read_offset: false,
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
