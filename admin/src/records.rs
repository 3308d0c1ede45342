//! What a store holds of one group, as [`GroupAdmin::records`] reads it.
//!
//! [`GroupAdmin::records`]: crate::GroupAdmin::records

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use tenure_core::records::{decode_registration_record, parse_offset};
use tenure_core::{FencingToken, Offset, StoreError, Subscription, TopicPartition};

/// What a store holds of one group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupRecords {
    /// The registered (live) members, sorted by id.
    pub members: Vec<MemberRecord>,
    /// The owner record of each owned partition.
    pub owners: BTreeMap<TopicPartition, OwnerRecord>,
    /// The committed offset (next offset to consume) of each partition that
    /// has one.
    pub offsets: BTreeMap<TopicPartition, Offset>,
    /// Records that could not be read.
    pub corrupt: Vec<CorruptRecord>,
}

impl GroupRecords {
    /// Every partition with an owner record or a committed offset.
    pub fn partitions(&self) -> std::collections::BTreeSet<TopicPartition> {
        self.owners
            .keys()
            .chain(self.offsets.keys())
            .cloned()
            .collect()
    }

    /// Adds the registration of member `id`, read at `path`. `registered`
    /// is when the store says it was made (ZooKeeper: the node's creation
    /// time, the server's clock); without it, the registration's own
    /// timestamp. One that cannot be read is noted as corrupt.
    pub fn add_member(
        &mut self,
        path: &str,
        id: &str,
        data: &[u8],
        registered: Option<SystemTime>,
    ) {
        match decode_registration_record(id, data) {
            Ok(registration) => self.members.push(MemberRecord {
                id: id.to_owned(),
                host: registration.host,
                strategy: registration.info.strategy,
                subscription: registration.info.subscription,
                since: registered.or_else(|| {
                    registration
                        .timestamp_secs
                        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
                }),
            }),
            Err(error) => self.add_corrupt(path, error.detail),
        }
    }

    /// Adds the owner record of `partition`, read at `path`, whose claim is
    /// `token`. One that cannot be read is noted as corrupt.
    pub fn add_owner(
        &mut self,
        partition: TopicPartition,
        path: &str,
        data: Vec<u8>,
        token: FencingToken,
    ) {
        match String::from_utf8(data) {
            Ok(member) => {
                self.owners.insert(partition, OwnerRecord { member, token });
            }
            Err(_) => self.add_corrupt(path, "the owner's id is not UTF-8"),
        }
    }

    /// Adds the committed offset of `partition`, read at `path`. One that
    /// cannot be read is noted as corrupt.
    pub fn add_offset(&mut self, partition: TopicPartition, path: &str, data: &[u8]) {
        match parse_offset(path, data) {
            Ok(offset) => {
                self.offsets.insert(partition, offset);
            }
            Err(StoreError::Corrupt { detail, .. }) => self.add_corrupt(path, detail),
            Err(other) => self.add_corrupt(path, other.to_string()),
        }
    }

    /// Notes the record at `path` as corrupt, for `detail`.
    pub fn add_corrupt(&mut self, path: &str, detail: impl Into<String>) {
        self.corrupt.push(CorruptRecord {
            path: path.to_owned(),
            detail: detail.into(),
        });
    }
}

/// A member's registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member's id.
    pub id: String,
    /// The host it runs on, when its registration says (tenure's do;
    /// Kafka 0.8's and the Go package's do not).
    pub host: Option<String>,
    /// Its assignment strategy (`range` for registrations that name none,
    /// as Kafka 0.8's).
    pub strategy: String,
    /// The topics it consumes: named, or a pattern.
    pub subscription: Subscription,
    /// When it registered, when its registration says.
    pub since: Option<SystemTime>,
}

/// A partition's owner record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    /// The owning member's id, as the record holds it.
    pub member: String,
    /// The claim's fencing token (ZooKeeper: czxid; etcd: create_revision).
    pub token: FencingToken,
}

/// A record that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// Where it is (znode path or etcd key).
    pub path: String,
    /// What is wrong with it.
    pub detail: String,
}

impl fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt record {}: {}", self.path, self.detail)
    }
}
