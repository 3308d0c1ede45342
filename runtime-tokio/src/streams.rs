//! What a member hands its application, as streams that compose: each is a
//! [`futures_core::Stream`], owned apart from the [`crate::GroupMember`] and
//! from each other, so that one `tokio::select!` can wait on messages,
//! assignment changes, problems and a shutdown signal together.
//!
//! The channels behind them are bounded, and the member never waits for
//! the application: an application that does not read one of them costs a
//! bounded amount of memory, by the rule each type states.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tenure_core::TopicPartition;
use tokio::sync::mpsc;

use crate::kafka::{Batches, Message, PartitionStream};
use crate::member::{AssignmentEvent, Problem};

/// How many assignment changes wait for the application before the member
/// coalesces them (see [`Events`]).
pub const EVENTS_CAPACITY: usize = 1024;

/// How many problems wait for the application before the member drops and
/// counts them (see [`Errors`]).
pub const ERRORS_CAPACITY: usize = 64;

/// The messages of every partition the member owns, in fetch order per
/// partition (with Kafka; without, the stream ends at once). A message is
/// handed out only while its claim holds at that instant.
///
/// Memory: the member fetches at most `KafkaConfig::buffered_batches`
/// batches ahead of what the application takes; a message never taken is
/// never acknowledged, so its partition's commits stop there (the offset
/// stays at it, and the partition is committed up to it when it moves).
pub struct Messages {
    inner: Option<Pin<Box<dyn Stream<Item = Message> + Send>>>,
}

impl Messages {
    pub(crate) fn new(batches: Option<Batches>) -> Messages {
        Messages {
            inner: batches.map(|batches| Box::pin(batch_stream(batches)) as _),
        }
    }

    /// The next message (`None` once the member has closed, or without
    /// Kafka).
    pub async fn next(&mut self) -> Option<Message> {
        futures_util::StreamExt::next(self).await
    }
}

impl Stream for Messages {
    type Item = Message;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        match self.inner.as_mut() {
            Some(inner) => inner.as_mut().poll_next(cx),
            None => Poll::Ready(None),
        }
    }
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Messages")
            .field("kafka", &self.inner.is_some())
            .finish()
    }
}

/// The messages of `batches`, one at a time.
fn batch_stream(batches: Batches) -> impl Stream<Item = Message> + Send {
    futures_util::stream::unfold(batches, |mut batches| async move {
        let message = batches.next().await?;
        Some((message, batches))
    })
}

/// What the member tells its application of one kind, as a stream of its
/// own (see [`Events`] and [`Errors`] for each kind's overflow rule).
#[derive(Debug)]
pub struct Told<T> {
    receiver: mpsc::Receiver<T>,
}

impl<T> Told<T> {
    /// The next one (`None` once the member has closed).
    pub async fn next(&mut self) -> Option<T> {
        self.receiver.recv().await
    }

    /// The next one already waiting, without waiting.
    pub fn try_next(&mut self) -> Option<T> {
        self.receiver.try_recv().ok()
    }

    /// A stream that ends at once (the member's was taken already).
    pub(crate) fn ended() -> Told<T> {
        Told {
            receiver: mpsc::channel(1).1,
        }
    }
}

impl<T> Stream for Told<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.receiver.poll_recv(cx)
    }
}

/// The changes in what the member consumes, in order for each partition.
///
/// Overflow rule: when [`EVENTS_CAPACITY`] changes wait unread, the member
/// keeps only the latest change of each partition until there is room
/// again (so what waits is bounded by the number of partitions), then
/// sends those, in partition order. The last change of every partition
/// always arrives; a change that a later one of the same partition
/// replaced does not.
pub type Events = Told<AssignmentEvent>;

/// The problems the member reports; it keeps working after each.
///
/// Overflow rule: when [`ERRORS_CAPACITY`] problems wait unread, further
/// ones are dropped and counted, and the next one the application can
/// receive is [`Problem::Dropped`] with the count. A broker outage that
/// fails every partition's fetch every few seconds then costs nothing for
/// an application that does not read its problems.
pub type Errors = Told<Problem>;

/// With per-partition streams, the stream of each partition as the member
/// starts consuming it. One waits per owned partition at most.
#[derive(Debug)]
pub struct PartitionStreams {
    receiver: Option<mpsc::UnboundedReceiver<PartitionStream>>,
}

impl PartitionStreams {
    pub(crate) fn new(receiver: Option<mpsc::UnboundedReceiver<PartitionStream>>) -> Self {
        PartitionStreams { receiver }
    }

    /// The stream of the next partition the member starts consuming
    /// (`None` once the member has closed, or without per-partition
    /// streams).
    pub async fn next(&mut self) -> Option<PartitionStream> {
        self.receiver.as_mut()?.recv().await
    }
}

impl Stream for PartitionStreams {
    type Item = PartitionStream;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.receiver.as_mut() {
            Some(receiver) => receiver.poll_recv(cx),
            None => Poll::Ready(None),
        }
    }
}

/// The member's side of the [`Events`] channel: it never waits, and
/// coalesces by the overflow rule.
#[derive(Debug)]
pub(crate) struct EventSender {
    sender: mpsc::Sender<AssignmentEvent>,
    /// The latest change of each partition that found the channel full.
    overflow: BTreeMap<TopicPartition, AssignmentEvent>,
}

/// The member's side of the [`Errors`] channel: it never waits, and drops
/// and counts by the overflow rule.
#[derive(Debug)]
pub(crate) struct ProblemSender {
    sender: mpsc::Sender<Problem>,
    /// Problems dropped since the last [`Problem::Dropped`] went out.
    dropped: u64,
}

/// The two ends of the events and errors channels.
pub(crate) fn channels() -> ((EventSender, Events), (ProblemSender, Errors)) {
    let (events_tx, events_rx) = mpsc::channel(EVENTS_CAPACITY);
    let (errors_tx, errors_rx) = mpsc::channel(ERRORS_CAPACITY);
    (
        (
            EventSender {
                sender: events_tx,
                overflow: BTreeMap::new(),
            },
            Told {
                receiver: events_rx,
            },
        ),
        (
            ProblemSender {
                sender: errors_tx,
                dropped: 0,
            },
            Told {
                receiver: errors_rx,
            },
        ),
    )
}

fn partition_of(event: &AssignmentEvent) -> &TopicPartition {
    match event {
        AssignmentEvent::Assigned { partition, .. }
        | AssignmentEvent::Suspended { partition, .. }
        | AssignmentEvent::Resumed { partition, .. }
        | AssignmentEvent::Revoking { partition, .. }
        | AssignmentEvent::Revoked { partition, .. } => partition,
    }
}

impl EventSender {
    /// Sends `event`, or keeps it as its partition's latest change while
    /// the channel is full.
    pub(crate) fn send(&mut self, event: AssignmentEvent) {
        self.flush();
        if self.overflow.is_empty() {
            match self.sender.try_send(event) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(event)) => {
                    self.overflow.insert(partition_of(&event).clone(), event);
                }
            }
        } else {
            // Behind earlier overflow: join it, so that a partition's
            // changes keep their order.
            self.overflow.insert(partition_of(&event).clone(), event);
        }
    }

    /// Sends what overflowed, as far as there is room.
    pub(crate) fn flush(&mut self) {
        while let Some(entry) = self.overflow.first_entry() {
            match self.sender.try_send(entry.get().clone()) {
                Ok(()) => {
                    entry.remove();
                }
                Err(mpsc::error::TrySendError::Full(_)) => return,
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.overflow.clear();
                    return;
                }
            }
        }
    }

    /// Whether changes wait for room.
    pub(crate) fn has_overflow(&self) -> bool {
        !self.overflow.is_empty()
    }

    /// Resolves once the channel has room (or is closed).
    pub(crate) async fn room(&self) {
        if let Ok(permit) = self.sender.reserve().await {
            drop(permit);
        }
    }
}

impl ProblemSender {
    /// Sends `problem`, or drops and counts it while the channel is full.
    pub(crate) fn send(&mut self, problem: Problem) {
        if !self.report_dropped() {
            self.dropped += 1;
            return;
        }
        match self.sender.try_send(problem) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.dropped += 1,
        }
    }

    /// Sends the count of dropped problems, if any; `false` if there was no
    /// room for it.
    pub(crate) fn report_dropped(&mut self) -> bool {
        if self.dropped == 0 {
            return true;
        }
        let report = Problem::Dropped {
            count: self.dropped,
        };
        match self.sender.try_send(report) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped = 0;
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => false,
        }
    }

    /// Whether a count of dropped problems waits for room.
    pub(crate) fn has_dropped(&self) -> bool {
        self.dropped > 0
    }

    /// Resolves once the channel has room (or is closed).
    pub(crate) async fn room(&self) {
        if let Ok(permit) = self.sender.reserve().await {
            drop(permit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_core::{FencingToken, FetchFrom};

    fn assigned(p: u32, token: u64) -> AssignmentEvent {
        AssignmentEvent::Assigned {
            partition: TopicPartition::new("t", p),
            from: FetchFrom::Oldest,
            token: FencingToken(token),
        }
    }

    fn revoked(p: u32, token: u64) -> AssignmentEvent {
        AssignmentEvent::Revoked {
            partition: TopicPartition::new("t", p),
            token: FencingToken(token),
        }
    }

    /// An events channel with every place taken by `assigned(i, 1)`.
    fn full_events() -> (EventSender, Events) {
        let ((mut sender, events), _) = channels();
        for i in 0..EVENTS_CAPACITY as u32 {
            sender.send(assigned(i, 1));
        }
        (sender, events)
    }

    #[test]
    fn unread_events_coalesce_to_the_latest_per_partition() {
        let (mut sender, mut events) = full_events();
        // Full: these wait, and only the latest of each partition stays.
        sender.send(assigned(5000, 1));
        sender.send(revoked(5000, 1));
        sender.send(assigned(5001, 2));
        assert!(sender.has_overflow());
        assert_eq!(sender.overflow.len(), 2);
        for i in 0..EVENTS_CAPACITY as u32 {
            assert_eq!(events.try_next(), Some(assigned(i, 1)));
        }
        assert_eq!(events.try_next(), None);
        sender.flush();
        assert!(!sender.has_overflow());
        assert_eq!(events.try_next(), Some(revoked(5000, 1)));
        assert_eq!(events.try_next(), Some(assigned(5001, 2)));
        assert_eq!(events.try_next(), None);
    }

    #[test]
    fn a_partitions_changes_keep_their_order_behind_overflow() {
        let (mut sender, mut events) = full_events();
        sender.send(revoked(7000, 1));
        // Room for one again: the overflow goes first, and the newer change
        // waits behind it rather than replace it.
        assert_eq!(events.try_next(), Some(assigned(0, 1)));
        sender.send(assigned(7000, 2));
        for i in 1..EVENTS_CAPACITY as u32 {
            assert_eq!(events.try_next(), Some(assigned(i, 1)));
        }
        assert_eq!(events.try_next(), Some(revoked(7000, 1)));
        sender.flush();
        assert_eq!(events.try_next(), Some(assigned(7000, 2)));
        assert_eq!(events.try_next(), None);
    }

    #[test]
    fn unread_problems_are_dropped_and_counted() {
        let (_, (mut sender, mut errors)) = channels();
        let problem =
            || Problem::Coordination(tenure_core::Error::SessionExpired { partitions: 1 });
        for _ in 0..ERRORS_CAPACITY + 10 {
            sender.send(problem());
        }
        assert!(sender.has_dropped());
        for _ in 0..ERRORS_CAPACITY {
            assert!(matches!(errors.try_next(), Some(Problem::Coordination(_))));
        }
        assert!(errors.try_next().is_none());
        // Room again: the count goes first, then the next problem.
        sender.send(problem());
        assert!(matches!(
            errors.try_next(),
            Some(Problem::Dropped { count: 10 })
        ));
        assert!(matches!(errors.try_next(), Some(Problem::Coordination(_))));
        assert!(!sender.has_dropped());
    }
}
