//! Where a group's records live in etcd.

use tenure_core::{MemberId, TopicPartition};

/// The keys of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    base: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, group: &str) -> Keys {
        Keys {
            base: format!("{}/{group}", prefix.trim_end_matches('/')),
        }
    }

    /// The prefix of every key of the group (with its trailing `/`).
    pub(crate) fn all(&self) -> String {
        format!("{}/", self.base)
    }

    /// The prefix of every member registration (with its trailing `/`).
    pub(crate) fn members(&self) -> String {
        format!("{}/members/", self.base)
    }

    /// A member's registration.
    pub(crate) fn member(&self, id: &MemberId) -> String {
        format!("{}/members/{id}", self.base)
    }

    /// The partitions of the owner records among `keys`.
    pub(crate) fn owned_partitions(&self, keys: &[Vec<u8>]) -> Vec<TopicPartition> {
        let owners = format!("{}/owners/", self.base);
        keys.iter()
            .filter_map(|key| {
                let key = std::str::from_utf8(key).ok()?;
                let (topic, partition) = key.strip_prefix(&owners)?.split_once('/')?;
                Some(TopicPartition::new(topic, partition.parse().ok()?))
            })
            .collect()
    }

    /// A partition's owner record.
    pub(crate) fn owner(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/owners/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// A partition's progress record, beside its committed offset.
    pub(crate) fn progress(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/progress/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// A partition's committed offset.
    pub(crate) fn offset(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/offsets/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }
}
