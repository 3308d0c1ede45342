//! The member registrations a backend read last, so that the next read of
//! the member list reads only what changed.

use std::collections::BTreeMap;

use tenure_core::{MemberInfo, Operation, StoreError};

use super::MemberList;

/// The member registrations a backend read last, by member id, kept so
/// that a read of the member list after a change reads only the
/// registrations the change made. Every member reads the list at every
/// change in membership: reading every registration each time made a cold
/// start of M members cost M² registration reads and decodes, most of
/// what a single store did for 300 members.
///
/// A backend keeps one beside its client and takes it out for the
/// length of a read (the member reads its list one read at a time; a read
/// that fails puts nothing back, and the next reads everything). What
/// tells it which registrations changed is the store's: ZooKeeper's child
/// version of the members' node, etcd's revisions.
#[derive(Clone, Debug, Default)]
pub struct Registrations {
    by_id: BTreeMap<String, Entry>,
    /// The records read since the last [`Registrations::list`] that did
    /// not decode, to report with it.
    unreadable: Vec<StoreError>,
}

/// One listed registration as it was read.
#[derive(Clone, Debug)]
enum Entry {
    /// A member's record.
    Member(MemberInfo),
    /// A record that does not decode: left out of the members (the others
    /// leave it out too) and reported when it was read.
    Unreadable,
    /// Listed, but gone by the time it was read.
    Gone,
}

impl Registrations {
    /// Whether the registration of `id` was read (or found gone).
    pub fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// How many registrations were read (or found gone).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The ids of the registrations read (or found gone), in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> + '_ {
        self.by_id.keys().map(String::as_str)
    }

    /// Forgets every registration whose id `keep` refuses.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.by_id.retain(|id, _| keep(id));
    }

    /// Notes that the registration of `id` was listed but gone when read:
    /// no member, and nothing to read again while it stays listed.
    pub fn gone(&mut self, id: String) {
        self.by_id.insert(id, Entry::Gone);
    }

    /// Decodes the registration of `id` read at `path` from `data`. One
    /// that does not decode is left out of the members, but worth an
    /// operator's look: the next [`Registrations::list`] reports it (to the
    /// member, as a [`StoreError::Corrupt`] of
    /// [`Operation::ReadRegistration`]).
    pub fn read(&mut self, id: String, path: &str, data: &[u8]) {
        let entry = match tenure_core::records::decode_registration(&id, data) {
            Ok(info) => Entry::Member(info),
            Err(error) => {
                tracing::warn!(%path, %error, "ignoring corrupt member registration");
                self.unreadable.push(error.at(path));
                Entry::Unreadable
            }
        };
        self.by_id.insert(id, entry);
    }

    /// The member list: every registration read that decoded, and the
    /// records read since the last list that did not.
    pub fn list(&mut self) -> MemberList {
        MemberList {
            members: self.members(),
            problems: std::mem::take(&mut self.unreadable)
                .into_iter()
                .map(|error| (Operation::ReadRegistration, error))
                .collect(),
        }
    }

    /// The members: every registration read that decoded, by id.
    fn members(&self) -> Vec<MemberInfo> {
        self.by_id
            .values()
            .filter_map(|entry| match entry {
                Entry::Member(info) => Some(info.clone()),
                Entry::Unreadable | Entry::Gone => None,
            })
            .collect()
    }
}
