//! The group scenarios on the embedded in-memory store.

use tenure_tests as common;

use common::memory::Memory;

fn stores() -> Memory {
    Memory::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    let _turn = crate::turns::shared().await;
    common::three_members_share_twelve_partitions(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    let _turn = crate::turns::shared().await;
    common::a_fourth_member_moves_only_what_it_takes(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    let _turn = crate::turns::shared().await;
    common::a_closing_member_hands_over_with_its_final_offsets(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    let _turn = crate::turns::shared().await;
    common::a_dead_member_is_replaced_within_the_session_timeout(&stores()).await;
}

/// An application that reads no assignment changes costs a bounded amount
/// of memory: with more partitions than the events channel holds, the
/// member coalesces to the latest change of each partition, and once the
/// application reads, every partition's change arrives, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_assignment_changes_stay_bounded_and_none_is_lost() {
    let _turn = crate::turns::shared().await;
    use std::collections::BTreeSet;
    use tenure::tokio::{AssignmentEvent, GroupMember, EVENTS_CAPACITY};

    let stores = stores();
    let partitions = (EVENTS_CAPACITY + 200) as u32;
    let group = common::group("unread");
    // A session long enough that a step over 1,200 partitions in a debug
    // build on a loaded machine never looks like lost contact: this test is
    // about the events' bound, and a suspension would be a change of its
    // own.
    let config =
        common::config(&group, "m1").with_session_timeout(std::time::Duration::from_secs(10));
    let member = GroupMember::builder(config)
        .partitions([(common::TOPIC.to_owned(), partitions)].into())
        .auto_drain(true)
        .join(common::Stores::backend(&stores))
        .await
        .expect("joins");
    let (member, streams) = member.split();
    let mut events = streams.events;
    // Nothing read until every partition is owned and fetched.
    let mut view = member.watch_view();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        view.wait_for(|v| v.settled && v.fetching.len() == partitions as usize),
    )
    .await
    .expect("settles within 30 s")
    .expect("the view is published");
    let mut assigned = BTreeSet::new();
    while assigned.len() < partitions as usize {
        match tokio::time::timeout(std::time::Duration::from_secs(10), events.next()).await {
            Ok(Some(AssignmentEvent::Assigned { partition, .. })) => {
                assert!(
                    assigned.insert(partition.partition),
                    "{partition} assigned twice"
                );
            }
            Ok(Some(other)) => panic!("unexpected change {other:?}"),
            Ok(None) => panic!("the events ended"),
            Err(_) => panic!(
                "only {} of {partitions} assignments arrived",
                assigned.len()
            ),
        }
    }
    assert_eq!(events.try_next(), None, "more changes than partitions");
    let _ = member.close().await.expect("closes");
}
