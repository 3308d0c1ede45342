//! A node of the 3-node etcd cluster of `scripts/services` cut off from the
//! other two while members join, given every node. The cut node still
//! answers its clients but has no quorum; no other test of this binary
//! runs beside it, since every member of the cluster would feel the cut.

use std::time::Duration;

use tenure_tests as common;

use common::cluster::Cluster;
use common::etcd::Etcd;
use common::Monitor;

/// How long six members may take to share the partitions once they joined.
const SETTLE: Duration = Duration::from_secs(30);

/// Six members join one after another while a follower is cut off from the
/// leader and the other follower. A join's first request, the lease grant,
/// may go to the cut node, which cannot answer it (and, once it notices,
/// says it has no leader): the member must then reach another node within
/// its connect timeout rather than give up. Each join must succeed, and the
/// six must then share the partitions as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_while_a_node_is_cut_off_from_the_quorum() {
    let cluster = Cluster::Etcd;
    let etcd = Etcd::on_cluster("cut-off").await;
    let leader = cluster.wait_for_leader();
    let cut = (1..=3u8).find(|n| *n != leader).unwrap_or(1);
    let _cut = cluster.cut_off(cut);

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
    let leader_endpoint = &cluster.servers()[usize::from(leader - 1)];
    let observer = etcd.read_through(leader_endpoint).await;
    common::store_agrees(&observer, &group, &monitor).await;
    for member in members {
        let _ = member.close().await.expect("close");
    }
}
