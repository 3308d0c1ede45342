//! The explorer's store as etcd keeps leases
//! ([`ExploreConfig::etcd`](super::ExploreConfig::etcd)): a lease is
//! renewed by keep-alives alone, and counted as the etcd backend counts it.

use std::time::{Duration, Instant};

use tenure_core::protocol::Event;
use tenure_core::types::SessionId;

use super::model::{Model, Msg};
use super::state::State;
use crate::etcd::EtcdCluster;

impl State {
    /// Node `node`'s client sends a keep-alive of `session` if one is due,
    /// a third of the TTL after the last one was answered: the leader
    /// renews the lease now, and the answer, on its way back, tells the
    /// member it was renewed after it was sent. Whether one renewed the
    /// lease now.
    pub(super) fn keep_alive(&mut self, model: &Model, node: usize, session: SessionId) -> bool {
        let interval = model.store_timeout() / 3;
        if self.now < self.nodes[node].last_contact + interval {
            // Not due; a lease past its deadline is still revoked.
            self.alive_at_leader(model, session);
            return false;
        }
        if !self.server_touch(model, session) {
            return false;
        }
        let event = Event::SessionRenewed {
            sent: self.now,
            counted_after: Duration::ZERO,
        };
        self.send(Msg::Reply { node, event });
        true
    }

    /// The renewal the etcd backend reports with `events`, answered now to
    /// node `node` for a request sent at `sent`: a heartbeat
    /// (`LeaseTimeToLive`) tells how much of the TTL is left, in whole
    /// seconds rounded down, so the lease was renewed no earlier than it
    /// was sent less the part gone. No other answer renews anything.
    pub(super) fn lease_renewal(
        &self,
        model: &Model,
        node: usize,
        sent: Instant,
        events: &[Event],
    ) -> Option<Event> {
        let ttl = model.lease_ttl?;
        let heartbeat = |e: &Event| matches!(e, Event::HeartbeatResult { result: Ok(()), .. });
        if !events.iter().any(heartbeat) {
            return None;
        }
        let deadline = self.store.session_deadline(self.nodes[node].session?)?;
        Some(Event::SessionRenewed {
            sent: EtcdCluster::renewed_by(ttl, sent, deadline, self.now)?,
            counted_after: Duration::ZERO,
        })
    }
}
