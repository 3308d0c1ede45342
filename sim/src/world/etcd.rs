//! A replicated etcd cluster as it bears on leases
//! ([`EtcdCluster`](crate::EtcdCluster)): servers that lose the quorum,
//! clients that move to another server, lease grants tried again, and a
//! new leader that extends every lease.

use std::time::{Duration, Instant};

use tenure_core::error::StoreError;
use tenure_core::protocol::Event;
use tenure_core::types::{RequestId, SessionId};

use super::parts::{Action, Fault, Isolation, Link, World};
use crate::etcd::EtcdCluster;

/// How soon a client whose keep-alive was refused or went unanswered
/// tries again, on the next server (the etcd backend's pause while
/// suspended).
const RETRY_WHILE_SUSPENDED: Duration = Duration::from_millis(500);

/// The pause between two tries of a lease grant (the etcd backend's).
const GRANT_RETRY: Duration = Duration::from_millis(100);

/// The pause before a new lease is asked for again after every try of one
/// failed (the runtime's first reconnection backoff).
const REGRANT_BACKOFF: Duration = Duration::from_secs(1);

/// What a server does with a client's request or keep-alive now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Reach {
    /// It has a leader: the request is served.
    Serves,
    /// It has no leader, or has not noticed it lost the quorum: the request
    /// waits and is never applied.
    Holds,
    /// It knows it has no leader, and the request asks for one: "no
    /// leader", at once.
    Refuses,
}

impl World {
    /// What node `index`'s server does with its requests now: on one node
    /// or an ensemble, it serves them (the ensemble's own faults are
    /// elsewhere).
    pub(super) fn reach(&self, index: usize) -> Reach {
        let Some(cluster) = &self.config.etcd else {
            return Reach::Serves;
        };
        let server = self.nodes[index].server;
        let cut = self
            .isolated
            .filter(|i| i.server == server && i.until.is_none_or(|t| t > self.now));
        let since = match (cut, self.leaderless_until) {
            (Some(isolation), _) => isolation.since,
            // An election: no server has a leader.
            (None, Some(_)) => return Reach::Holds,
            (None, None) => return Reach::Serves,
        };
        if cluster.require_leader && self.now >= since + cluster.notice {
            Reach::Refuses
        } else {
            Reach::Holds
        }
    }

    /// Whether node `index`'s server serves its requests now.
    pub(super) fn serves(&self, index: usize) -> bool {
        self.reach(index) == Reach::Serves
    }

    /// Node `index`'s client sends a keep-alive of `session` if one is
    /// due: every third of the lease.
    pub(super) fn keep_alive_due(&mut self, index: usize, session: SessionId) {
        let Some(cluster) = &self.config.etcd else {
            return;
        };
        let interval = cluster.ttl(self.config.session_timeout) / 3;
        let now = self.now;
        if now < self.nodes[index].next_keep_alive {
            return;
        }
        self.nodes[index].next_keep_alive = now + interval;
        let link = self.nodes[index].link();
        let when = now + self.delay();
        let node = index;
        let sent = now;
        self.at(
            when,
            Action::KeepAlive {
                node,
                link,
                session,
                sent,
            },
        );
    }

    /// Node `index`'s keep-alive of `session`, sent at `sent`, reaches its
    /// server: the leader renews the lease if the server has one, and the
    /// client counts it from when it sent it; a refusal sends the client
    /// to the next server.
    pub(super) fn keep_alive(&mut self, index: usize, session: SessionId, sent: Instant) {
        match self.reach(index) {
            Reach::Serves => {
                if self.server_touch(session) {
                    self.nodes[index].last_contact = self.now;
                    let renewal = Event::SessionRenewed {
                        sent,
                        counted_after: Duration::ZERO,
                    };
                    self.reply(index, renewal);
                }
            }
            Reach::Holds => {}
            Reach::Refuses => self.leave_server(index, "keep-alive refused: no leader"),
        }
    }

    /// Whether `session`'s lease is alive at the leader, as a request
    /// under it finds: one past its deadline is revoked there and then. A
    /// request renews nothing.
    pub(super) fn lease_alive(&mut self, session: SessionId) -> bool {
        match self.store.session_deadline(session) {
            Some(deadline) if deadline <= self.now => {
                let fired = self.store.expire_session(session);
                self.deliver_watches(fired);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// The renewal the etcd backend reports with `reply`, served now to
    /// node `index`: a heartbeat (`LeaseTimeToLive`) tells how much of
    /// the TTL is left, in whole seconds rounded down, so the lease was
    /// renewed no earlier than the heartbeat was sent less the part gone.
    /// No other answer renews anything.
    pub(super) fn lease_renewal(&self, index: usize, reply: &Event) -> Option<Event> {
        let cluster = self.config.etcd.as_ref()?;
        let Event::HeartbeatResult {
            id, result: Ok(()), ..
        } = reply
        else {
            return None;
        };
        let node = &self.nodes[index];
        let sent = node.in_flight.get(id)?.sent;
        let deadline = self.store.session_deadline(node.session?)?;
        let ttl = cluster.ttl(self.config.session_timeout);
        Some(Event::SessionRenewed {
            sent: EtcdCluster::renewed_by(ttl, sent, deadline, self.now)?,
            counted_after: Duration::ZERO,
        })
    }

    /// Node `index`'s requests `ids` reached a server that cannot serve
    /// them over the connection `link`: one without a leader never applies
    /// them, and the client gives up on each after its request timeout;
    /// one that says so sends the client to the next server at once.
    pub(super) fn unserved(&mut self, index: usize, link: Link, ids: Vec<RequestId>) {
        let Some(cluster) = &self.config.etcd else {
            return;
        };
        if self.reach(index) == Reach::Refuses {
            self.leave_server(index, "request refused: no leader");
            return;
        }
        let timeout = self.now + cluster.request_timeout(self.config.session_timeout);
        for id in ids {
            let node = index;
            self.at(timeout, Action::RequestTimeout { node, link, id });
        }
    }

    /// Node `index`'s client gives up on its request `id` sent over
    /// `link`, if still unanswered.
    pub(super) fn request_timeout(&mut self, index: usize, link: Link, id: RequestId) {
        if self.nodes[index].link() != link {
            return;
        }
        if let Some(pending) = self.nodes[index].in_flight.remove(&id) {
            self.fail(index, pending.command, StoreError::ConnectionLoss);
        }
    }

    /// A connected client on an etcd cluster whose last keep-alive went
    /// unanswered for half the interval between two (the etcd backend's
    /// patience) gives up on its server.
    pub(super) fn keep_alive_unanswered(&mut self, index: usize) {
        let Some(cluster) = &self.config.etcd else {
            return;
        };
        let interval = cluster.ttl(self.config.session_timeout) / 3;
        let node = &self.nodes[index];
        let last_sent = node.next_keep_alive.checked_sub(interval);
        let unanswered = last_sent
            .is_some_and(|sent| node.last_contact < sent && self.now >= sent + interval / 2);
        if node.connected && node.session.is_some() && unanswered {
            self.leave_server(index, "keep-alive unanswered");
        }
    }

    /// Node `index`'s client leaves its server: its connection is lost
    /// (what was in flight fails), and it tries the next server soon. It
    /// never gives its session up by its own clock: only the cluster ends
    /// a lease (and a new leader extends every lease), so the client learns
    /// of an expiry from the server it reaches next.
    pub(super) fn leave_server(&mut self, index: usize, why: &'static str) {
        if !self.nodes[index].connected {
            return;
        }
        self.trace(
            Some(index),
            &("leaves its server", self.nodes[index].server, why),
        );
        self.disconnect(index);
        self.next_server(index);
        let epoch = self.nodes[index].epoch;
        let now = self.now;
        self.at(
            now + RETRY_WHILE_SUSPENDED,
            Action::Fault(Fault::Reconnect { node: index, epoch }),
        );
    }

    /// Node `index`'s client moves to the next server.
    fn next_server(&mut self, index: usize) {
        if let Some(cluster) = &self.config.etcd {
            let node = &mut self.nodes[index];
            node.server = (node.server + 1) % cluster.servers;
        }
    }

    /// A reconnection of node `index` that its server cannot serve: it
    /// tries the next server soon. Whether it had to.
    pub(super) fn reconnect_elsewhere(&mut self, index: usize) -> bool {
        if self.serves(index) {
            return false;
        }
        self.next_server(index);
        let epoch = self.nodes[index].epoch;
        let again = self.now + RETRY_WHILE_SUSPENDED;
        self.at(
            again,
            Action::Fault(Fault::Reconnect { node: index, epoch }),
        );
        true
    }

    /// Node `index`'s client asks its server for a lease, with `tries` more
    /// tries left after this one: granted at once by a server with a
    /// leader; refused at once by one that knows it has none (the next try
    /// goes to the next server); held by one that has not noticed, until
    /// this try's share of the connect timeout runs out.
    pub(super) fn grant(&mut self, index: usize, tries: u32) {
        let Some(cluster) = self.config.etcd.clone() else {
            return self.grant_now(index);
        };
        match self.reach(index) {
            Reach::Serves => self.grant_now(index),
            Reach::Refuses => {
                self.trace(Some(index), &("lease grant refused: no leader", tries));
                self.grant_failed(index, tries);
            }
            Reach::Holds => {
                let number = self.seq;
                let incarnation = self.nodes[index].incarnation;
                self.nodes[index].granting = Some((number, tries));
                let share = cluster.connect_timeout / cluster.grant_tries;
                self.at(
                    self.now + share,
                    Action::Fault(Fault::GrantGivenUp {
                        node: index,
                        incarnation,
                        number,
                    }),
                );
            }
        }
    }

    /// Node `index`'s client gives up on its held lease grant `number`.
    pub(super) fn grant_given_up(&mut self, index: usize, incarnation: u32, number: u64) {
        let node = &mut self.nodes[index];
        if node.incarnation != incarnation {
            return;
        }
        let Some((held, tries)) = node.granting.filter(|(n, _)| *n == number) else {
            return;
        };
        node.granting = None;
        self.trace(Some(index), &("lease grant unanswered", held, tries));
        self.grant_failed(index, tries);
    }

    /// A try of node `index`'s lease grant failed, with `tries` left: the
    /// next goes to the next server. With none left, a join fails (a
    /// broken property while a quorum serves, as one does now), and a new
    /// lease after an expiry is asked for again after a backoff. (A join
    /// that met an election may fail: no quorum served all along.)
    fn grant_failed(&mut self, index: usize, tries: u32) {
        self.next_server(index);
        if tries > 0 {
            self.report.grants_moved += 1;
            self.grant_again(index, GRANT_RETRY, tries - 1);
            return;
        }
        if self.nodes[index].joined {
            let all = self.config.etcd.as_ref().map_or(1, |c| c.grant_tries);
            self.nodes[index].grant_began = self.now + REGRANT_BACKOFF;
            self.grant_again(index, REGRANT_BACKOFF, all - 1);
            return;
        }
        let began = self.nodes[index].grant_began;
        let election =
            self.leaderless_until.is_some() || self.elected_at.is_some_and(|t| t > began);
        if !election {
            let detail = format!(
                "{}'s lease grant failed at every try while a quorum of servers had a leader",
                self.nodes[index].id
            );
            self.violation("a member joins while a quorum serves", detail);
        }
        // The join failed: the application gets the error, and the process
        // is gone.
        let node = &mut self.nodes[index];
        node.member = None;
        node.gone = true;
    }

    /// Node `index`'s client tries its lease grant again `after` from now,
    /// with `tries` more left after that try.
    fn grant_again(&mut self, index: usize, after: Duration, tries: u32) {
        let incarnation = self.nodes[index].incarnation;
        let next = Fault::GrantTry {
            node: index,
            incarnation,
            tries,
        };
        self.at(self.now + after, Action::Fault(next));
    }

    /// Node `index`'s lease grant try, if its process still waits for a
    /// lease.
    pub(super) fn grant_try(&mut self, index: usize, incarnation: u32, tries: u32) {
        let node = &self.nodes[index];
        let waiting = node.member.is_some() && !node.gone && node.session.is_none();
        if node.incarnation == incarnation && waiting && node.granting.is_none() {
            self.grant(index, tries);
        }
    }

    /// An etcd server loses the quorum, for `length` or for good. One at a
    /// time: the others keep the quorum. If it led, the others elect
    /// another leader, an election timeout later.
    pub(super) fn isolate(&mut self, server: usize, length: Option<Duration>) {
        let Some(cluster) = self.config.etcd.clone() else {
            return;
        };
        let busy = self
            .isolated
            .is_some_and(|i| i.until.is_none_or(|t| t > self.now));
        if busy || self.leaderless_until.is_some() || server >= cluster.servers {
            return;
        }
        self.report.faults += 1;
        self.report.isolations += 1;
        let now = self.now;
        let until = length.map(|l| now + l);
        self.isolated = Some(Isolation {
            server,
            since: now,
            until,
        });
        self.trace(
            None,
            &("etcd server cut off from the quorum", server, length),
        );
        if let Some(until) = until {
            self.at(until, Action::Fault(Fault::Rejoin { server, since: now }));
        }
        if server == self.etcd_leader {
            self.report.elections += 1;
            self.etcd_leader = (server + 1) % cluster.servers;
            let elected = now + cluster.notice;
            self.leaderless_until = Some(elected);
            self.at(elected, Action::Fault(Fault::Elected));
        }
    }

    /// The etcd server isolated at `since` has the quorum back.
    pub(super) fn rejoin(&mut self, server: usize, since: std::time::Instant) {
        if self
            .isolated
            .is_some_and(|i| i.server == server && i.since == since)
        {
            self.isolated = None;
            self.trace(None, &("etcd server back in the quorum", server));
        }
    }
}
