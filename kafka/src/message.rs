//! The messages handed to the application: a Kafka record as the broker
//! returned it, with the claim it was fetched under.

use std::str::Utf8Error;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tenure_core::{FencingToken, Offset, TopicPartition};

use crate::dead_letter::DeadLetterProducer;
use crate::ledger::{LedgerCell, Nacked};

/// One message, handed to the application. Acknowledge it with
/// [`Message::ack`] once processed; its offset is committed when every
/// message before it in its partition is acknowledged too.
///
/// A message is a reference to the batch it was fetched in (two words,
/// whatever its size): handing one out copies no record and counts one
/// reference. The key, the value and the header values are [`Bytes`]:
/// slices of the buffer the batch was fetched (or decompressed) into.
/// A message, or a [`Bytes`] cloned from it ([`Message::payload_bytes`]),
/// keeps that buffer (at most about [`KafkaConfig::fetch_max_bytes`])
/// alive while it is held; to keep a value past its batch's other
/// messages, copy it (`Bytes::copy_from_slice(message.payload()?)`).
///
/// ```
/// # fn handle(message: tenure_kafka::Message) -> Result<(), std::str::Utf8Error> {
/// let body = message.payload_str().transpose()?.unwrap_or("");
/// let trace = message.header("trace-id");
/// println!("{}/{} #{}: {body} ({trace:?})", message.topic(), message.partition(), message.offset());
/// message.ack();
/// # Ok(())
/// # }
/// ```
///
/// [`KafkaConfig::fetch_max_bytes`]: crate::KafkaConfig::fetch_max_bytes
pub struct Message {
    batch: Arc<Batch>,
    /// Where in its batch's records.
    index: usize,
}

/// One fetch of a partition, as its messages refer to it: what the fetch
/// brought, and the claim and fetch it came under.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: u32,
    /// The claim the batch was fetched under.
    pub(crate) token: FencingToken,
    /// The fetch of its claim it came from: a pause ends a fetch, and what
    /// that fetch left buffered is fetched again on resume.
    pub(crate) generation: u64,
    /// The claim's ledger, which counts what is handed out and acknowledged.
    pub(crate) ledger: Arc<LedgerCell>,
    /// The records, in offset order.
    pub(crate) records: Vec<Record>,
}

/// One record of a [`Batch`].
#[derive(Debug)]
pub(crate) struct Record {
    pub(crate) offset: Offset,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Headers,
    pub(crate) timestamp: Timestamp,
}

impl Record {
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

impl Message {
    /// The message `index` of `batch`.
    pub(crate) fn new(batch: Arc<Batch>, index: usize) -> Message {
        debug_assert!(index < batch.records.len());
        Message { batch, index }
    }

    /// The ledger of the claim the message was fetched under.
    pub(crate) fn ledger(&self) -> &Arc<LedgerCell> {
        &self.batch.ledger
    }

    fn record(&self) -> &Record {
        &self.batch.records[self.index]
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.batch.topic
    }

    /// The partition.
    pub fn partition(&self) -> u32 {
        self.batch.partition
    }

    /// The message's partition, as the core names it.
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition {
            topic: self.batch.topic.clone(),
            partition: self.batch.partition,
        }
    }

    /// The message's offset.
    pub fn offset(&self) -> Offset {
        self.record().offset
    }

    /// The fencing token of the claim this message was fetched under: every
    /// side effect of processing it may be fenced with it.
    pub fn token(&self) -> FencingToken {
        self.batch.token
    }

    /// Reports the message processed. Acknowledging after the partition
    /// moved to another member does nothing: nothing is committed for a
    /// partition this member no longer owns.
    pub fn ack(&self) {
        self.batch.ledger.ack(self.offset(), self.batch.generation);
    }

    /// Reports that processing the message failed, to be tried again
    /// after `retry_after`: in [`ProcessingOrder::Key`] and
    /// [`ProcessingOrder::Unordered`], the message goes back to its lane
    /// and is handed out again once the delay is over. Its key's later
    /// messages wait behind it meanwhile, so per-key order holds, and the
    /// committed offset stays below it. It no longer counts as in flight:
    /// other messages take its place, and a drain does not wait for it
    /// (the partition's next owner hands it out).
    ///
    /// A nack after the partition moved to another member, or after a
    /// seek let the message go, does nothing more than an `ack` would. A
    /// delay longer than [`KafkaConfig::max_processing_stall`], while
    /// nothing else of the partition moves, counts as a stall.
    ///
    /// [`KafkaConfig::max_processing_stall`]: crate::KafkaConfig::max_processing_stall
    ///
    /// # Errors
    ///
    /// In [`ProcessingOrder::Partition`], where the application holds the
    /// order itself (it takes the next message once it is done with this
    /// one), the message comes back unchanged: retry it in place, then
    /// acknowledge it.
    ///
    /// [`ProcessingOrder::Key`]: crate::ProcessingOrder::Key
    /// [`ProcessingOrder::Unordered`]: crate::ProcessingOrder::Unordered
    /// [`ProcessingOrder::Partition`]: crate::ProcessingOrder::Partition
    pub fn nack(self, retry_after: Duration) -> Result<(), Message> {
        let ledger = self.batch.ledger.clone();
        match ledger.nack(self.offset(), self.batch.generation) {
            Nacked::Refused => Err(self),
            Nacked::LetGo => Ok(()),
            Nacked::DeadLetter {
                producer,
                runtime,
                attempts,
            } => {
                let reason = format!("nacked {attempts} times");
                self.send_to_dead_letters(producer, runtime, attempts, reason);
                Ok(())
            }
            Nacked::Retry { epoch, runtime } => {
                let runtime = runtime.or_else(|| tokio::runtime::Handle::try_current().ok());
                match runtime {
                    Some(runtime) if !retry_after.is_zero() => {
                        runtime.spawn(async move {
                            tokio::time::sleep(retry_after).await;
                            ledger.retry(self, epoch);
                        });
                    }
                    // No delay, or no runtime to wait on (the lanes are
                    // set up on the member's): back in its lane at once.
                    _ => ledger.retry(self, epoch),
                }
                Ok(())
            }
        }
    }

    /// Gives the message up: it is produced to the dead-letter topic
    /// ([`KafkaConfig::dead_letters`]) with `reason` in its
    /// `tenure-dead-letter-reason` header, and then counted as processed.
    /// Until the letter is written it counts as in flight (a drain waits
    /// for it) and the committed offset stays below it; its key's later
    /// messages wait too. A rejection after the partition moved to
    /// another member, or after a seek let the message go, does nothing.
    ///
    /// # Errors
    ///
    /// Without a dead-letter topic, the message comes back unchanged.
    ///
    /// [`KafkaConfig::dead_letters`]: crate::KafkaConfig::dead_letters
    pub fn reject(self, reason: impl Into<String>) -> Result<(), Message> {
        let ledger = self.batch.ledger.clone();
        match ledger.reject(self.offset(), self.batch.generation) {
            Nacked::Refused => Err(self),
            Nacked::DeadLetter {
                producer,
                runtime,
                attempts,
            } => {
                self.send_to_dead_letters(producer, runtime, attempts, reason.into());
                Ok(())
            }
            Nacked::LetGo | Nacked::Retry { .. } => Ok(()),
        }
    }

    /// Hands the message to the dead-letter producer, on the claim's
    /// runtime (or the caller's).
    fn send_to_dead_letters(
        self,
        producer: Arc<DeadLetterProducer>,
        runtime: Option<tokio::runtime::Handle>,
        attempts: u32,
        reason: String,
    ) {
        let ledger = self.batch.ledger.clone();
        let send = producer.send(ledger, self, attempts, reason);
        match runtime.or_else(|| tokio::runtime::Handle::try_current().ok()) {
            Some(runtime) => {
                runtime.spawn(send);
            }
            // The member's claims are made on its runtime: not reached.
            None => tracing::warn!("a dead letter outside a runtime is not produced"),
        }
    }

    /// The fetch of its claim the message came from.
    pub(crate) fn generation(&self) -> u64 {
        self.batch.generation
    }

    /// The value, if any (`None`: a tombstone).
    pub fn payload(&self) -> Option<&[u8]> {
        self.record().value.as_deref()
    }

    /// The value as shared [`Bytes`], if any: cloning it copies nothing
    /// (and keeps the batch's buffer alive while held).
    pub fn payload_bytes(&self) -> Option<&Bytes> {
        self.record().value.as_ref()
    }

    /// The key, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.record().key.as_deref()
    }

    /// The key as shared [`Bytes`], if any.
    pub fn key_bytes(&self) -> Option<&Bytes> {
        self.record().key.as_ref()
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

    /// The headers, in the order the producer wrote them; a key may repeat.
    pub fn headers(&self) -> &Headers {
        &self.record().headers
    }

    /// The value of the *last* header named `key` (as the Java client's
    /// `Headers::lastHeader`), if any; [`Headers::get_all`] gives every
    /// one, in order.
    pub fn header(&self, key: &str) -> Option<&[u8]> {
        self.headers().last(key).map(|value| &value[..])
    }

    /// The record's timestamp, and whether its producer or the broker set
    /// it.
    pub fn timestamp(&self) -> Timestamp {
        self.record().timestamp
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let record = self.record();
        f.debug_struct("Message")
            .field("topic", &self.batch.topic)
            .field("partition", &self.batch.partition)
            .field("offset", &record.offset)
            .field("key", &record.key)
            .field("value", &record.value)
            .field("headers", &record.headers)
            .field("timestamp", &record.timestamp)
            .field("token", &self.batch.token)
            .finish()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Handing a message out moves two words, whatever the record: a
    /// field added to `Message` itself would be copied at every hop.
    #[test]
    fn a_message_is_two_words() {
        assert_eq!(
            std::mem::size_of::<Message>(),
            2 * std::mem::size_of::<usize>()
        );
    }
}
