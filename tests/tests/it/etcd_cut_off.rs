//! A node of the 3-node etcd cluster of `scripts/services` cut off from the
//! other two while members join, given every node. The cut node still
//! answers its clients but has no quorum. Each test takes its turn
//! alone (`crate::turns`): every client of the cluster feels a cut.

use std::collections::BTreeMap;
use std::time::Duration;

use tenure::admin::{AdminError, GroupAdmin, WriteGuard};
use tenure::etcd::EtcdAdmin;
use tenure::TopicPartition;
use tenure_tests as common;

use common::cluster::{Cluster, CutOff};
use common::etcd::Etcd;
use common::Monitor;

/// How long six members may take to share the partitions once they joined.
const SETTLE: Duration = Duration::from_secs(30);

/// The 3-node etcd cluster of `scripts/services`.
const CLUSTER: Cluster = Cluster::Etcd;

/// A follower cut off from the leader and the other follower, while this
/// test has its turn on the cluster.
struct FollowerCut {
    /// The node that led when the cut was made.
    leader: u8,
    /// The node cut off.
    follower: u8,
    // Dropped before the test's turn ends: the cut heals before the next
    // test starts.
    _cut: CutOff,
}

/// A prefix of test `test`'s own on the cluster, and a follower cut off
/// (the test has its turn alone).
async fn cut_a_follower(test: &str) -> (Etcd, FollowerCut) {
    let etcd = Etcd::on_cluster(test).await;
    let leader = CLUSTER.wait_for_leader();
    let follower = Cluster::follower_of(leader);
    let cut = CLUSTER.cut_off(follower);
    let cut = FollowerCut {
        leader,
        follower,
        _cut: cut,
    };
    (etcd, cut)
}

/// Six members join one after another while a follower is cut off from the
/// leader and the other follower. A join's first request, the lease grant,
/// may go to the cut node, which cannot answer it (and, once it notices,
/// says it has no leader): the member must then reach another node within
/// its connect timeout rather than give up. Each join must succeed, and the
/// six must then share the partitions as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_while_a_node_is_cut_off_from_the_quorum() {
    let _turn = crate::turns::alone().await;
    let (etcd, cut) = cut_a_follower("cut-off").await;

    let group = common::group("cut-off");
    let mut monitor = Monitor::new();
    let names = ["m1", "m2", "m3", "m4", "m5", "m6"];
    let mut members = Vec::new();
    for name in names {
        members.push(common::join(&etcd, &monitor, &group, name, 12).await);
    }
    monitor
        .until(SETTLE, "6 members owning 12 partitions", |v| {
            common::settled(v, &names, 12)
        })
        .await;
    // Read through the leader: the cut node cannot answer.
    let observer = etcd.read_through(&CLUSTER.server(cut.leader)).await;
    common::store_agrees(&observer, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}

/// The operator's tooling with a follower cut off from the quorum. Given
/// that node alone, it must say the node has no leader (rather than wait
/// out its timeout with nothing to say why); given every node, each of its
/// reads and writes must be answered, a refusal from the cut node sent
/// again to another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_goes_past_a_node_cut_off_from_the_quorum() {
    let _turn = crate::turns::alone().await;
    let (etcd, cut) = cut_a_follower("cut-off-admin").await;
    let cut_endpoint = CLUSTER.server(cut.follower);

    // The cut node says it has no leader once it has noticed the cut (an
    // election timeout after it): until then, a request waits on it.
    let mut said = Vec::new();
    loop {
        match EtcdAdmin::connect(&cut_endpoint, etcd.prefix(), Duration::from_secs(2)).await {
            Ok(_) => panic!("the node cut off from the quorum answered a read"),
            Err(AdminError::Unreachable { detail, .. }) if detail.contains("no leader") => break,
            Err(other) => said.push(other.to_string()),
        }
        assert!(
            said.len() < 10,
            "the cut node never said it has no leader; the admin said: {said:#?}"
        );
    }

    let all = CLUSTER.servers().join(",");
    let admin = EtcdAdmin::connect(&all, etcd.prefix(), Duration::from_secs(10))
        .await
        .expect("the admin connects through the nodes with a leader");
    let group = common::group("cut-off-admin");
    let partition = TopicPartition::new("orders", 0);
    // Each request picks a node of the three: over twelve, the cut one is
    // all but sure to be among them.
    for n in 0..12i64 {
        let offsets = BTreeMap::from([(partition.clone(), n)]);
        admin
            .write_offsets(&group, &offsets, WriteGuard::NoLiveMembers)
            .await
            .unwrap_or_else(|e| panic!("write {n} with node {} cut off: {e}", cut.follower));
        let records = admin
            .records(&group)
            .await
            .unwrap_or_else(|e| panic!("read {n} with node {} cut off: {e}", cut.follower));
        assert_eq!(records.offsets.get(&partition), Some(&n));
    }
}
