//! The group scenarios on the embedded in-memory store.

use tenure_tests as common;

use common::memory::Memory;

fn stores() -> Memory {
    Memory::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    common::three_members_share_twelve_partitions(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    common::a_fourth_member_moves_only_what_it_takes(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    common::a_closing_member_hands_over_with_its_final_offsets(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    common::a_dead_member_is_replaced_within_the_session_timeout(&stores()).await;
}
