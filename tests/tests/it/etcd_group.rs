//! The group scenarios on a real etcd, each test under its own key prefix.
//! Start the server with `eval "$(scripts/services start)"` (which sets
//! `TENURE_ETCD`); `scripts/test` does it for you.

use tenure_tests as common;

use common::etcd::Etcd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    let _turn = crate::turns::shared().await;
    common::three_members_share_twelve_partitions(&Etcd::new("balanced").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    let _turn = crate::turns::shared().await;
    common::a_fourth_member_moves_only_what_it_takes(&Etcd::new("join").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    let _turn = crate::turns::shared().await;
    common::a_closing_member_hands_over_with_its_final_offsets(&Etcd::new("close").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::a_dead_member_is_replaced_within_the_session_timeout(&Etcd::new("kill").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_grants_the_configs_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::the_store_grants_the_configs_session_timeout(&Etcd::new("session").await).await;
}
