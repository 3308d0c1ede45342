//! Offsets files, as kafka-consumer-groups.sh exports and imports them:
//! `--export` writes one, `--from-file` reads one.

use std::collections::BTreeMap;

use tenure_admin::ResetPlan;
use tenure_core::{NameError, Offset, TopicPartition};

use crate::parse::parse_partition;

/// A plan's new offsets as kafka-consumer-groups.sh exports them: one
/// `topic,partition,offset` line per partition, no header.
/// [`parse_offsets_csv`] reads it back.
pub fn offsets_csv(plan: &ResetPlan) -> String {
    plan.changes
        .iter()
        .map(|c| {
            format!(
                "{},{},{}\n",
                c.partition.topic, c.partition.partition, c.new
            )
        })
        .collect()
}

/// A line of an offsets file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CsvError {
    /// The line has neither three fields nor four.
    #[error(
        "line {line}: expected topic,partition,offset (or group,topic,partition,offset), found \
         {found} field(s)"
    )]
    Fields {
        /// The line's number, from 1.
        line: usize,
        /// How many comma-separated fields it has.
        found: usize,
    },
    /// The topic is not a name Kafka allows.
    #[error("line {line}: {source}")]
    Topic {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with the name.
        #[source]
        source: NameError,
    },
    /// The partition is not a partition number.
    #[error("line {line}: partition {given:?} is not a partition number")]
    Partition {
        /// The line's number, from 1.
        line: usize,
        /// The field as given.
        given: String,
    },
    /// The offset is not an offset.
    #[error("line {line}: offset {given:?} is not an offset (a whole number from 0)")]
    Offset {
        /// The line's number, from 1.
        line: usize,
        /// The field as given.
        given: String,
    },
    /// The partition was given before.
    #[error("line {line}: partition {partition} is already given on line {first}")]
    Duplicate {
        /// The line's number, from 1.
        line: usize,
        /// The partition, as `topic:partition`.
        partition: String,
        /// The line that gave it first.
        first: usize,
    },
    /// A four-field line names another group.
    #[error("line {line}: the offset is for group {found:?}, not {expected:?}")]
    OtherGroup {
        /// The line's number, from 1.
        line: usize,
        /// The group the line names.
        found: String,
        /// The group being reset.
        expected: String,
    },
    /// The file has no offsets at all.
    #[error("no offsets: the file has no topic,partition,offset line")]
    Empty,
}

/// Reads offsets in kafka-consumer-groups.sh's CSV: `topic,partition,offset`
/// lines, or `group,topic,partition,offset` lines whose group must be
/// `group`. Blank lines are skipped; every other line must be one of those,
/// and a partition may be given once.
pub fn parse_offsets_csv(
    text: &str,
    group: &str,
) -> Result<BTreeMap<TopicPartition, Offset>, CsvError> {
    let mut offsets = BTreeMap::new();
    let mut lines_of: BTreeMap<TopicPartition, usize> = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim_start_matches('\u{feff}').trim();
        if content.is_empty() {
            continue;
        }
        let fields: Vec<&str> = content.split(',').map(str::trim).collect();
        let (topic, partition, offset) = match fields.as_slice() {
            [topic, partition, offset] => (*topic, *partition, *offset),
            [named, topic, partition, offset] => {
                if *named != group {
                    return Err(CsvError::OtherGroup {
                        line,
                        found: (*named).to_owned(),
                        expected: group.to_owned(),
                    });
                }
                (*topic, *partition, *offset)
            }
            _ => {
                return Err(CsvError::Fields {
                    line,
                    found: fields.len(),
                })
            }
        };
        tenure_core::types::validate_topic(topic)
            .map_err(|source| CsvError::Topic { line, source })?;
        let number = parse_partition(partition).ok_or_else(|| CsvError::Partition {
            line,
            given: partition.to_owned(),
        })?;
        let offset = offset
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| offset.parse::<Offset>().ok())
            .flatten()
            .filter(|o| *o >= 0)
            .ok_or_else(|| CsvError::Offset {
                line,
                given: offset.to_owned(),
            })?;
        let partition = TopicPartition::new(topic, number);
        if let Some(&first) = lines_of.get(&partition) {
            return Err(CsvError::Duplicate {
                line,
                partition: format!("{topic}:{number}"),
                first,
            });
        }
        lines_of.insert(partition.clone(), line);
        offsets.insert(partition, offset);
    }
    if offsets.is_empty() {
        return Err(CsvError::Empty);
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_admin::{OffsetChange, ResetTarget};

    #[test]
    fn offsets_csv_round_trips() {
        let change = |topic: &str, partition, new| OffsetChange {
            partition: TopicPartition::new(topic, partition),
            current: None,
            new,
            clamped_from: None,
        };
        let plan = ResetPlan {
            group: "g".to_owned(),
            target: Some(ResetTarget::Earliest),
            changes: vec![change("a", 0, 5), change("a", 1, 0), change("b.c", 0, 42)],
            live_members: Vec::new(),
            missing_topics: Vec::new(),
        };
        let text = offsets_csv(&plan);
        assert_eq!(text, "a,0,5\na,1,0\nb.c,0,42\n");
        let read = parse_offsets_csv(&text, "g").expect("its own export");
        let expected: BTreeMap<TopicPartition, Offset> = plan
            .changes
            .iter()
            .map(|c| (c.partition.clone(), c.new))
            .collect();
        assert_eq!(read, expected);
        // With the group in front, blank lines and CRLF.
        let read = parse_offsets_csv("g,a,0,5\r\n\r\ng,a,1,0\r\ng,b.c,0,42\r\n", "g");
        assert_eq!(read.expect("four fields"), expected);
    }

    #[test]
    fn bad_offsets_csv_lines_are_named() {
        let line = |text: &str| match parse_offsets_csv(text, "g") {
            Err(CsvError::Empty) => 0,
            Err(
                CsvError::Fields { line, .. }
                | CsvError::Topic { line, .. }
                | CsvError::Partition { line, .. }
                | CsvError::Offset { line, .. }
                | CsvError::Duplicate { line, .. }
                | CsvError::OtherGroup { line, .. },
            ) => line,
            other => panic!("{text:?} read as {other:?}"),
        };
        assert_eq!(line("a,0,1\na,1"), 2);
        assert_eq!(line("a,0,1\n\na b,1,2"), 3);
        assert_eq!(line("a,x,1"), 1);
        assert_eq!(line("a,0,-1"), 1);
        assert_eq!(line("a,0,1.5"), 1);
        assert_eq!(line("a,0,1\na,0,2"), 2);
        assert_eq!(line("h,a,0,1"), 1);
        assert_eq!(line("a,0,1,2,3"), 1);
        assert_eq!(line("\n\n"), 0);
        let message = parse_offsets_csv("a,0,1\na,0,2", "g")
            .expect_err("a duplicate")
            .to_string();
        assert!(
            message.contains("line 2") && message.contains("line 1"),
            "{message}"
        );
    }
}
