//! What a member does, as tracing spans and events and as metrics.
//!
//! The telemetry maps what the core tells the application (claims,
//! commits, releases, losses: `AppEvent`s) and the fetch commands it
//! emits onto spans and metrics, with the high watermarks the Kafka
//! fetchers see and the member's assignment after each round. It keeps no
//! state machine of its own and never changes what the member does.
//!
//! Metric handles are registered once (per member, and per partition the
//! first time the member claims it) and kept: the application's
//! acknowledgements arrive millions of times a second and must cost no
//! more than a variant match here.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use metrics::{Counter, Gauge, Histogram, Label, SharedString, Unit};
use tenure_core::{
    AppEvent, Error, FencingToken, FetchCommand, Member, MemberId, Offset, StoreOp, StoreRequest,
    TopicPartition,
};
use tracing::field::Empty;
use tracing::Span;

/// Claims that took effect (owner record created, or found to be ours).
pub(crate) const CLAIMS_TOTAL: &str = "tenure_claims_total";
/// Partitions released to the group after draining.
pub(crate) const HANDOFFS_TOTAL: &str = "tenure_handoffs_total";
/// From the first claim attempt to the claim taking effect.
pub(crate) const CLAIM_WAIT_SECONDS: &str = "tenure_claim_wait_seconds";
/// From an assignment change to the member being settled again.
pub(crate) const REBALANCE_SECONDS: &str = "tenure_rebalance_seconds";
/// From stopping a partition's fetch to its drain (or timeout).
pub(crate) const DRAIN_SECONDS: &str = "tenure_drain_seconds";
/// Commits that failed for a reason other than fencing.
pub(crate) const COMMIT_FAILURES_TOTAL: &str = "tenure_commit_failures_total";
/// Commits refused because the member no longer owned the partition.
pub(crate) const COMMITS_FENCED_TOTAL: &str = "tenure_commits_fenced_total";
/// Problems the member reported, read by the application or not.
pub(crate) const PROBLEMS_TOTAL: &str = "tenure_problems_total";
/// Problems dropped because the application did not read them in time.
pub(crate) const PROBLEMS_DROPPED_TOTAL: &str = "tenure_problems_dropped_total";
/// Partitions the member owns now.
pub(crate) const PARTITIONS_OWNED: &str = "tenure_partitions_owned";
/// 1 while the member owns the partition, 0 after.
pub(crate) const PARTITION_OWNED: &str = "tenure_partition_owned";
/// The last offset the member committed for the partition.
pub(crate) const COMMITTED_OFFSET: &str = "tenure_committed_offset";
/// Log-end offset minus committed offset.
pub(crate) const PARTITION_LAG: &str = "tenure_partition_lag";
/// Exactly-once output: messages whose output a sink committed.
pub(crate) const SINK_MESSAGES_TOTAL: &str = "tenure_sink_messages_total";
/// Exactly-once output: writes a sink refused (a newer claim fenced it).
pub(crate) const SINK_WRITES_FENCED_TOTAL: &str = "tenure_sink_writes_fenced_total";
/// Exactly-once output: claims a sink refused as they started.
pub(crate) const SINK_CLAIMS_FENCED_TOTAL: &str = "tenure_sink_claims_fenced_total";
/// Exactly-once output: failed attempts to fence or write.
pub(crate) const SINK_FAILURES_TOTAL: &str = "tenure_sink_failures_total";

static DESCRIBED: Once = Once::new();

/// Describes every metric to the installed recorder, once per process.
fn describe() {
    DESCRIBED.call_once(|| {
        metrics::describe_counter!(
            CLAIMS_TOTAL,
            Unit::Count,
            "Claims that took effect: the member's owner record was created, or found to be its own."
        );
        metrics::describe_counter!(
            HANDOFFS_TOTAL,
            Unit::Count,
            "Partitions this member released to the group (owner record deleted after the drain)."
        );
        metrics::describe_histogram!(
            CLAIM_WAIT_SECONDS,
            Unit::Seconds,
            "Time from the first claim attempt for a partition to the claim taking effect."
        );
        metrics::describe_histogram!(
            REBALANCE_SECONDS,
            Unit::Seconds,
            "Time from a change of this member's assignment until it is settled again."
        );
        metrics::describe_histogram!(
            DRAIN_SECONDS,
            Unit::Seconds,
            "Time from stopping a partition's fetch to its drain (or to the release, if the processing timeout cut it short)."
        );
        metrics::describe_counter!(
            COMMIT_FAILURES_TOTAL,
            Unit::Count,
            "Offset commits that failed for any reason other than fencing."
        );
        metrics::describe_counter!(
            COMMITS_FENCED_TOTAL,
            Unit::Count,
            "Offset commits refused because the member no longer owned the partition."
        );
        metrics::describe_counter!(
            PROBLEMS_TOTAL,
            Unit::Count,
            "Problems this member reported (store, coordination, Kafka), whether the application read them or not."
        );
        metrics::describe_counter!(
            PROBLEMS_DROPPED_TOTAL,
            Unit::Count,
            "Problems dropped because the application left its error stream unread (it holds 64)."
        );
        metrics::describe_gauge!(
            PARTITIONS_OWNED,
            Unit::Count,
            "Partitions this member owns now."
        );
        metrics::describe_gauge!(
            PARTITION_OWNED,
            Unit::Count,
            "1 while this member owns the partition, 0 after."
        );
        metrics::describe_gauge!(
            COMMITTED_OFFSET,
            Unit::Count,
            "The last offset this member committed for the partition: the next offset to consume."
        );
        metrics::describe_counter!(
            SINK_MESSAGES_TOTAL,
            Unit::Count,
            "Exactly-once output: messages whose output the sink committed with their offset."
        );
        metrics::describe_counter!(
            SINK_WRITES_FENCED_TOTAL,
            Unit::Count,
            "Exactly-once output: batches the sink refused because a newer claim had fenced the partition (dropped, not retried)."
        );
        metrics::describe_counter!(
            SINK_CLAIMS_FENCED_TOTAL,
            Unit::Count,
            "Exactly-once output: claims the sink refused as they started (it held a newer token)."
        );
        metrics::describe_counter!(
            SINK_FAILURES_TOTAL,
            Unit::Count,
            "Exactly-once output: attempts to fence or write that failed (retried)."
        );
        metrics::describe_gauge!(
            PARTITION_LAG,
            Unit::Count,
            "Log-end offset (high watermark of the last fetch) minus the committed offset; 0 while not owned."
        );
    });
}

/// The labels of every metric of one member.
fn member_labels(group: &str, member: &MemberId) -> Vec<Label> {
    vec![
        Label::new("group", group.to_owned()),
        Label::new("member", member.as_str().to_owned()),
    ]
}

/// The exactly-once writers' counters of one member.
pub(crate) struct SinkMetrics {
    pub(crate) messages: metrics::Counter,
    pub(crate) writes_fenced: metrics::Counter,
    pub(crate) claims_fenced: metrics::Counter,
    pub(crate) failures: metrics::Counter,
}

impl SinkMetrics {
    /// Registers them with the recorder installed now.
    pub(crate) fn new(group: &str, member: &MemberId) -> SinkMetrics {
        describe();
        let labels = member_labels(group, member);
        SinkMetrics {
            messages: metrics::counter!(SINK_MESSAGES_TOTAL, labels.clone()),
            writes_fenced: metrics::counter!(SINK_WRITES_FENCED_TOTAL, labels.clone()),
            claims_fenced: metrics::counter!(SINK_CLAIMS_FENCED_TOTAL, labels.clone()),
            failures: metrics::counter!(SINK_FAILURES_TOTAL, labels),
        }
    }
}

/// The span every log line and span of one member's task lives in.
pub(crate) fn member_span(group: &str, member: &MemberId) -> Span {
    tracing::info_span!("member", group = group, member = member.as_str())
}

/// A span of one partition's operation (`claim`, `drain`, `release`), under
/// the claim `token` (`Empty` until known), its outcome recorded when it
/// ends.
macro_rules! partition_span {
    ($name:literal, $partition:expr, $token:expr) => {
        tracing::info_span!(
            $name,
            topic = &*$partition.topic,
            partition = $partition.partition,
            token = $token,
            outcome = Empty,
        )
    };
}

/// A span with the moment it began, for a histogram when it ends.
struct Timed {
    since: Instant,
    span: Span,
}

impl Timed {
    fn start(since: Instant, span: Span) -> Timed {
        Timed { since, span }
    }

    /// Ends the span with `outcome`; how long it lived, in seconds.
    fn end(self, now: Instant, outcome: &'static str) -> f64 {
        self.span.record("outcome", outcome);
        now.saturating_duration_since(self.since).as_secs_f64()
    }
}

/// What one partition looks like from this member. A member may hold
/// thousands: what is rarely needed is built when it is (the labels) or
/// boxed while it lives (the spans of operations under way).
struct PartitionTelemetry {
    owned_gauge: Gauge,
    /// Registered on the first value, so that an exporter shows no offset
    /// or lag the member never knew.
    committed_gauge: Option<Gauge>,
    lag_gauge: Option<Gauge>,
    /// The claim this member holds.
    token: Option<FencingToken>,
    /// The committed offset in the store, as far as the member knows (read
    /// when the claim began, then every successful commit).
    committed: Option<Offset>,
    /// The log-end offset of the last fetch under the current claim.
    high_watermark: Option<Offset>,
    /// The operations under way, if any.
    spans: Option<Box<Spans>>,
}

/// The spans of a partition's operations under way.
#[derive(Default)]
struct Spans {
    claim: Option<Span>,
    release: Option<Timed>,
    drain: Option<(FencingToken, Timed)>,
    /// The commit in flight (the core sends one at a time per partition).
    commit: Option<Span>,
}

impl Spans {
    fn is_empty(&self) -> bool {
        self.claim.is_none()
            && self.release.is_none()
            && self.drain.is_none()
            && self.commit.is_none()
    }
}

/// The labels of `partition`'s series: the member's (`group`, `member`),
/// `topic` and `partition`.
fn partition_labels(base: &[Label], partition: &TopicPartition) -> Vec<Label> {
    let mut labels = base.to_vec();
    labels.push(Label::new(
        "topic",
        SharedString::from_shared(Arc::clone(&partition.topic)),
    ));
    labels.push(Label::new("partition", partition.partition.to_string()));
    labels
}

impl PartitionTelemetry {
    fn new(base: &[Label], partition: &TopicPartition) -> PartitionTelemetry {
        PartitionTelemetry {
            owned_gauge: metrics::gauge!(PARTITION_OWNED, partition_labels(base, partition)),
            committed_gauge: None,
            lag_gauge: None,
            token: None,
            committed: None,
            high_watermark: None,
            spans: None,
        }
    }

    /// The spans of the operations under way, made if there are none.
    fn spans(&mut self) -> &mut Spans {
        self.spans.get_or_insert_with(Box::default)
    }

    /// Takes what `pick` takes from the spans, dropping them once empty.
    fn take<T>(&mut self, pick: impl FnOnce(&mut Spans) -> Option<T>) -> Option<T> {
        let spans = self.spans.as_mut()?;
        let taken = pick(spans);
        if spans.is_empty() {
            self.spans = None;
        }
        taken
    }

    /// Whether nothing is held or under way: the entry can go (the series
    /// it registered keep their last values in the recorder).
    fn is_idle(&self) -> bool {
        self.token.is_none() && self.spans.is_none()
    }

    fn set_committed_gauge(&mut self, base: &[Label], partition: &TopicPartition, offset: Offset) {
        self.committed_gauge
            .get_or_insert_with(|| {
                metrics::gauge!(COMMITTED_OFFSET, partition_labels(base, partition))
            })
            .set(offset as f64);
    }

    /// Log-end minus committed, once both are known under the current
    /// claim. An external tool computes the same from the store and Kafka.
    fn update_lag(&mut self, base: &[Label], partition: &TopicPartition) {
        if let (Some(_), Some(end), Some(committed)) =
            (self.token, self.high_watermark, self.committed)
        {
            self.lag_gauge
                .get_or_insert_with(|| {
                    metrics::gauge!(PARTITION_LAG, partition_labels(base, partition))
                })
                .set((end - committed).max(0) as f64);
        }
    }

    /// Whether `token` is the claim this member holds.
    fn holds(&self, token: FencingToken) -> bool {
        self.token == Some(token)
    }
}

/// The telemetry of one member.
pub(crate) struct Telemetry {
    /// `group` and `member`.
    labels: Vec<Label>,
    claims: Counter,
    handoffs: Counter,
    claim_wait: Histogram,
    rebalance: Histogram,
    drain: Histogram,
    commit_failures: Counter,
    commits_fenced: Counter,
    problems: Counter,
    problems_dropped: Counter,
    partitions_owned: Gauge,
    partitions: HashMap<TopicPartition, PartitionTelemetry>,
    /// The member's change count ([`Member::changes`]) at the last look
    /// at its state: only when it moved can the assignment have changed.
    seen_changes: Option<u64>,
    assigned: BTreeSet<TopicPartition>,
    rebalancing_since: Option<Instant>,
}

impl Telemetry {
    /// Registers the member's metrics with the recorder installed now.
    pub(crate) fn new(group: &str, member: &MemberId) -> Telemetry {
        describe();
        let labels = member_labels(group, member);
        Telemetry {
            claims: metrics::counter!(CLAIMS_TOTAL, labels.clone()),
            handoffs: metrics::counter!(HANDOFFS_TOTAL, labels.clone()),
            claim_wait: metrics::histogram!(CLAIM_WAIT_SECONDS, labels.clone()),
            rebalance: metrics::histogram!(REBALANCE_SECONDS, labels.clone()),
            drain: metrics::histogram!(DRAIN_SECONDS, labels.clone()),
            commit_failures: metrics::counter!(COMMIT_FAILURES_TOTAL, labels.clone()),
            commits_fenced: metrics::counter!(COMMITS_FENCED_TOTAL, labels.clone()),
            problems: metrics::counter!(PROBLEMS_TOTAL, labels.clone()),
            problems_dropped: metrics::counter!(PROBLEMS_DROPPED_TOTAL, labels.clone()),
            partitions_owned: metrics::gauge!(PARTITIONS_OWNED, labels.clone()),
            labels,
            partitions: HashMap::new(),
            seen_changes: None,
            assigned: BTreeSet::new(),
            rebalancing_since: None,
        }
    }

    /// A problem was reported; `delivered`: it found room in the
    /// application's error stream.
    pub(crate) fn on_problem(&self, delivered: bool) {
        self.problems.increment(1);
        if !delivered {
            self.problems_dropped.increment(1);
        }
    }

    fn partition(&mut self, partition: &TopicPartition) -> &mut PartitionTelemetry {
        entry(&mut self.partitions, &self.labels, partition)
    }

    /// Drops the telemetry of a partition neither held nor in an operation,
    /// so that what a member keeps follows what it holds, not every
    /// partition it ever held.
    fn forget_if_idle(&mut self, partition: &TopicPartition) {
        if self
            .partitions
            .get(partition)
            .is_some_and(PartitionTelemetry::is_idle)
        {
            self.partitions.remove(partition);
        }
    }

    /// A fetch command the core emitted, before it is carried out: the
    /// drain of a stopped fetch is timed from here.
    pub(crate) fn on_fetch(&mut self, command: &FetchCommand, now: Instant) {
        if let FetchCommand::Stop { partition, token } = command {
            let spans = self.partition(partition).spans();
            if spans.drain.is_none() {
                let span = partition_span!("drain", partition, token.0);
                spans.drain = Some((*token, Timed::start(now, span)));
            }
        }
    }

    /// A store request the core emitted, before it is carried out.
    pub(crate) fn on_command(&mut self, command: &StoreRequest, now: Instant) {
        // A release that did not wait for its drain.
        if let StoreRequest {
            op: StoreOp::Release { partition, .. },
            ..
        } = command
        {
            self.end_drain(partition, None, now, "release");
        }
    }

    /// The application drained `partition` under `token`, before the core
    /// hears of it.
    pub(crate) fn on_drained(
        &mut self,
        partition: &TopicPartition,
        token: FencingToken,
        now: Instant,
    ) {
        self.end_drain(partition, Some(token), now, "drained");
    }

    /// What the core told the application: claims, commits, releases and
    /// losses, as the core itself saw them.
    pub(crate) fn on_app_event(&mut self, event: &AppEvent, now: Instant) {
        match event {
            AppEvent::Claiming { partition } => {
                let spans = self.partition(partition).spans();
                if spans.claim.is_none() {
                    spans.claim = Some(partition_span!("claim", partition, Empty));
                }
            }
            AppEvent::Claimed {
                partition,
                token,
                waited,
            } => {
                let state = entry(&mut self.partitions, &self.labels, partition);
                start_claim(
                    state,
                    partition,
                    *token,
                    *waited,
                    &self.claims,
                    &self.claim_wait,
                );
            }
            AppEvent::ClaimAbandoned { partition } => {
                if let Some(span) = self.partition(partition).take(|s| s.claim.take()) {
                    span.record("outcome", "unassigned");
                }
                self.forget_if_idle(partition);
            }
            AppEvent::OffsetRead {
                partition,
                token,
                committed,
            } => {
                let state = entry(&mut self.partitions, &self.labels, partition);
                if let (true, Some(offset)) = (state.holds(*token), committed) {
                    state.committed = Some(*offset);
                    state.update_lag(&self.labels, partition);
                }
            }
            AppEvent::Committing {
                partition,
                token,
                offset,
            } => {
                self.partition(partition).spans().commit = Some(tracing::info_span!(
                    "commit",
                    topic = &*partition.topic,
                    partition = partition.partition,
                    token = token.0,
                    offset = *offset,
                    outcome = Empty,
                ));
            }
            AppEvent::Committed {
                partition,
                token,
                offset,
            } => {
                let state = entry(&mut self.partitions, &self.labels, partition);
                if let Some(span) = state.take(|s| s.commit.take()) {
                    span.record("outcome", "committed");
                }
                if state.holds(*token) {
                    state.committed = Some(*offset);
                    state.set_committed_gauge(&self.labels, partition, *offset);
                    state.update_lag(&self.labels, partition);
                }
                self.forget_if_idle(partition);
            }
            AppEvent::CommitFenced { partition, .. } => {
                if let Some(span) = self.partition(partition).take(|s| s.commit.take()) {
                    span.record("outcome", "fenced");
                }
                self.forget_if_idle(partition);
                self.commits_fenced.increment(1);
            }
            AppEvent::CommitFailed { partition, .. } => {
                if let Some(span) = self.partition(partition).take(|s| s.commit.take()) {
                    span.record("outcome", "failed");
                }
                self.forget_if_idle(partition);
                self.commit_failures.increment(1);
            }
            AppEvent::Releasing { partition, token } => {
                let spans = self.partition(partition).spans();
                if spans.release.is_none() {
                    let span = partition_span!("release", partition, token.0);
                    spans.release = Some(Timed::start(now, span));
                }
            }
            AppEvent::Released { partition, .. } => {
                let state = entry(&mut self.partitions, &self.labels, partition);
                end_claim(state, partition, now, true, &self.handoffs);
                self.forget_if_idle(partition);
            }
            AppEvent::Lost { partition, .. } => {
                let state = entry(&mut self.partitions, &self.labels, partition);
                end_claim(state, partition, now, false, &self.handoffs);
                self.forget_if_idle(partition);
            }
            AppEvent::Problem(Error::DrainTimeout { partition, .. }) => {
                self.end_drain(partition, None, now, "timed out");
            }
            _ => {}
        }
    }

    fn end_drain(
        &mut self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        now: Instant,
        outcome: &'static str,
    ) {
        let Some(state) = self.partitions.get_mut(partition) else {
            return;
        };
        let draining = state.spans.as_ref().and_then(|s| s.drain.as_ref());
        if token.is_some_and(|t| draining.is_some_and(|(d, _)| *d != t)) {
            return;
        }
        if let Some((_, timed)) = state.take(|s| s.drain.take()) {
            self.drain.record(timed.end(now, outcome));
        }
        self.forget_if_idle(partition);
    }

    /// The log-end offset a fetch of `partition` under `token` returned.
    pub(crate) fn on_high_watermark(
        &mut self,
        partition: &TopicPartition,
        token: FencingToken,
        high_watermark: Offset,
    ) {
        if let Some(state) = self.partitions.get_mut(partition) {
            if state.holds(token) {
                state.high_watermark = Some(high_watermark);
                state.update_lag(&self.labels, partition);
            }
        }
    }

    /// Looks at the member's state after a round of events and commands:
    /// how many partitions it owns, and whether its assignment changed or
    /// settled.
    pub(crate) fn on_published(&mut self, member: &Member, now: Instant) {
        let changes = member.changes();
        if self.seen_changes.replace(changes) == Some(changes) {
            return;
        }
        self.partitions_owned.set(member.owned().count() as f64);
        if *member.assigned() != self.assigned {
            self.assigned.clone_from(member.assigned());
            self.rebalancing_since.get_or_insert(now);
        }
        if member.is_settled() {
            if let Some(since) = self.rebalancing_since.take() {
                self.rebalance
                    .record(now.saturating_duration_since(since).as_secs_f64());
            }
        }
    }
}

/// The telemetry of `partition`, registered the first time it is needed.
fn entry<'a>(
    partitions: &'a mut HashMap<TopicPartition, PartitionTelemetry>,
    labels: &[Label],
    partition: &TopicPartition,
) -> &'a mut PartitionTelemetry {
    partitions
        .entry(partition.clone())
        .or_insert_with(|| PartitionTelemetry::new(labels, partition))
}

/// A claim took effect, `waited` after it began.
fn start_claim(
    state: &mut PartitionTelemetry,
    partition: &TopicPartition,
    token: FencingToken,
    waited: Duration,
    claims: &Counter,
    claim_wait: &Histogram,
) {
    tracing::info!(
        topic = &*partition.topic,
        partition = partition.partition,
        token = token.0,
        "claimed"
    );
    state.token = Some(token);
    // What was known belongs to the previous claim; the new one reads the
    // committed offset afresh and its fetcher reports its own watermark.
    state.committed = None;
    state.high_watermark = None;
    state.owned_gauge.set(1.0);
    claims.increment(1);
    claim_wait.record(waited.as_secs_f64());
    if let Some(span) = state.take(|s| s.claim.take()) {
        span.record("token", token.0);
        span.record("outcome", "claimed");
    }
}

/// A claim ended: released by this member, or lost (session expiry, a
/// fenced commit, an owner record that turned out to be gone).
fn end_claim(
    state: &mut PartitionTelemetry,
    partition: &TopicPartition,
    now: Instant,
    released: bool,
    handoffs: &Counter,
) {
    let Some(token) = state.token.take() else {
        return;
    };
    let (topic, number) = (&*partition.topic, partition.partition);
    let outcome = if released {
        handoffs.increment(1);
        tracing::info!(topic, partition = number, token = token.0, "released");
        "released"
    } else {
        tracing::info!(topic, partition = number, token = token.0, "lost");
        "lost"
    };
    state.owned_gauge.set(0.0);
    // Lag is the owner's to report: a stale value here would count the
    // partition twice in a sum over the group.
    if let Some(lag) = &state.lag_gauge {
        lag.set(0.0);
    }
    if let Some(timed) = state.take(|s| s.release.take()) {
        timed.end(now, outcome);
    }
    if let Some((_, timed)) = state.take(|s| s.drain.take()) {
        timed.end(now, outcome);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;

    use metrics::{GaugeFn, Key, KeyName, Metadata, Recorder};

    use tenure_core::StoreError;

    use super::*;

    /// A series: its name, its partition label, its value.
    type Series = (String, Option<String>, Arc<Cell>);

    /// Keeps the last value of every gauge and counter, by name and
    /// partition label.
    #[derive(Default)]
    struct Values(Mutex<Vec<Series>>);

    #[derive(Default)]
    struct Cell(AtomicU64);

    impl GaugeFn for Cell {
        fn increment(&self, _: f64) {
            unimplemented!("not used by the telemetry")
        }
        fn decrement(&self, _: f64) {
            unimplemented!("not used by the telemetry")
        }
        fn set(&self, value: f64) {
            self.0.store(value.to_bits(), Ordering::Relaxed);
        }
    }

    impl metrics::CounterFn for Cell {
        fn increment(&self, value: u64) {
            let now = f64::from_bits(self.0.load(Ordering::Relaxed)) + value as f64;
            self.0.store(now.to_bits(), Ordering::Relaxed);
        }
        fn absolute(&self, _: u64) {
            unimplemented!("not used by the telemetry")
        }
    }

    impl Values {
        fn cell(&self, key: &Key) -> Arc<Cell> {
            let partition = key
                .labels()
                .find(|l| l.key() == "partition")
                .map(|l| l.value().to_owned());
            let cell = Arc::new(Cell::default());
            let mut all = self.0.lock().expect("not poisoned");
            all.push((key.name().to_owned(), partition, cell.clone()));
            cell
        }

        /// The value of the series registered last under `name` and
        /// `partition` (a real recorder keeps one series per key and hands
        /// a registration the same one again).
        fn get(&self, name: &str, partition: Option<&str>) -> Option<f64> {
            let all = self.0.lock().expect("not poisoned");
            all.iter()
                .rev()
                .find(|(n, p, _)| n == name && p.as_deref() == partition)
                .map(|(_, _, c)| f64::from_bits(c.0.load(Ordering::Relaxed)))
        }
    }

    impl Recorder for Values {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.cell(key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.cell(key))
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    /// Lag is log end minus the offset in the store: the one read when the
    /// claim began, then each successful commit; fetches of an older claim
    /// and failed commits do not count.
    #[test]
    fn lag_follows_commits_and_the_log_end() {
        let values = Values::default();
        let p = TopicPartition::new("t", 3);
        let token = FencingToken(9);
        let now = Instant::now();
        let mut telemetry = metrics::with_local_recorder(&values, || {
            let mut telemetry = Telemetry::new("g", &MemberId::new("m").expect("valid id"));
            telemetry.on_app_event(
                &AppEvent::Claiming {
                    partition: p.clone(),
                },
                now,
            );
            telemetry.on_app_event(
                &AppEvent::Claimed {
                    partition: p.clone(),
                    token,
                    waited: Duration::from_millis(5),
                },
                now,
            );
            telemetry
        });
        let lag = |values: &Values| values.get(PARTITION_LAG, Some("3"));
        assert_eq!(values.get(CLAIMS_TOTAL, None), Some(1.0));
        assert_eq!(values.get(PARTITION_OWNED, Some("3")), Some(1.0));
        metrics::with_local_recorder(&values, || {
            telemetry.on_high_watermark(&p, token, 25);
            telemetry.on_app_event(
                &AppEvent::OffsetRead {
                    partition: p.clone(),
                    token,
                    committed: Some(10),
                },
                now,
            );
        });
        assert_eq!(lag(&values), Some(15.0));
        assert_eq!(values.get(COMMITTED_OFFSET, Some("3")), None);
        let commit = |telemetry: &mut Telemetry, offset, outcome: Option<StoreError>| {
            telemetry.on_app_event(
                &AppEvent::Committing {
                    partition: p.clone(),
                    token,
                    offset,
                },
                now,
            );
            let result = outcome.map_or(Ok(()), Err);
            let event = AppEvent::commit_outcome(p.clone(), token, offset, &result);
            telemetry.on_app_event(&event, now);
        };
        metrics::with_local_recorder(&values, || commit(&mut telemetry, 20, None));
        assert_eq!(values.get(COMMITTED_OFFSET, Some("3")), Some(20.0));
        assert_eq!(lag(&values), Some(5.0));
        telemetry.on_high_watermark(&p, FencingToken(8), 100);
        assert_eq!(lag(&values), Some(5.0), "a stale claim's fetch");
        telemetry.on_high_watermark(&p, token, 30);
        assert_eq!(lag(&values), Some(10.0));
        commit(&mut telemetry, 30, Some(StoreError::ConnectionLoss));
        commit(&mut telemetry, 30, Some(StoreError::NotOwner));
        assert_eq!(lag(&values), Some(10.0), "failed commits change nothing");
        assert_eq!(values.get(COMMITTED_OFFSET, Some("3")), Some(20.0));
        assert_eq!(values.get(COMMIT_FAILURES_TOTAL, None), Some(1.0));
        assert_eq!(values.get(COMMITS_FENCED_TOTAL, None), Some(1.0));
        telemetry.on_app_event(
            &AppEvent::Lost {
                partition: p.clone(),
                token,
            },
            now,
        );
        assert_eq!(values.get(PARTITION_OWNED, Some("3")), Some(0.0));
        assert_eq!(lag(&values), Some(0.0), "lag is the owner's to report");
        assert_eq!(
            values.get(HANDOFFS_TOTAL, None),
            Some(0.0),
            "lost, not handed over"
        );
    }

    #[test]
    fn a_partition_no_longer_held_is_forgotten() {
        let values = Values::default();
        let p = TopicPartition::new("t", 3);
        let now = Instant::now();
        let claim = |telemetry: &mut Telemetry, token| {
            telemetry.on_app_event(
                &AppEvent::Claiming {
                    partition: p.clone(),
                },
                now,
            );
            telemetry.on_app_event(
                &AppEvent::Claimed {
                    partition: p.clone(),
                    token,
                    waited: Duration::ZERO,
                },
                now,
            );
        };
        metrics::with_local_recorder(&values, || {
            let mut telemetry = Telemetry::new("g", &MemberId::new("m").expect("valid id"));
            claim(&mut telemetry, FencingToken(1));
            telemetry.on_fetch(
                &FetchCommand::Stop {
                    partition: p.clone(),
                    token: FencingToken(1),
                },
                now,
            );
            telemetry.on_app_event(
                &AppEvent::Releasing {
                    partition: p.clone(),
                    token: FencingToken(1),
                },
                now,
            );
            assert_eq!(telemetry.partitions.len(), 1, "a release under way");
            telemetry.on_app_event(
                &AppEvent::Released {
                    partition: p.clone(),
                    token: FencingToken(1),
                },
                now,
            );
            assert!(telemetry.partitions.is_empty(), "released: nothing kept");
            assert_eq!(values.get(PARTITION_OWNED, Some("3")), Some(0.0));
            assert_eq!(values.get(HANDOFFS_TOTAL, None), Some(1.0));

            claim(&mut telemetry, FencingToken(2));
            assert_eq!(values.get(PARTITION_OWNED, Some("3")), Some(1.0));
            telemetry.on_app_event(
                &AppEvent::Claiming {
                    partition: TopicPartition::new("t", 4),
                },
                now,
            );
            telemetry.on_app_event(
                &AppEvent::ClaimAbandoned {
                    partition: TopicPartition::new("t", 4),
                },
                now,
            );
            assert_eq!(
                telemetry.partitions.keys().collect::<Vec<_>>(),
                [&p],
                "an abandoned claim is forgotten, a held one kept"
            );
        });
    }
}
