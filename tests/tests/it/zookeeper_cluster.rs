//! The group scenarios on the 3-node ZooKeeper ensemble of `scripts/services` (which sets
//! `TENURE_ZOOKEEPER_CLUSTER`), each test under its own chroot; the end-to-end runs with
//! a node killed mid-run are in `kafka_e2e.rs`.

use tenure_tests as common;

use common::zookeeper::ZooKeeper;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    let _turn = crate::turns::shared().await;
    common::three_members_share_twelve_partitions(&ZooKeeper::on_cluster("balanced", 1).await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    let _turn = crate::turns::shared().await;
    common::a_fourth_member_moves_only_what_it_takes(&ZooKeeper::on_cluster("join", 1).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    let _turn = crate::turns::shared().await;
    common::a_closing_member_hands_over_with_its_final_offsets(
        &ZooKeeper::on_cluster("close", 1).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::a_dead_member_is_replaced_within_the_session_timeout(
        &ZooKeeper::on_cluster("kill", 1).await,
    )
    .await;
}
