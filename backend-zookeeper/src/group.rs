//! What a joined member's requests share on ZooKeeper: the settings, the
//! group's layout, the member, and the member list as last read.

use std::collections::HashSet;
use std::sync::Mutex;

use tenure_core::records::Layout;
use tenure_core::MemberInfo;
use tenure_tokio::store::Registrations;
use zookeeper_client as zk;

use crate::session::Config;

/// What a joined member's requests share: the settings, the group's
/// layout, the member, and the member list as last read.
///
/// Claims, releases and commits of a partition hold its lock (the session
/// loop takes it). A commit reads the owner node, then writes in a multi
/// guarded by the node's version. An owner node's version is 0 whoever
/// created it, so the guard cannot tell our node from one re-created after
/// our own release (by another member, or by our own next claim). Other
/// members' deletions need our session to end, which fails the multi; our
/// own release or claim in between is what the lock excludes.
#[derive(Debug)]
pub(crate) struct GroupClient {
    pub(crate) config: Config,
    pub(crate) layout: Layout,
    pub(crate) member: MemberInfo,
    /// The member list as last read, for the next read to read only the
    /// registrations made since.
    pub(crate) listed: Mutex<Option<Listed>>,
}

impl GroupClient {
    /// The client of `member` of the group laid out as `layout`.
    pub(crate) fn new(config: Config, layout: Layout, member: MemberInfo) -> GroupClient {
        GroupClient {
            config,
            layout,
            member,
            listed: Mutex::new(None),
        }
    }
}

/// The member list as a listing found it: the members' node (its creation),
/// its child version then, and the registrations listed.
#[derive(Debug)]
pub(crate) struct Listed {
    pub(crate) parent: i64,
    pub(crate) child_version: i32,
    pub(crate) registrations: Registrations,
}

impl Listed {
    /// Whether a registration read for this listing still holds for a new
    /// listing of `children` with the node's `stat`. A registration is
    /// written once, at its creation, and every creation and deletion of a
    /// child counts one in the node's child version: when the count since
    /// is exactly the names that came and went, no registration that stayed
    /// listed was deleted and made again (with other contents) meanwhile.
    pub(crate) fn still_describes(&self, stat: &zk::Stat, children: &[String]) -> bool {
        if stat.czxid != self.parent {
            return false;
        }
        let changes = i64::from(stat.cversion) - i64::from(self.child_version);
        let came = children
            .iter()
            .filter(|id| !self.registrations.contains(id))
            .count();
        let listed: HashSet<&str> = children.iter().map(String::as_str).collect();
        let went = self
            .registrations
            .ids()
            .filter(|id| !listed.contains(id))
            .count();
        usize::try_from(changes).is_ok_and(|changes| changes == came + went)
    }
}

/// Takes the last listing out for the length of a read.
pub(crate) fn take_listed(listed: &Mutex<Option<Listed>>) -> Option<Listed> {
    // Nothing holding the lock panics; were it poisoned, the listing is
    // only a saving: read everything.
    listed.lock().map(|mut l| l.take()).unwrap_or(None)
}

/// Keeps a listing for the next read.
pub(crate) fn put_listed(listed: &Mutex<Option<Listed>>, value: Listed) {
    if let Ok(mut l) = listed.lock() {
        *l = Some(value);
    }
}
