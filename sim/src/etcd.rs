//! A replicated etcd cluster as it bears on leases and on reaching a
//! server: what it is ([`EtcdCluster`]).

use std::time::{Duration, Instant};

/// An etcd cluster as it bears on leases: a few servers, each member's
/// client on one of them. The leader alone expires leases, renewed by
/// keep-alives that reach it through the client's server; every request
/// is linearizable, so it too needs the leader. A server can lose the
/// quorum (a fault, for a while or for good): it serves nothing; what
/// reaches it waits, and is never applied, until the client gives up on
/// it (a request after its timeout); once the server has noticed it has no leader (an election timeout
/// later), a request that asks for a leader (etcd's require-leader) is
/// refused at once with "no leader". A client whose keep-alive is refused
/// or goes unanswered, or whose request is refused, tries the next server.
/// When the leader loses the quorum, the others elect another, which
/// extends every lease.
///
/// Leases are counted as the etcd backend counts them: a keep-alive, sent
/// every third of the lease and renewed by the leader when it arrives,
/// counts from when it was sent; the heartbeat (`LeaseTimeToLive`) counts
/// from when it was sent less the part of the TTL already gone, in whole
/// seconds as etcd answers; no other answer renews anything, and no
/// other request renews the lease.
///
/// A new lease (a join, a restart, a lease after an expiry) is granted
/// through the client's server, tried up to `grant_tries` times within
/// the connect timeout, each try on the next server: a join whose every
/// try fails while a quorum serves is a broken property.
#[derive(Clone, Debug)]
pub struct EtcdCluster {
    /// Servers in the cluster.
    pub servers: usize,
    /// How long a server cut off from the quorum takes to notice it has
    /// no leader (etcd's election timeout), and how long an election takes.
    pub notice: Duration,
    /// The member's backend asks for a server with a leader (etcd's
    /// require-leader); `false` models the backend without it.
    pub require_leader: bool,
    /// How many tries a lease grant gets within the connect timeout, each
    /// with an equal share of it.
    pub grant_tries: u32,
    /// How long the backend waits for a lease to be granted.
    pub connect_timeout: Duration,
    /// The backend counts every answer as a renewal, at once, as on one
    /// node (to show the model finds that on etcd, where only keep-alives
    /// renew a lease).
    pub answers_renew: bool,
}

impl EtcdCluster {
    /// Three servers with etcd's default election timeout (1 s) and the
    /// etcd backend's own settings: require-leader, three tries of a lease
    /// grant within the 5 s connect timeout.
    pub fn etcd() -> EtcdCluster {
        EtcdCluster {
            servers: 3,
            notice: Duration::from_secs(1),
            require_leader: true,
            grant_tries: 3,
            connect_timeout: Duration::from_secs(5),
            answers_renew: false,
        }
    }

    /// How long the backend waits for the answer to one request: half
    /// the session, at least a second (the etcd backend's default).
    pub fn request_timeout(&self, session_timeout: Duration) -> Duration {
        (session_timeout / 2).max(Duration::from_secs(1))
    }

    /// The lease's TTL for a session of `session_timeout`: whole seconds,
    /// rounded up (the etcd backend's).
    pub fn ttl(&self, session_timeout: Duration) -> Duration {
        let rounded_up = session_timeout.as_secs() + u64::from(session_timeout.subsec_nanos() > 0);
        Duration::from_secs(rounded_up.max(1))
    }

    /// No later than when a lease of `ttl` was last renewed, as the etcd
    /// backend counts it from a heartbeat (`LeaseTimeToLive`) sent at
    /// `sent` and answered at `now` by a leader that expires it at
    /// `deadline`: etcd tells the TTL left in whole seconds, rounded
    /// down, so the lease was renewed no earlier than `sent` less the part
    /// of the TTL gone.
    pub(crate) fn renewed_by(
        ttl: Duration,
        sent: Instant,
        deadline: Instant,
        now: Instant,
    ) -> Option<Instant> {
        let left = Duration::from_secs(deadline.saturating_duration_since(now).as_secs());
        sent.checked_sub(ttl.saturating_sub(left))
    }

    /// The backend as it was before it asked for a leader: one try of a
    /// lease grant, held by a server cut off from the quorum until the
    /// connect timeout runs out.
    pub fn without_require_leader() -> EtcdCluster {
        EtcdCluster {
            require_leader: false,
            grant_tries: 1,
            ..EtcdCluster::etcd()
        }
    }
}
