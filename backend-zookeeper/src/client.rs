//! The ZooKeeper client of a joined member as the runtime's session loop
//! uses it: the [`Connector`] that opens its first session, and the
//! [`StoreClient`] that opens the next, follows each, and ends it —
//! closed, left to a restarted process, or dropped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tenure_core::records::Layout;
use tenure_core::SessionId;
use tenure_tokio::store::{
    Connected, Connector, RequestCounts, SessionChange, SessionKeeper, StoreClient, Wire,
};
use tenure_tokio::{BackendError, Joining, SessionTicket};
use zookeeper_client as zk;

use crate::group::GroupClient;
use crate::ops::Ctx;
use crate::session::{claims_held, connect, resume, Config, Current};

/// How long a close waits for the server to confirm that the session is
/// closed.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

#[async_trait]
impl StoreClient for GroupClient {
    type Session = Current;
    type Keeper = Keeper;
    type Ops = Ctx;

    fn store(&self) -> String {
        self.config.store()
    }

    fn session_id(session: &Current) -> SessionId {
        session.session
    }

    /// A follower counts a request as its session's activity, and the
    /// leader, which expires sessions, hears of it only with the
    /// follower's answer to its next ping, sent within half a tick. A
    /// server grants no session shorter than two ticks (ZooKeeper's
    /// `minSessionTimeout` default), so half a tick is at most a quarter of
    /// the granted session; a third leaves room for the ping's own delay.
    /// A request sent that long after a renewal's answer shows, when it is
    /// answered, that the follower sent its report; one sent after that
    /// answer shows the leader counted it.
    fn counted_after(&self, session: &Current) -> Duration {
        session.client.session_timeout() / 3
    }

    fn keeper(&self, session: &Current) -> Keeper {
        Keeper {
            watcher: session.client.state_watcher(),
        }
    }

    fn ops(self: &Arc<Self>, session: &Current, wire: &Wire) -> Ctx {
        Ctx {
            group: self.clone(),
            client: session.client.clone(),
            session: session.session,
            wire: wire.clone(),
        }
    }

    /// An expired ZooKeeper session is terminal for its client: a new
    /// client, with a new session.
    async fn reopen(&self, _expired: &Current) -> Result<Current, BackendError> {
        let client = connect(&self.config).await?;
        tracing::info!(session = %client.session_id(), "new ZooKeeper session established");
        Ok(Current::new(client))
    }

    fn ticket(&self, session: &Current) -> Option<SessionTicket> {
        Some(ticket_of(&session.client))
    }

    async fn close(&self, mut current: Current) {
        if self.config.detached {
            // A detached client leaves its session behind when dropped: a
            // client that resumes it, not detached, closes it on its way out.
            // The detached one must be gone first, or the two take the
            // session from each other (see `let_go`).
            let ticket = ticket_of(&current.client);
            let_go(current.client).await;
            match resume(&self.config.attached(), &ticket).await {
                Some(client) => current.client = client,
                None => return,
            }
        }
        // The session closes when the last clone of its client is dropped:
        // the session loop has stopped every task that held one.
        let session = current.client.session_id();
        if stopped(current.client, CLOSE_TIMEOUT).await {
            tracing::info!(%session, "ZooKeeper session closed");
        } else {
            tracing::warn!(
                %session,
                "ZooKeeper did not confirm the session's close within {CLOSE_TIMEOUT:?}; \
                 its ephemeral nodes vanish when it expires"
            );
        }
    }

    async fn detach(&self, current: Current) {
        if !self.config.detached {
            // A session that is not detached closes with its client.
            return self.close(current).await;
        }
        let session = current.client.session_id();
        // The next process resumes the session as soon as this returns
        // (the state file is let go then): see `let_go`.
        if let_go(current.client).await {
            tracing::info!(
                %session,
                "ZooKeeper session left to run out, for a restarted process to resume"
            );
        }
    }

    /// With the last client clone gone the session closes in the
    /// background (or, detached, is left to run out).
    fn abandon(&self, current: Current) {
        drop(current);
    }
}

#[async_trait]
impl Connector for Config {
    type Client = GroupClient;

    fn request_counts(&self) -> Arc<RequestCounts> {
        self.requests.clone()
    }

    async fn connect(&mut self, joining: &Joining) -> Result<Connected<GroupClient>, BackendError> {
        self.session_timeout = joining.session_timeout;
        self.security.check()?;
        self.detached = joining.static_membership;
        let before = Instant::now();
        let (client, resumed) = match &joining.resume {
            Some(ticket) => match resume(self, ticket).await {
                Some(client) => (client, true),
                None => (connect(self).await?, false),
            },
            None => (connect(self).await?, false),
        };
        // The client applies the chroot of the connect string.
        let layout = Layout::new("", &joining.group);
        // Credentials that do not match the group's ACL would fail every
        // request, each reported on its own: say it once, before joining.
        if let Err(zk::Error::NoAuth) = client.list_children(&layout.ids()).await {
            return Err(BackendError::Denied {
                store: self.store(),
                detail: format!(
                    "the znodes of group {:?} were created under an ACL these credentials do \
                     not satisfy; use the digest credentials the group's members use \
                     (ZooKeeperSecurity::digest)",
                    joining.group
                ),
                source: None,
            });
        }
        let claims_held = match resumed {
            // The claims the previous process left under the session.
            true => Some(claims_held(&client, &layout).await),
            false => None,
        };
        let group = GroupClient::new(self.clone(), layout, joining.member.clone());
        let connected = Connected::new(group, Current::new(client), before);
        Ok(match claims_held {
            Some(claims) => connected.resumed(claims),
            None => connected,
        })
    }
}

/// Follows one session through its client's state watcher.
#[derive(Debug)]
pub(crate) struct Keeper {
    watcher: zk::StateWatcher,
}

#[async_trait]
impl SessionKeeper for Keeper {
    async fn next_change(&mut self, _wire: &Wire) -> SessionChange {
        // Anything that reconnects after this moment was heard by the
        // server after it.
        let waiting_since = Instant::now();
        match self.watcher.changed().await {
            zk::SessionState::Disconnected => SessionChange::Suspended {
                why: "connection to ZooKeeper lost".to_owned(),
            },
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                SessionChange::Alive {
                    heard: waiting_since,
                }
            }
            zk::SessionState::Expired | zk::SessionState::AuthFailed => SessionChange::Expired,
            zk::SessionState::Closed => SessionChange::Closed,
        }
    }
}

/// Drops `client`, the last clone of it, and waits up to `timeout` for its
/// session task to end (after closing the session, unless detached):
/// whether it did.
async fn stopped(client: zk::Client, timeout: Duration) -> bool {
    let mut watcher = client.state_watcher();
    drop(client);
    let ended = tokio::time::timeout(timeout, async {
        loop {
            if watcher.peek_state().is_terminated() {
                return;
            }
            watcher.changed().await;
        }
    });
    ended.await.is_ok()
}

/// Lets go of a detached client before another client resumes its session:
/// drops it and waits until it has stopped. Until then it is connected, or
/// reconnecting, under the session: the server closes the older connection
/// of a session when a newer one opens, and a client whose connection
/// closes reconnects, closing the other's. The client that resumes would
/// then fail with a lost connection and open a new session, leaving this
/// one, with every record of the member, to run out: its partitions would
/// move after all. Whether it stopped within `CLOSE_TIMEOUT`.
async fn let_go(client: zk::Client) -> bool {
    let session = client.session_id();
    let gone = stopped(client, CLOSE_TIMEOUT).await;
    if !gone {
        tracing::warn!(
            %session,
            "the ZooKeeper client of the session did not stop within {CLOSE_TIMEOUT:?}; \
             a client resuming the session may lose it to this one"
        );
    }
    gone
}

/// The ticket of a client's session.
fn ticket_of(client: &zk::Client) -> SessionTicket {
    let session = client.session();
    SessionTicket {
        id: session.id().0,
        secret: session.password().to_vec(),
    }
}
