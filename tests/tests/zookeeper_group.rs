//! The group scenarios on a real ZooKeeper, each test in its own chroot.
//! Start the server with `eval "$(scripts/services start)"` (which sets
//! `TENURE_ZOOKEEPER`); `scripts/test` does it for you.

use tenure_tests as common;

use common::zookeeper::ZooKeeper;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    common::three_members_share_twelve_partitions(&ZooKeeper::new("balanced").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    common::a_fourth_member_moves_only_what_it_takes(&ZooKeeper::new("join").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    common::a_closing_member_hands_over_with_its_final_offsets(&ZooKeeper::new("close").await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    common::a_dead_member_is_replaced_within_the_session_timeout(&ZooKeeper::new("kill").await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_grants_the_configs_session_timeout() {
    common::the_store_grants_the_configs_session_timeout(&ZooKeeper::new("session").await).await;
}
