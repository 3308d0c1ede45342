//! What a member hands its application, as streams that compose: each is a
//! [`futures_core::Stream`], owned apart from the [`crate::GroupMember`] and
//! from each other, so that one `tokio::select!` can wait on messages,
//! assignment changes, problems and a shutdown signal together.
//!
//! The channels behind them are bounded, and the member never waits for
//! the application: an application that does not read one of them costs a
//! bounded amount of memory, by the rule each type states.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures_core::Stream;
use tenure_core::{FencingToken, TopicPartition};
use tokio::sync::{mpsc, watch};

use crate::values::{AssignmentEvent, MemberEnd, Problem};
use tenure_kafka::{Interleaved, Lease, Message, PartitionStream};

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
/// The partitions take turns: at most `KafkaConfig::max_messages_in_a_row`
/// messages of one are handed out in a row while another has messages
/// waiting, so a backlogged partition does not hold the others up.
///
/// Memory: the member fetches at most `KafkaConfig::buffered_batches`
/// batches per partition, and `KafkaConfig::max_buffered_bytes` over all
/// partitions, ahead of what the application takes; a message
/// never taken is never acknowledged, so its partition's commits stop there
/// (the offset stays at it, and the partition is committed up to it when it
/// moves).
pub struct Messages {
    /// The partitions' queues, polled in place (`None`: without Kafka).
    inner: Option<Interleaved>,
}

impl Messages {
    /// Every partition's messages, in turns (`None`: without Kafka).
    pub(crate) fn group(interleaved: Option<Interleaved>) -> Messages {
        Messages { inner: interleaved }
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
            Some(inner) => inner.poll_next(cx),
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

/// The changes in what the member consumes, in order for each partition.
///
/// An [`AssignmentEvent::Assigned`] or [`AssignmentEvent::Resumed`] is
/// handed out only while its claim holds at that instant, by the same
/// check as a message: the member's own deadline has not passed, and the
/// claim has not ended since. One whose claim ended before the application
/// could hear of it is not handed out, and neither are the later changes
/// of that claim: the application never hears of a claim it could not use.
/// A change that tells the application to stop is never held back.
///
/// Overflow rule: when [`EVENTS_CAPACITY`] changes wait unread, the member
/// keeps only the latest change of each partition until there is room
/// again (so what waits is bounded by the number of partitions), then
/// sends those, in partition order. The last change of every partition
/// always arrives; a change that a later one of the same partition
/// replaced does not.
pub struct Events {
    inner: Pin<Box<dyn Stream<Item = AssignmentEvent> + Send>>,
}

impl Events {
    fn new(gate: EventGate) -> Events {
        Events {
            inner: Box::pin(futures_util::stream::unfold(gate, |mut gate| async move {
                let event = gate.next().await?;
                Some((event, gate))
            })),
        }
    }

    /// The next change (`None` once the member has closed).
    pub async fn next(&mut self) -> Option<AssignmentEvent> {
        futures_util::StreamExt::next(self).await
    }

    /// The next change that may be handed out now, without waiting.
    pub fn try_next(&mut self) -> Option<AssignmentEvent> {
        futures_util::FutureExt::now_or_never(self.next()).flatten()
    }
}

impl Stream for Events {
    type Item = AssignmentEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<AssignmentEvent>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

/// The claims whose consumption the member has started and not yet told
/// ended: the driver adds a claim before it tells
/// [`AssignmentEvent::Assigned`] and removes it before it tells
/// [`AssignmentEvent::Revoked`], so that a reader never sees an event
/// before the claim it speaks of is recorded.
#[derive(Clone, Debug, Default)]
pub(crate) struct HeldClaims(Arc<Mutex<BTreeMap<TopicPartition, FencingToken>>>);

impl HeldClaims {
    /// Consumption of `partition` under `token` has started.
    pub(crate) fn started(&self, partition: &TopicPartition, token: FencingToken) {
        self.lock().insert(partition.clone(), token);
    }

    /// The claim `token` on `partition` has ended.
    pub(crate) fn ended(&self, partition: &TopicPartition, token: FencingToken) {
        let mut claims = self.lock();
        if claims.get(partition) == Some(&token) {
            claims.remove(partition);
        }
    }

    fn holds(&self, partition: &TopicPartition, token: FencingToken) -> bool {
        self.lock().get(partition) == Some(&token)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<TopicPartition, FencingToken>> {
        // The map stays whole whatever a panicking holder did: every
        // change is one insert or one remove.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What decides whether the next assignment change may be handed out.
struct EventGate {
    receiver: mpsc::Receiver<AssignmentEvent>,
    lease: Lease,
    claims: HeldClaims,
    /// The change received and not handed out yet: it waits for the lease.
    held: Option<AssignmentEvent>,
    /// Claims that ended before the application heard of them.
    unseen: BTreeSet<(TopicPartition, FencingToken)>,
}

impl EventGate {
    async fn next(&mut self) -> Option<AssignmentEvent> {
        loop {
            let event = match self.held.take() {
                Some(event) => event,
                None => self.receiver.recv().await?,
            };
            let (partition, token) = claim_of(&event);
            let claim = (partition.clone(), token);
            if self.unseen.contains(&claim) {
                if event.ends_claim() {
                    self.unseen.remove(&claim);
                }
                continue;
            }
            if !matches!(
                event,
                AssignmentEvent::Assigned { .. } | AssignmentEvent::Resumed { .. }
            ) {
                return Some(event);
            }
            if !self.claims.holds(partition, token) {
                self.unseen.insert(claim);
                continue;
            }
            let now = tokio::time::Instant::now().into_std();
            if self.lease.borrow_and_update().is_some_and(|end| now < end) {
                return Some(event);
            }
            // Not now: the member's task has not caught up (or the session
            // is lapsing). It publishes its deadline after every step; look
            // again then, at whether the claim still holds too.
            self.held = Some(event);
            if self.lease.changed().await.is_err() {
                // The member is gone, and every claim with it.
                self.held = None;
                self.claims = HeldClaims::default();
            }
        }
    }
}

fn claim_of(event: &AssignmentEvent) -> (&TopicPartition, FencingToken) {
    (event.partition(), event.token())
}

/// The problems the member reports; it keeps working after each.
///
/// If the member's task ends on its own (anything but
/// [`crate::MemberHandle::close`]), the last item is [`Problem::Ended`]
/// with the reason; then the stream ends.
///
/// Overflow rule: when [`ERRORS_CAPACITY`] problems wait unread, further
/// ones are dropped and counted, and the next one the application can
/// receive is [`Problem::Dropped`] with the count. A broker outage that
/// fails every partition's fetch every few seconds then costs nothing for
/// an application that does not read its problems.
#[must_use = "streams do nothing unless polled"]
pub struct Errors {
    inner: Pin<Box<dyn Stream<Item = Problem> + Send>>,
}

impl Errors {
    pub(crate) fn new(receiver: mpsc::Receiver<Problem>, end: EndWatch) -> Errors {
        let problems =
            futures_util::stream::unfold((receiver, Some(end)), |(mut receiver, end)| async move {
                if let Some(problem) = receiver.recv().await {
                    return Some((problem, (receiver, end)));
                }
                // The member's task is gone: say why, once, unless it
                // closed as asked.
                let mut end = end?;
                let reason = end.wait_for(Option::is_some).await.ok()?.clone()?;
                (reason != MemberEnd::Closed).then_some((Problem::Ended(reason), (receiver, None)))
            });
        Errors {
            inner: Box::pin(problems),
        }
    }

    /// The next problem (`None` once the member has ended).
    pub async fn next(&mut self) -> Option<Problem> {
        futures_util::StreamExt::next(self).await
    }

    /// The next problem already waiting, without waiting.
    pub fn try_next(&mut self) -> Option<Problem> {
        futures_util::FutureExt::now_or_never(self.next()).flatten()
    }
}

impl Stream for Errors {
    type Item = Problem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Problem>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for Errors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Errors").finish_non_exhaustive()
    }
}

/// Why the member's task ended, once it has: set when the task ends, by
/// whatever way.
pub(crate) type EndWatch = watch::Receiver<Option<MemberEnd>>;

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
pub(crate) struct AssignmentSender {
    sender: mpsc::Sender<AssignmentEvent>,
    /// The latest change of each partition that found the channel full.
    overflow: BTreeMap<TopicPartition, AssignmentEvent>,
}

/// The sending side of a channel that never waits: while the channel is
/// full, what comes is dropped and counted, and the count goes out (as the
/// item `dropped` makes of it) before anything else once there is room.
/// The member's side of the [`Errors`] channel is one, the exactly-once
/// writers' reports another.
#[derive(Debug)]
pub(crate) struct CountingSender<T> {
    sender: mpsc::Sender<T>,
    /// Items dropped since the last count went out.
    dropped: u64,
    /// The item that tells the receiver how many were dropped.
    count: fn(u64) -> T,
}

/// The member's side of the [`Errors`] channel.
pub(crate) type ProblemSender = CountingSender<Problem>;

/// The two ends of the events and errors channels; assignment changes are
/// handed out by `lease` and `claims` (see [`Events`]).
pub(crate) fn channels(
    lease: Lease,
    claims: HeldClaims,
    end: EndWatch,
) -> ((AssignmentSender, Events), (ProblemSender, Errors)) {
    let (events_tx, events_rx) = mpsc::channel(EVENTS_CAPACITY);
    let (errors_tx, errors_rx) = mpsc::channel(ERRORS_CAPACITY);
    (
        (
            AssignmentSender {
                sender: events_tx,
                overflow: BTreeMap::new(),
            },
            Events::new(EventGate {
                receiver: events_rx,
                lease,
                claims,
                held: None,
                unseen: BTreeSet::new(),
            }),
        ),
        (
            CountingSender::new(errors_tx, |count| Problem::Dropped { count }),
            Errors::new(errors_rx, end),
        ),
    )
}

fn partition_of(event: &AssignmentEvent) -> &TopicPartition {
    claim_of(event).0
}

impl AssignmentSender {
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

impl<T> CountingSender<T> {
    /// Sends into `sender`; `count` makes the item that reports drops.
    pub(crate) fn new(sender: mpsc::Sender<T>, count: fn(u64) -> T) -> Self {
        CountingSender {
            sender,
            dropped: 0,
            count,
        }
    }

    /// Sends `item`, or drops and counts it while the channel is full;
    /// `false` if it was dropped.
    pub(crate) fn send(&mut self, item: T) -> bool {
        if !self.report_dropped() {
            self.dropped += 1;
            return false;
        }
        match self.sender.try_send(item) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped += 1;
                false
            }
        }
    }

    /// Sends the count of dropped items, if any; `false` if there was no
    /// room for it.
    pub(crate) fn report_dropped(&mut self) -> bool {
        if self.dropped == 0 {
            return true;
        }
        match self.sender.try_send((self.count)(self.dropped)) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped = 0;
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => false,
        }
    }

    /// Whether a count of dropped items waits for room.
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

    /// The member's side of the events: its deadline and its claims.
    struct Member {
        lease: tokio::sync::watch::Sender<Option<std::time::Instant>>,
        claims: HeldClaims,
    }

    impl Member {
        fn hold(&self, p: u32, token: u64) {
            self.claims
                .started(&TopicPartition::new("t", p), FencingToken(token));
        }

        fn end(&self, p: u32, token: u64) {
            self.claims
                .ended(&TopicPartition::new("t", p), FencingToken(token));
        }
    }

    /// Events of a member whose session holds for an hour.
    fn events_channel() -> (Member, AssignmentSender, Events) {
        let (lease, lease_rx) = tokio::sync::watch::channel(Some(
            std::time::Instant::now() + std::time::Duration::from_secs(3600),
        ));
        let claims = HeldClaims::default();
        let ((sender, events), _) = channels(lease_rx, claims.clone(), watch::channel(None).1);
        (Member { lease, claims }, sender, events)
    }

    /// An events channel with every place taken by `assigned(i, 1)`, each
    /// of a claim that holds.
    fn full_events() -> (Member, AssignmentSender, Events) {
        let (member, mut sender, events) = events_channel();
        for i in 0..EVENTS_CAPACITY as u32 {
            member.hold(i, 1);
            sender.send(assigned(i, 1));
        }
        (member, sender, events)
    }

    #[test]
    fn an_assignment_waits_for_the_lease_and_is_not_told_once_its_claim_ended() {
        let (member, mut sender, mut events) = events_channel();
        member.hold(1, 7);
        sender.send(assigned(1, 7));
        member.hold(2, 8);
        sender.send(assigned(2, 8));
        // The session is lapsing: nothing is handed out, not even later.
        member.lease.send_replace(None);
        assert_eq!(events.try_next(), None);
        // The claim of partition 1 ended meanwhile; partition 2's holds.
        member.end(1, 7);
        sender.send(revoked(1, 7));
        member.lease.send_replace(Some(
            std::time::Instant::now() + std::time::Duration::from_secs(3600),
        ));
        // Neither the assignment of the ended claim nor its revocation is
        // told: the application never heard of it.
        assert_eq!(events.try_next(), Some(assigned(2, 8)));
        assert_eq!(events.try_next(), None);
        // A deadline already past holds the assignment back too.
        member.hold(3, 9);
        sender.send(assigned(3, 9));
        member.lease.send_replace(Some(std::time::Instant::now()));
        assert_eq!(events.try_next(), None);
        // A change that tells the application to stop is never held back.
        let (member, mut sender, mut events) = events_channel();
        member.lease.send_replace(None);
        sender.send(revoked(4, 3));
        assert_eq!(events.try_next(), Some(revoked(4, 3)));
    }

    #[test]
    fn unread_events_coalesce_to_the_latest_per_partition() {
        let (member, mut sender, mut events) = full_events();
        member.hold(5000, 1);
        member.hold(5001, 2);
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
        let (member, mut sender, mut events) = full_events();
        member.hold(7000, 2);
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
        let (_, lease) = tokio::sync::watch::channel(None);
        let (_, (mut sender, mut errors)) =
            channels(lease, HeldClaims::default(), watch::channel(None).1);
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
