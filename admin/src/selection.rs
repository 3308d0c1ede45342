//! Which partitions an operation selects: topics, some of their
//! partitions, or every topic a group names.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::records::GroupRecords;

/// A topic and, optionally, some of its partitions. It shows as the
/// `tenure` command's `--topic` takes it: `orders` for every partition,
/// `orders:0,2` for those two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartitions {
    /// The topic.
    pub topic: String,
    /// The partitions; `None` for every partition of the topic.
    pub partitions: Option<BTreeSet<u32>>,
}

impl fmt::Display for TopicPartitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.topic)?;
        if let Some(partitions) = &self.partitions {
            let numbers: Vec<String> = partitions.iter().map(u32::to_string).collect();
            write!(f, ":{}", numbers.join(","))?;
        }
        Ok(())
    }
}

/// Which partitions a reset moves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionSelection {
    /// These topics (all their partitions, or some). A topic named twice
    /// gets the partitions of both (all of them if either names all).
    Topics(Vec<TopicPartitions>),
    /// Every topic the group has offsets or owners for, or its members
    /// subscribe to by name. Topics Kafka does not know (deleted ones whose
    /// offsets remain) are left out and listed in
    /// [`ResetPlan::missing_topics`](crate::ResetPlan::missing_topics).
    AllTopics,
}

/// The topics `topics` name, each with its partitions (`None`: all).
pub(crate) fn merge_topics(topics: &[TopicPartitions]) -> BTreeMap<&str, Option<BTreeSet<u32>>> {
    let mut merged: BTreeMap<&str, Option<BTreeSet<u32>>> = BTreeMap::new();
    for selection in topics {
        let entry = merged
            .entry(selection.topic.as_str())
            .or_insert_with(|| Some(BTreeSet::new()));
        match (entry.as_mut(), &selection.partitions) {
            (Some(known), Some(more)) => known.extend(more),
            (_, None) => *entry = None,
            (None, Some(_)) => {}
        }
    }
    merged
}

/// The topics a group's records name: those it has offsets or owners for,
/// and those its members subscribe to by name.
pub(crate) fn group_topics(records: &GroupRecords) -> BTreeSet<String> {
    let mut topics: BTreeSet<String> = records
        .members
        .iter()
        .filter_map(|m| m.subscription.named_topics())
        .flatten()
        .cloned()
        .collect();
    topics.extend(records.owners.keys().map(|p| p.topic.to_string()));
    topics.extend(records.offsets.keys().map(|p| p.topic.to_string()));
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(topic: &str, partitions: Option<&[u32]>) -> TopicPartitions {
        TopicPartitions {
            topic: topic.to_owned(),
            partitions: partitions.map(|p| p.iter().copied().collect()),
        }
    }

    #[test]
    fn selections_show_as_given() {
        assert_eq!(selection("orders", None).to_string(), "orders");
        assert_eq!(selection("orders", Some(&[2, 0])).to_string(), "orders:0,2");
    }

    #[test]
    fn a_topic_named_twice_gets_the_partitions_of_both() {
        let given = [
            selection("a", Some(&[1])),
            selection("a", Some(&[0])),
            selection("b", Some(&[1])),
            selection("b", None),
        ];
        let merged = merge_topics(&given);
        assert_eq!(merged["a"], Some([0, 1].into()));
        assert_eq!(merged["b"], None);
    }
}
