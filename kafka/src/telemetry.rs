//! The data plane's metrics: what is fetched, buffered and handed out.
//!
//! Recorded through the `metrics` facade, as the member's coordination
//! metrics are (`tenure-tokio`'s telemetry), with the member's labels
//! ([`DataPlane::set_metric_labels`](crate::DataPlane::set_metric_labels)).
//! Handles are registered once per member and per claimed partition; on
//! the hot path a fetch costs a counter, a histogram sample and a gauge,
//! and a batch handed out costs two counters, a gauge decrement and the lag
//! gauge: nothing is recorded per message.

use std::sync::{Arc, Once};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Label, SharedString, Unit};
use tenure_core::{Offset, TopicPartition};

use crate::message::Record;

/// Messages handed to the application.
pub(crate) const MESSAGES_CONSUMED_TOTAL: &str = "tenure_messages_consumed_total";
/// Bytes (keys, values, headers) of the messages handed to the application.
pub(crate) const BYTES_CONSUMED_TOTAL: &str = "tenure_bytes_consumed_total";
/// Fetch requests sent, answered or not.
pub(crate) const FETCH_REQUESTS_TOTAL: &str = "tenure_fetch_requests_total";
/// From sending a fetch to its answer (or failure).
pub(crate) const FETCH_LATENCY_SECONDS: &str = "tenure_fetch_latency_seconds";
/// Bytes fetched and not yet handed out (or dropped).
pub(crate) const BUFFERED_BYTES: &str = "tenure_buffered_bytes";
/// High watermark minus the position (the next offset to hand out).
pub(crate) const RECORDS_LAG: &str = "tenure_records_lag";

static DESCRIBED: Once = Once::new();

/// Describes the data plane's metrics to the installed recorder, once per
/// process.
fn describe() {
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            MESSAGES_CONSUMED_TOTAL,
            Unit::Count,
            "Messages handed to the application."
        );
        metrics::describe_counter!(
            BYTES_CONSUMED_TOTAL,
            Unit::Bytes,
            "Bytes of the messages handed to the application: keys, values, header names and values."
        );
        metrics::describe_counter!(
            FETCH_REQUESTS_TOTAL,
            Unit::Count,
            "Fetch requests sent to Kafka, answered or failed."
        );
        metrics::describe_histogram!(
            FETCH_LATENCY_SECONDS,
            Unit::Seconds,
            "Time from sending a fetch request to its answer or failure (a fetch of an idle partition waits up to fetch_max_wait on the broker)."
        );
        metrics::describe_gauge!(
            BUFFERED_BYTES,
            Unit::Bytes,
            "Bytes of messages fetched and not yet handed out or dropped (a batch counts until its last message is handed out)."
        );
        metrics::describe_gauge!(
            RECORDS_LAG,
            Unit::Count,
            "High watermark of the last fetch minus the position (the next offset to hand out)."
        );
    });
}

/// The data plane's metric handles, with the member's labels.
#[derive(Clone, Debug)]
pub(crate) struct PlaneMetrics {
    labels: Vec<Label>,
    fetch_requests: Counter,
    fetch_latency: Histogram,
}

impl Default for PlaneMetrics {
    fn default() -> PlaneMetrics {
        PlaneMetrics::new(Vec::new())
    }
}

impl PlaneMetrics {
    /// Registers the member's handles, labelled `labels`, with the
    /// recorder installed now.
    pub(crate) fn new(labels: Vec<Label>) -> PlaneMetrics {
        describe();
        PlaneMetrics {
            fetch_requests: metrics::counter!(FETCH_REQUESTS_TOTAL, labels.clone()),
            fetch_latency: metrics::histogram!(FETCH_LATENCY_SECONDS, labels.clone()),
            labels,
        }
    }

    /// The handles of one partition.
    pub(crate) fn partition(&self, partition: &TopicPartition) -> Arc<PartitionMetrics> {
        let mut labels = self.labels.clone();
        labels.push(Label::new(
            "topic",
            SharedString::from_shared(Arc::clone(&partition.topic)),
        ));
        labels.push(Label::new("partition", partition.partition.to_string()));
        Arc::new(PartitionMetrics {
            fetch_requests: self.fetch_requests.clone(),
            fetch_latency: self.fetch_latency.clone(),
            messages: metrics::counter!(MESSAGES_CONSUMED_TOTAL, labels.clone()),
            bytes: metrics::counter!(BYTES_CONSUMED_TOTAL, labels.clone()),
            buffered: metrics::gauge!(BUFFERED_BYTES, labels.clone()),
            lag: metrics::gauge!(RECORDS_LAG, labels),
        })
    }
}

/// The metric handles of one partition.
#[derive(Debug)]
pub(crate) struct PartitionMetrics {
    fetch_requests: Counter,
    fetch_latency: Histogram,
    messages: Counter,
    bytes: Counter,
    buffered: Gauge,
    lag: Gauge,
}

impl PartitionMetrics {
    /// A fetch request that took `latency`, answered or not.
    pub(crate) fn fetched(&self, latency: Duration) {
        self.fetch_requests.increment(1);
        self.fetch_latency.record(latency.as_secs_f64());
    }

    /// The lag at `position` (the next offset to hand out) under a log end
    /// of `high_watermark`.
    pub(crate) fn lag(&self, high_watermark: Offset, position: Offset) {
        self.lag.set((high_watermark - position).max(0) as f64);
    }

    /// A batch of `bytes` put in the partition's buffer, with the log end
    /// its fetch saw: the tally of its hand-out.
    pub(crate) fn buffer(self: &Arc<Self>, bytes: u64, high_watermark: Offset) -> Tally {
        self.buffered.increment(bytes as f64);
        Tally {
            metrics: Arc::clone(self),
            buffered: bytes,
            high_watermark,
            messages: 0,
            bytes: 0,
            position: None,
        }
    }
}

/// One fetched batch's hand-out, counted as it goes and recorded when the
/// batch is done with (dropped: handed out, or let go).
#[derive(Debug)]
pub(crate) struct Tally {
    metrics: Arc<PartitionMetrics>,
    /// The batch's bytes, buffered until it is done with.
    buffered: u64,
    high_watermark: Offset,
    /// Messages of the batch handed out so far, and their bytes.
    messages: u64,
    bytes: u64,
    /// The next offset to hand out, once the batch has handed out any or
    /// passed offsets without a message.
    position: Option<Offset>,
}

impl Tally {
    /// `message` was handed out.
    pub(crate) fn handed(&mut self, record: &Record) {
        self.messages += 1;
        self.bytes += record.size() as u64;
        self.position = Some(record.offset + 1);
    }

    /// The offsets up to `last` were passed without a message.
    pub(crate) fn passed(&mut self, last: Offset) {
        self.position = Some(self.position.map_or(last + 1, |p| p.max(last + 1)));
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        let metrics = &self.metrics;
        if self.messages > 0 {
            metrics.messages.increment(self.messages);
            metrics.bytes.increment(self.bytes);
        }
        metrics.buffered.decrement(self.buffered as f64);
        if let Some(position) = self.position {
            metrics.lag(self.high_watermark, position);
        }
    }
}
