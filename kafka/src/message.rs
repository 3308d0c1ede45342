//! The messages handed to the application: a Kafka record as the broker
//! returned it, with the claim it was fetched under.

use std::str::Utf8Error;
use std::sync::Arc;

use bytes::Bytes;
use tenure_core::{FencingToken, Offset, TopicPartition};

use crate::ledger::BatchLedger;

/// One message, handed to the application. Acknowledge it with
/// [`Message::ack`] once processed; its offset is committed when every
/// message before it in its partition is acknowledged too.
///
/// The key, the value and the header values are [`Bytes`]: slices of the
/// buffer the message's batch was fetched (or decompressed) into, handed
/// over without a copy. Cloning one is cheap, and keeps that buffer (at
/// most about [`KafkaConfig::fetch_max_bytes`]) alive while it is held; to
/// keep a value past its batch's other messages, copy it
/// (`Bytes::copy_from_slice(&value)`).
///
/// ```
/// # fn handle(message: tenure_kafka::Message) -> Result<(), std::str::Utf8Error> {
/// let body = message.payload_str().transpose()?.unwrap_or("");
/// let trace = message.header("trace-id");
/// println!("{}/{} #{}: {body} ({trace:?})", message.topic, message.partition, message.offset);
/// message.ack();
/// # Ok(())
/// # }
/// ```
///
/// [`KafkaConfig::fetch_max_bytes`]: crate::KafkaConfig::fetch_max_bytes
#[derive(Debug)]
pub struct Message {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: u32,
    /// The message's offset.
    pub offset: Offset,
    /// The key, if any.
    pub key: Option<Bytes>,
    /// The value, if any (`None`: a tombstone).
    pub value: Option<Bytes>,
    /// The headers, in the order the producer wrote them; a key may repeat.
    pub headers: Headers,
    /// The record's timestamp, and whether its producer or the broker set
    /// it.
    pub timestamp: Timestamp,
    /// The fencing token of the claim this message was fetched under: every
    /// side effect of processing it may be fenced with it.
    pub token: FencingToken,
    pub(crate) ledger: Arc<BatchLedger>,
    /// The fetch of its claim it came from: a pause ends a fetch, and what
    /// that fetch left buffered is fetched again on resume.
    pub(crate) generation: u64,
}

impl Message {
    /// The message's partition, as the core names it.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.topic.clone(),
            partition: self.partition,
        }
    }

    /// Reports the message processed. Acknowledging after the partition
    /// moved to another member does nothing: nothing is committed for a
    /// partition this member no longer owns.
    pub fn ack(&self) {
        self.ledger.ack(self.offset);
    }

    /// The value, if any.
    pub fn payload(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    /// The key, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    /// The value as UTF-8 text, if there is a value: `Err` if it is not
    /// valid UTF-8.
    pub fn payload_str(&self) -> Option<Result<&str, Utf8Error>> {
        self.payload().map(std::str::from_utf8)
    }

    /// The key as UTF-8 text, if there is a key: `Err` if it is not valid
    /// UTF-8.
    pub fn key_str(&self) -> Option<Result<&str, Utf8Error>> {
        self.key().map(std::str::from_utf8)
    }

    /// The value of the *last* header named `key` (as the Java client's
    /// `Headers::lastHeader`), if any; [`Headers::get_all`] gives every
    /// one, in order.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers.last(key).map(|value| &value[..])
    }

    /// Bytes of the key, the value and the headers (names and values), as
    /// the data-plane metrics count them.
    pub(crate) fn size(&self) -> usize {
        self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|h| h.key.len() + h.value.len())
                .sum::<usize>()
    }
}

/// One record header.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The header's name.
    pub key: String,
    /// The header's value.
    pub value: Bytes,
}

impl Header {
    /// A header named `key` holding `value`.
    pub fn new(key: impl Into<String>, value: impl Into<Bytes>) -> Header {
        Header {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A record's headers: an ordered list, in which a key may repeat (as
/// Kafka keeps them). It dereferences to a slice of [`Header`]s, so
/// `iter()`, `len()` and indexing work as on a slice.
///
/// ```
/// use tenure_kafka::{Header, Headers};
///
/// let headers: Headers = [
///     Header::new("trace", "a"),
///     Header::new("hop", "1"),
///     Header::new("hop", "2"),
/// ]
/// .into_iter()
/// .collect();
/// let hops: Vec<&[u8]> = headers.get_all("hop").map(|v| &v[..]).collect();
/// assert_eq!(hops, [b"1", b"2"]);
/// assert_eq!(headers.first("hop").map(|v| &v[..]), Some(&b"1"[..]));
/// assert_eq!(headers.last("hop").map(|v| &v[..]), Some(&b"2"[..]));
/// assert_eq!(headers.len(), 3);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Headers(Vec<Header>);

impl Headers {
    /// No headers.
    pub fn new() -> Headers {
        Headers(Vec::new())
    }

    /// The values of every header named `key`, in order.
    pub fn get_all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Bytes> + 'a {
        self.0
            .iter()
            .filter(move |h| h.key == key)
            .map(|h| &h.value)
    }

    /// The value of the first header named `key`, if any.
    pub fn first(&self, key: &str) -> Option<&Bytes> {
        self.0.iter().find(|h| h.key == key).map(|h| &h.value)
    }

    /// The value of the last header named `key`, if any.
    pub fn last(&self, key: &str) -> Option<&Bytes> {
        self.0.iter().rev().find(|h| h.key == key).map(|h| &h.value)
    }

    /// Adds a header after the others.
    pub fn push(&mut self, header: Header) {
        self.0.push(header);
    }

    /// The headers, as a vector.
    pub fn into_vec(self) -> Vec<Header> {
        self.0
    }
}

impl std::ops::Deref for Headers {
    type Target = [Header];

    fn deref(&self) -> &[Header] {
        &self.0
    }
}

impl From<Vec<Header>> for Headers {
    fn from(headers: Vec<Header>) -> Headers {
        Headers(headers)
    }
}

impl FromIterator<Header> for Headers {
    fn from_iter<I: IntoIterator<Item = Header>>(headers: I) -> Headers {
        Headers(headers.into_iter().collect())
    }
}

impl IntoIterator for Headers {
    type Item = Header;
    type IntoIter = std::vec::IntoIter<Header>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a Header;
    type IntoIter = std::slice::Iter<'a, Header>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A record's timestamp, in milliseconds since the Unix epoch, with who
/// set it: the topic's `message.timestamp.type` decides. A producer may
/// leave it unset (-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Timestamp {
    /// Set by the producer when it created the record.
    CreateTime(i64),
    /// Set by the broker when it appended the record's batch to the log
    /// (the same for every record of a batch).
    LogAppendTime(i64),
}

impl Timestamp {
    /// Milliseconds since the Unix epoch, whoever set them.
    pub fn millis(&self) -> i64 {
        match *self {
            Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => ms,
        }
    }
}
