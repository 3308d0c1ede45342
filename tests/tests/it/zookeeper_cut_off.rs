//! A follower of the 3-node ZooKeeper ensemble of `scripts/services` cut off
//! from the other two. Until it notices (`syncLimit` ticks without word from
//! its leader), it goes on answering its clients' reads from what it had
//! applied: the operator's tooling must not take such an answer for the
//! group's state. Each test takes its turn alone (`crate::turns`): every
//! client of the ensemble feels a cut.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::admin::{GroupAdmin, WriteGuard};
use tenure::core::records::{parse_offset, Layout};
use tenure::zookeeper::ZooKeeperAdmin;
use tenure::TopicPartition;
use tenure_testkit::zookeeper_server as server;
use tenure_tests as common;
use zookeeper_client as zk;

use common::cluster::Cluster;

/// The 3-node ZooKeeper ensemble of `scripts/services`.
const CLUSTER: Cluster = Cluster::ZooKeeper;

/// How long a read of the cut node may wait before the test calls it
/// unanswered: well past the 2 s (`syncLimit` × `tickTime`) in which the
/// node notices the cut and drops its clients.
const PATIENCE: Duration = Duration::from_secs(10);

/// An operator's tool on a follower, its group's offset moved on through
/// the leader just after the follower was cut off. The follower still
/// answers a plain read with the old offset, as the first half shows. The
/// admin's read of the group must give the new offset or no answer, never
/// the old one: it syncs with the leader first, which a cut-off node cannot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_never_reads_a_cut_off_follower_behind() {
    let _turn = crate::turns::alone().await;
    let leader = CLUSTER.wait_for_leader();
    let follower = Cluster::follower_of(leader);
    let chroot = server::fresh_chroot_at(&CLUSTER.servers().join(","), "cut-off-admin").await;
    let node = |number: u8| CLUSTER.server(number);

    let timeout = Duration::from_secs(10);
    let through_leader = ZooKeeperAdmin::connect(&format!("{}{chroot}", node(leader)), timeout)
        .await
        .expect("an admin on the leader");
    let on_follower = ZooKeeperAdmin::connect(&format!("{}{chroot}", node(follower)), timeout)
        .await
        .expect("an admin on the follower");
    let plain = zk::Client::connect(&format!("{}{chroot}", node(follower)))
        .await
        .expect("a plain client on the follower");

    let group = common::group("cut-off-admin");
    let partition = TopicPartition::new("orders", 0);
    let path = Layout::new("", &group).offset(&partition);
    let write = |offset: i64| {
        let offsets = BTreeMap::from([(partition.clone(), offset)]);
        let admin = &through_leader;
        let group = &group;
        async move {
            admin
                .write_offsets(group, &offsets, WriteGuard::NoLiveMembers)
                .await
                .unwrap_or_else(|e| panic!("writing offset {offset} through the leader: {e}"));
        }
    };
    write(1).await;
    let before = on_follower
        .records(&group)
        .await
        .expect("read before the cut");
    assert_eq!(before.offsets.get(&partition), Some(&1));

    let cut = CLUSTER.cut_off(follower);
    write(2).await;

    // The premise: the cut node answers a read that skips the sync, and
    // its answer is behind.
    let (data, _) = tokio::time::timeout(PATIENCE, plain.get_data(&path))
        .await
        .unwrap_or_else(|_| panic!("node {follower}, just cut off, did not answer a read"))
        .unwrap_or_else(|e| {
            panic!("node {follower} stopped answering before the test could look: {e}")
        });
    let plain_offset = parse_offset(&path, &data).expect("an offset record");
    assert_eq!(
        plain_offset, 1,
        "node {follower}, cut off, answered with the new offset: nothing to test"
    );

    match tokio::time::timeout(PATIENCE, on_follower.records(&group)).await {
        Err(_) | Ok(Err(_)) => {}
        Ok(Ok(records)) => assert_eq!(
            records.offsets.get(&partition),
            Some(&2),
            "the admin on node {follower}, cut off from leader {leader}, read an offset \
             the group had moved past"
        ),
    }
    // The cut heals here, before the next test's turn.
    drop(cut);
}
