//! What a joined member's requests share on etcd.

use std::sync::Mutex;
use std::time::Duration;

use etcd_client::Client;
use tenure_core::MemberInfo;
use tenure_tokio::store::Registrations;

use crate::errors::lease_not_found;
use crate::keys::Keys;
use crate::session::Config;
use crate::watches;

#[cfg(doc)]
use tenure_tokio::store::Wire;

/// What a joined member's requests share: the settings, the group's keys,
/// the member, the client, the watch stream, and the member list as last
/// read.
///
/// Claims, releases and commits of a partition hold its lock (the session
/// loop takes it). Each of those is a single transaction, so no
/// interleaving can break one; the lock keeps them in submission order (a
/// commit submitted before a release reaches the server before it), as on
/// ZooKeeper. The lease's last renewal is what the member's
/// [`Wire::last_heard`] follows here: a lease lives TTL after its last
/// renewal, and other requests do not renew it.
pub(crate) struct GroupClient {
    pub(crate) config: Config,
    pub(crate) keys: Keys,
    pub(crate) member: MemberInfo,
    /// The client; it reconnects by itself and outlives leases.
    pub(crate) client: Client,
    /// The one watch stream that carries every watch, across leases.
    pub(crate) watches: watches::Watches,
    /// The registrations as last read and the revision they were read at,
    /// for the next read to read only those changed since.
    pub(crate) registrations: Mutex<Option<(i64, Registrations)>>,
}

impl std::fmt::Debug for GroupClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupClient")
            .field("config", &self.config)
            .field("keys", &self.keys)
            .field("member", &self.member.id)
            .finish_non_exhaustive()
    }
}

impl GroupClient {
    /// The client of `member` of the group whose keys are `keys`.
    pub(crate) fn new(
        config: Config,
        keys: Keys,
        member: MemberInfo,
        client: Client,
        watches: watches::Watches,
    ) -> GroupClient {
        GroupClient {
            config,
            keys,
            member,
            client,
            watches,
            registrations: Mutex::new(None),
        }
    }

    /// Revokes `lease` within `timeout`: whether it is gone (revoked now,
    /// or already).
    pub(crate) async fn revoke(&self, lease: i64, timeout: Duration) -> Result<(), String> {
        let mut client = self.client.clone();
        match tokio::time::timeout(timeout, client.lease_revoke(lease)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if lease_not_found(&e) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {timeout:?}")),
        }
    }
}
