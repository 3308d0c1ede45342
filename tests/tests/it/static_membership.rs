//! Static membership on the real ZooKeeper and etcd of `scripts/services`:
//! a rolling restart of every member of a group — each closes, keeping its
//! session, and a new instance of it joins with the same id and state file
//! — moves no partition: every partition keeps its owner and its fencing
//! token throughout, and the members that stay never see their assignment
//! change. A second process of a running static member is refused.

use tenure_tests as common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use common::etcd::Etcd;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::core::{MemberId, TopicPartition};
use tenure::tokio::{GroupMember, JoinError, StateFileError, StaticMembership, View};
use tokio::sync::mpsc;

const MEMBERS: [&str; 3] = ["m1", "m2", "m3"];
const PARTITIONS: u32 = 12;

fn state_dir(test: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("tenure-static-{test}-{nanos}"));
    std::fs::create_dir_all(&dir).expect("a state directory");
    dir
}

/// Every view the members publish, and what was owned under which token.
struct Views {
    log: mpsc::UnboundedSender<(MemberId, View)>,
    updates: mpsc::UnboundedReceiver<(MemberId, View)>,
    latest: BTreeMap<String, View>,
    /// Every (member, token) seen owning each partition since the last
    /// `forget`.
    owners: BTreeMap<TopicPartition, BTreeSet<(String, u64)>>,
    /// Every assignment each member that stays was seen with since the
    /// last `forget` (the one restarting starts from nothing).
    assignments: BTreeMap<String, BTreeSet<BTreeSet<TopicPartition>>>,
    restarting: Option<String>,
}

impl Views {
    fn new() -> Views {
        let (log, updates) = mpsc::unbounded_channel();
        Views {
            log,
            updates,
            latest: BTreeMap::new(),
            owners: BTreeMap::new(),
            assignments: BTreeMap::new(),
            restarting: None,
        }
    }

    fn apply(&mut self, member: MemberId, view: View) {
        let name = member.to_string();
        for (partition, token) in &view.owned {
            self.owners
                .entry(partition.clone())
                .or_default()
                .insert((name.clone(), token.0));
        }
        if view.settled && self.restarting.as_ref() != Some(&name) {
            self.assignments
                .entry(name.clone())
                .or_default()
                .insert(view.assigned.clone());
        }
        self.latest.insert(name, view);
    }

    fn catch_up(&mut self) {
        while let Ok((member, view)) = self.updates.try_recv() {
            self.apply(member, view);
        }
    }

    fn forget(&mut self) {
        self.owners.clear();
        self.assignments.clear();
    }

    /// Waits until every member is settled and together they own every
    /// partition once.
    async fn settled(&mut self, what: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            while let Ok((member, view)) = self.updates.try_recv() {
                self.apply(member, view);
            }
            if common::settled(&self.latest, &MEMBERS, PARTITIONS) {
                return;
            }
            match tokio::time::timeout_at(deadline, self.updates.recv()).await {
                Ok(Some((member, view))) => self.apply(member, view),
                Ok(None) => panic!("the view log closed"),
                Err(_) => panic!("not settled within 30 s {what}: {:#?}", self.latest),
            }
        }
    }

    /// Who owns what, under which token, by the latest views.
    fn owned(&self) -> BTreeMap<TopicPartition, (String, u64)> {
        let mut out = BTreeMap::new();
        for (member, view) in &self.latest {
            for (partition, token) in &view.owned {
                out.insert(partition.clone(), (member.clone(), token.0));
            }
        }
        out
    }
}

async fn join(
    stores: &dyn Stores,
    views: &Views,
    group: &str,
    member: &str,
    state: &std::path::Path,
) -> Result<GroupMember, JoinError> {
    GroupMember::builder(common::config(group, member).with_session_timeout(Duration::from_secs(8)))
        .partitions([(common::TOPIC.to_owned(), PARTITIONS)].into())
        .auto_drain(true)
        .view_log(views.log.clone())
        .static_membership(StaticMembership::new(state.join(format!("{member}.state"))))
        .join(stores.backend())
        .await
}

async fn a_rolling_restart_moves_nothing(stores: &dyn Stores, test: &str) {
    let group = common::group(test);
    let state = state_dir(test);
    let mut views = Views::new();
    let mut members = BTreeMap::new();
    for member in MEMBERS {
        let joined = join(stores, &views, &group, member, &state).await;
        members.insert(
            member,
            joined.unwrap_or_else(|e| panic!("{member} joins: {e}")),
        );
    }
    views.settled("at the start").await;
    // The state files hold the sessions' secrets: their owner's only.
    #[cfg(unix)]
    for member in MEMBERS {
        use std::os::unix::fs::PermissionsExt;
        let path = state.join(format!("{member}.state"));
        let mode = std::fs::metadata(&path)
            .expect("a state file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{} after a join", path.display());
    }
    let before = views.owned();
    assert_eq!(before.len(), PARTITIONS as usize);
    views.forget();

    // One after another: close (the session stays), and a new instance
    // joins with the same id and state file.
    for member in MEMBERS {
        let closing = members.remove(member).expect("running");
        let _ = closing.close().await.expect("close");
        // Settled again only once the new instance says so.
        views.catch_up();
        views.latest.remove(member);
        views.restarting = Some(member.to_owned());
        let restarted = join(stores, &views, &group, member, &state)
            .await
            .unwrap_or_else(|e| panic!("{member} restarts: {e}"));
        members.insert(member, restarted);
        views.settled(&format!("after {member} restarted")).await;
        views.restarting = None;
    }

    // Every partition kept its owner and token: seen with no other.
    for (partition, owner) in &before {
        let seen = views.owners.get(partition).cloned().unwrap_or_default();
        assert_eq!(
            seen,
            BTreeSet::from([owner.clone()]),
            "{partition} moved during the rolling restart"
        );
    }
    assert_eq!(views.owned(), before);
    // And no member was ever settled on another assignment.
    for (member, assignments) in &views.assignments {
        assert_eq!(
            assignments.len(),
            1,
            "{member}'s assignment changed: {assignments:?}"
        );
    }
    // The store agrees: the same owner records.
    for (partition, (member, _)) in &before {
        assert_eq!(
            stores.owner(&group, partition).await.as_deref(),
            Some(member.as_str())
        );
    }

    // A second instance of a running static member is refused, saying so.
    let second = join(stores, &views, &group, "m1", &state).await;
    match second {
        Err(JoinError::StateFile(StateFileError::Held { member, .. })) => assert_eq!(member, "m1"),
        Err(other) => panic!("expected the state file to be held, got {other}"),
        Ok(_) => panic!("a second instance of m1 joined"),
    }
    drop(members);

    // A state file others can read is refused, naming the file and its
    // mode.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let path = state.join("m4.state");
        std::fs::write(&path, "").expect("a state file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        match join(stores, &views, &group, "m4", &state).await {
            Err(JoinError::StateFile(error @ StateFileError::Exposed { .. })) => {
                let text = error.to_string();
                assert!(
                    text.contains("0644") && text.contains("chmod 600"),
                    "{text}"
                );
            }
            Err(other) => panic!("expected an exposed state file, got {other}"),
            Ok(_) => panic!("m4 joined with a state file others can read"),
        }
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_static_members_moves_nothing_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    a_rolling_restart_moves_nothing(&ZooKeeper::new("static").await, "static-zk").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_static_members_moves_nothing_on_etcd() {
    let _turn = crate::turns::shared().await;
    a_rolling_restart_moves_nothing(&Etcd::new("static").await, "static-etcd").await;
}

/// With `leave_on_close`, a static member's close leaves at once, as a
/// dynamic member's does: its claims are gone when the close returns.
async fn a_close_that_leaves_releases_everything(stores: &dyn Stores, test: &str) {
    let group = common::group(test);
    let state = state_dir(test);
    let mut views = Views::new();
    let member = GroupMember::builder(common::config(&group, "m1"))
        .partitions([(common::TOPIC.to_owned(), 2)].into())
        .auto_drain(true)
        .view_log(views.log.clone())
        .static_membership(StaticMembership::new(state.join("m1.state")).leave_on_close(true))
        .join(stores.backend())
        .await
        .expect("joins");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while views.owned().len() < 2 {
        match tokio::time::timeout_at(deadline, views.updates.recv()).await {
            Ok(Some((member, view))) => views.apply(member, view),
            _ => panic!("m1 does not own both partitions within 30 s"),
        }
    }
    let _ = member.close().await.expect("close");
    for p in 0..2 {
        assert_eq!(
            stores.owner(&group, &common::tp(p)).await,
            None,
            "the claim of partition {p} outlived the close"
        );
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_close_that_leaves_releases_everything_on_zookeeper() {
    let _turn = crate::turns::shared().await;
    a_close_that_leaves_releases_everything(
        &ZooKeeper::new("static-leave").await,
        "static-leave-zk",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_close_that_leaves_releases_everything_on_etcd() {
    let _turn = crate::turns::shared().await;
    a_close_that_leaves_releases_everything(&Etcd::new("static-leave").await, "static-leave-etcd")
        .await;
}
