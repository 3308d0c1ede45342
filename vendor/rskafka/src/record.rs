use bytes::Bytes;
use chrono::{DateTime, Utc};

/// High-level record.
///
/// Fetched records share the buffer they were fetched in (decompressed, if their batch was): their key, value
/// and header values are slices of it, so holding one record keeps that buffer alive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// The headers, in the order they were produced; a key may repeat.
    pub headers: Vec<(String, Bytes)>,
    pub timestamp: DateTime<Utc>,
}

impl Record {
    /// Returns the approximate uncompressed size of this [`Record`]
    pub fn approximate_size(&self) -> usize {
        self.key.as_ref().map(|k| k.len()).unwrap_or_default()
            + self.value.as_ref().map(|v| v.len()).unwrap_or_default()
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// What a record's timestamp is: the time its producer created it, or the time the broker appended it to the log
/// (the topic's `message.timestamp.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimestampType {
    /// Set by the producer.
    CreateTime,
    /// Set by the broker when it appended the record's batch (the batch's max timestamp).
    LogAppendTime,
}

/// Record that has offset information attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordAndOffset {
    pub record: Record,
    pub offset: i64,
    /// What the record's timestamp is.
    pub timestamp_type: TimestampType,
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn test_approximate_size() {
        let record = Record {
            key: Some(vec![0; 23].into()),
            value: Some(vec![0; 45].into()),
            headers: vec![
                ("a".to_string(), vec![0; 5].into()),
                ("b".to_string(), vec![0; 7].into()),
            ],
            timestamp: Utc.timestamp_millis_opt(1337).unwrap(),
        };

        assert_eq!(record.approximate_size(), 23 + 45 + 1 + 5 + 1 + 7);
    }
}
