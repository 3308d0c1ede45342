//! The group scenarios on a real ZooKeeper, each test in its own chroot.
//! Start the server with `eval "$(scripts/services start)"` (which sets
//! `TENURE_ZOOKEEPER`); `scripts/test` does it for you.

use tenure_tests as common;

use common::zookeeper::ZooKeeper;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    let _turn = crate::turns::shared().await;
    common::three_members_share_twelve_partitions(&ZooKeeper::new("balanced").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    let _turn = crate::turns::shared().await;
    common::a_fourth_member_moves_only_what_it_takes(&ZooKeeper::new("join").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    let _turn = crate::turns::shared().await;
    common::a_closing_member_hands_over_with_its_final_offsets(&ZooKeeper::new("close").await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::a_dead_member_is_replaced_within_the_session_timeout(&ZooKeeper::new("kill").await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_grants_the_configs_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::the_store_grants_the_configs_session_timeout(&ZooKeeper::new("session").await).await;
}

/// A close that cannot finish in time (the store is cut off) stops the
/// member like a crash: it says so, and its claims stay until its session
/// expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_out_of_time_stops_the_member_like_a_crash() {
    let _turn = crate::turns::shared().await;
    use std::time::Duration;
    use tenure::tokio::{CloseError, GroupMember};

    let zookeeper = ZooKeeper::new("out-of-time").await;
    let group = common::group("out-of-time");
    let (backend, proxy) = zookeeper.through_proxy().await;
    let member = GroupMember::builder(common::config(&group, "m1"))
        .partitions([(common::TOPIC.to_owned(), 2)].into())
        .auto_drain(true)
        .join(backend)
        .await
        .expect("joins");
    let mut view = member.watch_view();
    tokio::time::timeout(
        Duration::from_secs(10),
        view.wait_for(|v| v.settled && v.fetching.len() == 2),
    )
    .await
    .expect("settles within 10 s")
    .expect("the view is published");
    proxy.stall();
    let closed = member.close_within(Duration::from_millis(500)).await;
    assert!(
        matches!(closed, Err(CloseError::TimedOut { .. })),
        "{closed:?}"
    );
    assert_eq!(
        common::Stores::owner(&zookeeper, &group, &common::tp(0)).await,
        Some("m1".to_owned()),
        "the claim went with a close that was cut short"
    );
}
