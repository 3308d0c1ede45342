//! Handing fetched messages to the application: one partition's batches in
//! order ([`Batches`], behind a per-partition stream), or every partition's
//! in turns ([`Interleaved`], behind the member's one message stream).
//!
//! Either way each partition's fetcher fills a bounded queue of its own, so
//! one partition's backlog never sits in front of another's messages. The
//! group stream visits the partitions that have messages in a round robin
//! and hands out at most [`KafkaConfig::max_messages_in_a_row`] of one
//! before moving to the next that has any: a backlogged partition gets its
//! turn like the others, and delays them by at most one turn each.
//!
//! [`KafkaConfig::max_messages_in_a_row`]: crate::KafkaConfig::max_messages_in_a_row

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

use std::time::Instant;

use tenure_core::{FencingToken, TopicPartition};
use tokio::sync::watch;

use crate::batch::{Fetched, Passed};
use crate::budget::Held;
use crate::clock::CoarseDeadline;
use crate::message::{Batch, Message};
use crate::telemetry::Tally;

/// Until when the member may hand out messages
/// ([`tenure_core::Member::consume_deadline`]), as its task last worked it
/// out; `None`: not now. The task sends it after every step (a change or
/// not), so a receiver waiting on it also wakes when a partition stops.
pub type Lease = watch::Receiver<Option<Instant>>;

/// The messages of one owned partition, a [`futures_core::Stream`] (as
/// the member's one message stream is, for one partition); it ends when the partition
/// is revoked.
#[derive(Debug)]
pub struct PartitionStream {
    /// The partition.
    pub partition: TopicPartition,
    /// The claim's fencing token.
    pub token: FencingToken,
    pub(crate) batches: Batches,
}

impl PartitionStream {
    /// The next message, or `None` once the partition is revoked.
    pub async fn next(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.batches.poll_next(cx)).await
    }
}

impl futures_core::Stream for PartitionStream {
    type Item = Message;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Message>> {
        self.batches.poll_next(cx)
    }
}

/// What one partition's queue gives when asked without waiting.
enum Take {
    /// A message, recorded in its ledger as handed out.
    Message(Message),
    /// Nothing buffered now.
    Empty,
    /// The claim's queue is closed and empty: nothing more will come.
    Closed,
    /// The member's deadline has passed: nothing may be handed out until
    /// its task has caught up.
    Expired,
}

/// The member's deadline as a hand-out reads it: the watched value, kept
/// until the member's task changes it, so that a message costs a look at
/// the clock and at the watch's version, not a lock.
pub(crate) struct Deadline {
    lease: Lease,
    end: Option<std::time::Instant>,
    /// `end` on the coarse clock, while it is far enough to tell by it.
    coarse: Option<CoarseDeadline>,
    /// While the deadline has passed: the wait for the member's task to
    /// change it (`false` once the task is gone).
    waiting: Option<Pin<Box<dyn Future<Output = bool> + Send>>>,
}

impl std::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline")
            .field("end", &self.end)
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl Deadline {
    pub(crate) fn new(mut lease: Lease) -> Deadline {
        let end = *lease.borrow_and_update();
        Deadline {
            lease,
            end,
            coarse: end.and_then(CoarseDeadline::new),
            waiting: None,
        }
    }

    fn set(&mut self, end: Option<std::time::Instant>) {
        self.end = end;
        self.coarse = end.and_then(CoarseDeadline::new);
    }

    /// Whether the member may hand out messages now: its own deadline,
    /// checked at the moment of handing out, has not passed. The coarse
    /// clock answers while the deadline is far by it; the precise clock
    /// near the deadline (see [`crate::clock`]).
    fn holds(&mut self) -> bool {
        if self.lease.has_changed().unwrap_or(false) {
            let end = *self.lease.borrow_and_update();
            self.set(end);
        }
        if self.coarse.is_some_and(|coarse| coarse.surely_ahead()) {
            return true;
        }
        // Near the deadline the coarse clock cannot tell: from now on only
        // the precise one does.
        self.coarse = None;
        let now = tokio::time::Instant::now().into_std();
        self.end.is_some_and(|end| now < end)
    }

    /// Ready once the member's task has changed the deadline; `None` once
    /// the task is gone.
    fn poll_changed(&mut self, cx: &mut Context<'_>) -> Poll<Option<()>> {
        let lease = &self.lease;
        let waiting = self.waiting.get_or_insert_with(|| {
            // A clone has seen what this receiver has: it wakes on the
            // next change.
            let mut lease = lease.clone();
            Box::pin(async move { lease.changed().await.is_ok() })
        });
        let alive = std::task::ready!(waiting.as_mut().poll(cx));
        self.waiting = None;
        if !alive {
            return Poll::Ready(None);
        }
        let end = *self.lease.borrow_and_update();
        self.set(end);
        Poll::Ready(Some(()))
    }
}

/// One claim's queue of fetched batches, and the batch being handed out.
#[derive(Debug)]
struct Queue {
    receiver: mpsc::Receiver<Fetched>,
    /// The batch being handed out, and where in it.
    current: Option<(Arc<Batch>, usize)>,
    /// What the current batch passed after its messages.
    passed: Option<Passed>,
    /// The current batch's metrics, recorded when it is done with.
    tally: Option<Tally>,
    /// The current batch's part of the buffer budget, given back when it
    /// is done with.
    held: Option<Held>,
}

impl Queue {
    fn new(receiver: mpsc::Receiver<Fetched>) -> Queue {
        Queue {
            receiver,
            current: None,
            passed: None,
            tally: None,
            held: None,
        }
    }

    fn load(&mut self, fetched: Fetched) {
        self.pass();
        self.current = Some((fetched.batch, 0));
        self.passed = fetched.passed;
        self.tally = fetched.tally;
        self.held = fetched.held;
    }

    /// The next message that may still be handed out, without waiting.
    ///
    /// One fetched before its partition was told to stop (or paused, or
    /// sought away from) is dropped, since the partition may be on its way
    /// to another member. And none is handed out past the member's own
    /// deadline, checked now, at the moment of handing out: a process that
    /// wakes from a pause longer than its session is told
    /// [`Take::Expired`] and waits until its task has caught up (and has
    /// stopped the partition, or heard the session is alive), rather than
    /// hand out a message under a claim that may have passed to another
    /// member meanwhile.
    fn take(&mut self, lease: &mut Deadline) -> Take {
        loop {
            let Some((batch, next)) = self
                .current
                .as_mut()
                .filter(|(batch, next)| *next < batch.records.len())
            else {
                self.current = None;
                self.pass();
                match self.receiver.try_recv() {
                    Ok(fetched) => {
                        self.load(fetched);
                        continue;
                    }
                    Err(TryRecvError::Empty) => return Take::Empty,
                    Err(TryRecvError::Disconnected) => return Take::Closed,
                }
            };
            // The deadline first: a message of a claim that has ended is
            // dropped by `deliver`, once the deadline holds again.
            if !lease.holds() {
                return Take::Expired;
            }
            let index = *next;
            *next += 1;
            let record = &batch.records[index];
            if batch
                .ledger
                .deliver(record.offset, batch.token, batch.generation)
            {
                if let Some(tally) = &mut self.tally {
                    tally.handed(record);
                }
                let last = *next == batch.records.len();
                let message = Message::new(batch.clone(), index);
                // What the fetch passed after its last message counts at
                // once: an application that stops asking after the last
                // message still commits past a trailing transaction marker.
                if last {
                    self.current = None;
                    self.pass();
                }
                return Take::Message(message);
            }
        }
    }

    /// Counts what the current batch passed after its messages as handed
    /// out, and records the batch's metrics: it is done with.
    fn pass(&mut self) {
        if let Some(passed) = self.passed.take() {
            passed
                .ledger
                .pass(passed.last, passed.token, passed.generation);
            if let Some(tally) = &mut self.tally {
                tally.passed(passed.last);
            }
        }
        self.tally = None;
        self.held = None;
    }
}

/// One partition's batches, handed out one message at a time, in order.
#[derive(Debug)]
pub(crate) struct Batches {
    queue: Queue,
    lease: Deadline,
}

impl Batches {
    pub(crate) fn new(receiver: mpsc::Receiver<Fetched>, lease: Lease) -> Batches {
        Batches {
            queue: Queue::new(receiver),
            lease: Deadline::new(lease),
        }
    }

    /// The next message that may still be handed out (see [`Queue::take`]);
    /// `None` once the claim has ended and its queue is empty.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        loop {
            match self.queue.take(&mut self.lease) {
                Take::Message(message) => return Poll::Ready(Some(message)),
                Take::Empty => match std::task::ready!(self.queue.receiver.poll_recv(cx)) {
                    Some(fetched) => self.queue.load(fetched),
                    None => return Poll::Ready(None),
                },
                Take::Closed => return Poll::Ready(None),
                // `None`: the member's task is gone, nothing more to hand out.
                Take::Expired => {
                    if std::task::ready!(self.lease.poll_changed(cx)).is_none() {
                        return Poll::Ready(None);
                    }
                }
            }
        }
    }
}

/// What the data plane and the fetchers tell the group stream.
#[derive(Debug)]
pub(crate) enum Signal {
    /// A claim's queue, opened when its partition starts.
    Opened(u64, mpsc::Receiver<Fetched>),
    /// A fetcher put a batch in the queue `id` (sent after the batch).
    Filled(u64),
    /// The claim of the queue `id` ended: what it still holds may not be
    /// handed out.
    Ended(u64),
}

/// The data plane's side of the group stream: opens a queue per claim.
#[derive(Debug)]
pub struct GroupQueues {
    signals: mpsc::UnboundedSender<Signal>,
    next_id: u64,
    capacity: usize,
}

/// Where a claim's fetcher puts its batches.
#[derive(Clone, Debug)]
pub(crate) enum Outlet {
    /// The queue behind the claim's own partition stream.
    Partition(mpsc::Sender<Fetched>),
    /// The claim's queue in the member's group stream.
    Group(QueueSender),
}

impl Outlet {
    /// Puts a batch in, waiting while the queue is full; `false` once the
    /// stream is gone.
    pub(crate) async fn send(&self, fetched: Fetched) -> bool {
        match self {
            Outlet::Partition(sender) => sender.send(fetched).await.is_ok(),
            Outlet::Group(sender) => sender.send(fetched).await,
        }
    }

    /// Tells the stream the claim has ended (a partition stream sees its
    /// sender go).
    pub(crate) fn end(&self) {
        if let Outlet::Group(sender) = self {
            sender.end();
        }
    }
}

/// A claim's end of its queue in the group stream.
#[derive(Clone, Debug)]
pub(crate) struct QueueSender {
    id: u64,
    batches: mpsc::Sender<Fetched>,
    signals: mpsc::UnboundedSender<Signal>,
}

impl QueueSender {
    /// Puts a batch in the queue, waiting while it is full; `false` once
    /// the stream is gone.
    pub(crate) async fn send(&self, fetched: Fetched) -> bool {
        if self.batches.send(fetched).await.is_err() {
            return false;
        }
        // After the batch: the stream, told, always finds it.
        self.signals.send(Signal::Filled(self.id)).is_ok()
    }

    /// Tells the stream the claim has ended.
    pub(crate) fn end(&self) {
        let _ = self.signals.send(Signal::Ended(self.id));
    }
}

impl GroupQueues {
    /// The queues of a member's group stream; each claim's holds at most
    /// `capacity` batches.
    pub fn new(capacity: usize, max_in_a_row: usize, lease: Lease) -> (GroupQueues, Interleaved) {
        let (signals, received) = mpsc::unbounded_channel();
        (
            GroupQueues {
                signals,
                next_id: 0,
                capacity: capacity.max(1),
            },
            Interleaved {
                signals: received,
                line: VecDeque::new(),
                idle: HashMap::new(),
                in_a_row: 0,
                max_in_a_row: max_in_a_row.max(1),
                lease: Deadline::new(lease),
            },
        )
    }

    /// A new claim's queue.
    pub(crate) fn open(&mut self) -> QueueSender {
        let (batches, receiver) = mpsc::channel(self.capacity);
        let id = self.next_id;
        self.next_id += 1;
        let _ = self.signals.send(Signal::Opened(id, receiver));
        QueueSender {
            id,
            batches,
            signals: self.signals.clone(),
        }
    }
}

/// How often, in messages, a turn looks at what the fetchers said: at its
/// start and every so many messages, so that the signals queue stays short
/// even while a single partition has the stream to itself.
const SIGNALS_EVERY: usize = 64;

/// Every partition's messages, in turns: the member's one message stream.
///
/// Memory: each claim's queue holds at most `KafkaConfig::buffered_batches`
/// batches, and its fetcher at most one more; the signals queue holds at
/// most one entry per batch fetched since it was last read, plus one per
/// claim opened or ended.
#[derive(Debug)]
pub struct Interleaved {
    signals: mpsc::UnboundedReceiver<Signal>,
    /// Queues that may have messages, in the order of their turns; the
    /// front one is handing out.
    line: VecDeque<(u64, Queue)>,
    /// Queues found empty, until their fetcher fills them again.
    idle: HashMap<u64, Queue>,
    /// Messages the front queue handed out in its current turn.
    in_a_row: usize,
    max_in_a_row: usize,
    lease: Deadline,
}

impl Interleaved {
    fn apply(&mut self, signal: Signal) {
        match signal {
            Signal::Opened(id, receiver) => {
                self.idle.insert(id, Queue::new(receiver));
            }
            // In line already if not idle.
            Signal::Filled(id) => {
                if let Some(queue) = self.idle.remove(&id) {
                    self.line.push_back((id, queue));
                }
            }
            Signal::Ended(id) => {
                if self.idle.remove(&id).is_none() {
                    if self.line.front().is_some_and(|(front, _)| *front == id) {
                        self.in_a_row = 0;
                    }
                    self.line.retain(|(queued, _)| *queued != id);
                }
            }
        }
    }

    /// Takes in what the fetchers and the data plane said.
    fn hear(&mut self) {
        while let Ok(signal) = self.signals.try_recv() {
            self.apply(signal);
        }
    }

    /// The next message that may still be handed out, from the queue whose
    /// turn it is; `None` once the member has closed.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        loop {
            let Some((_, queue)) = self.line.front_mut() else {
                self.hear();
                if self.line.is_empty() {
                    // Nothing buffered anywhere: wait for a fetcher.
                    match std::task::ready!(self.signals.poll_recv(cx)) {
                        Some(signal) => self.apply(signal),
                        None => return Poll::Ready(None),
                    }
                }
                continue;
            };
            match queue.take(&mut self.lease) {
                Take::Message(message) => {
                    self.in_a_row += 1;
                    if self.in_a_row >= self.max_in_a_row {
                        // Queues filled meanwhile go before this one.
                        self.hear();
                        self.in_a_row = 0;
                        self.line.rotate_left(1);
                    } else if self.in_a_row.is_multiple_of(SIGNALS_EVERY) {
                        self.hear();
                    }
                    return Poll::Ready(Some(message));
                }
                // Back in line when its fetcher fills it again.
                Take::Empty => {
                    self.in_a_row = 0;
                    if let Some((id, queue)) = self.line.pop_front() {
                        self.idle.insert(id, queue);
                    }
                    self.hear();
                }
                Take::Closed => {
                    self.in_a_row = 0;
                    self.line.pop_front();
                    self.hear();
                }
                // `None`: the member's task is gone, nothing more to hand out.
                Take::Expired => {
                    if std::task::ready!(self.lease.poll_changed(cx)).is_none() {
                        return Poll::Ready(None);
                    }
                }
            }
        }
    }

    #[cfg(test)]
    async fn next(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use tenure_core::{FencingToken, TopicPartition};

    use super::*;
    use crate::ledger::{LedgerCell, Ledgers};
    use crate::message::Record;

    fn batch(partition: u32, offsets: std::ops::Range<i64>, ledger: &Arc<LedgerCell>) -> Fetched {
        let records = offsets
            .map(|offset| Record {
                offset,
                key: None,
                value: None,
                headers: Default::default(),
                timestamp: crate::Timestamp::CreateTime(0),
            })
            .collect();
        Fetched {
            batch: Arc::new(Batch {
                topic: "t".into(),
                partition,
                token: ledger.token,
                generation: 0,
                ledger: ledger.clone(),
                records,
            }),
            passed: None,
            tally: None,
            held: None,
        }
    }

    fn live_lease() -> (
        tokio::sync::watch::Sender<Option<std::time::Instant>>,
        Lease,
    ) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(3600);
        tokio::sync::watch::channel(Some(end))
    }

    /// (partition, offset) of the next `n` messages.
    async fn take(stream: &mut Interleaved, n: usize) -> Vec<(u32, i64)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let message = stream.next().await.expect("a message");
            out.push((message.partition(), message.offset()));
        }
        out
    }

    #[tokio::test]
    async fn a_backlog_takes_turns_with_the_other_partitions() {
        let ledgers = Ledgers::default();
        let (_lease_tx, lease) = live_lease();
        let (mut queues, mut stream) = GroupQueues::new(4, 3, lease);
        let cells: Vec<Arc<LedgerCell>> = (0..3)
            .map(|p| {
                ledgers.open(
                    &TopicPartition::new("t", p),
                    FencingToken(10 + u64::from(p)),
                )
            })
            .collect();
        let senders: Vec<QueueSender> = (0..3).map(|_| queues.open()).collect();

        // Partition 0 is backlogged: two batches of 100 before the others'.
        assert!(senders[0].send(batch(0, 0..100, &cells[0])).await);
        assert!(senders[0].send(batch(0, 100..200, &cells[0])).await);
        assert!(senders[1].send(batch(1, 0..4, &cells[1])).await);
        assert!(senders[2].send(batch(2, 0..2, &cells[2])).await);

        // Three in a row at most, in the order the queues filled.
        assert_eq!(
            take(&mut stream, 14).await,
            [
                (0, 0),
                (0, 1),
                (0, 2),
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 0),
                (2, 1),
                (0, 3),
                (0, 4),
                (0, 5),
                (1, 3),
                (0, 6),
                (0, 7),
            ]
        );
        // Alone now: partition 0 goes on through both of its batches.
        let rest = take(&mut stream, 192).await;
        assert!(rest.iter().zip(8..).all(|(m, o)| *m == (0, o)), "{rest:?}");

        // A partition filled later gets the next turn, once the current one
        // ends: after 201, partition 0 has handed out 1 of its 3.
        assert!(senders[0].send(batch(0, 200..210, &cells[0])).await);
        assert_eq!(take(&mut stream, 2).await, [(0, 200), (0, 201)]);
        assert!(senders[1].send(batch(1, 4..6, &cells[1])).await);
        assert_eq!(
            take(&mut stream, 5).await,
            [(0, 202), (0, 203), (1, 4), (1, 5), (0, 204)]
        );
    }

    #[tokio::test]
    async fn an_ended_claims_messages_are_not_handed_out() {
        let ledgers = Ledgers::default();
        let (_lease_tx, lease) = live_lease();
        let (mut queues, mut stream) = GroupQueues::new(4, 2, lease);
        let (p0, p1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
        let cell0 = ledgers.open(&p0, FencingToken(1));
        let cell1 = ledgers.open(&p1, FencingToken(2));
        let (q0, q1) = (queues.open(), queues.open());
        assert!(q0.send(batch(0, 0..10, &cell0)).await);
        assert!(q1.send(batch(1, 0..10, &cell1)).await);
        assert_eq!(take(&mut stream, 3).await, [(0, 0), (0, 1), (1, 0)]);

        // Partition 0 stops: the rest of its batch is dropped, whether the
        // stream hears of the end first or finds its ledger stopping.
        ledgers.stop(&p0, FencingToken(1));
        assert_eq!(
            take(&mut stream, 9).await,
            (1..10).map(|o| (1, o)).collect::<Vec<_>>()
        );
        q0.end();
        drop(q0);
        assert!(q1.send(batch(1, 10..11, &cell1)).await);
        assert_eq!(take(&mut stream, 1).await, [(1, 10)]);
    }

    #[tokio::test]
    async fn nothing_is_handed_out_past_the_members_deadline() {
        let ledgers = Ledgers::default();
        let (lease_tx, lease) = live_lease();
        let (mut queues, mut stream) = GroupQueues::new(4, 8, lease);
        let cell = ledgers.open(&TopicPartition::new("t", 0), FencingToken(1));
        let q = queues.open();
        assert!(q.send(batch(0, 0..4, &cell)).await);
        assert_eq!(take(&mut stream, 1).await, [(0, 0)]);

        let _ = lease_tx.send(Some(std::time::Instant::now()));
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(waiting.is_err(), "handed out past the deadline");

        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let _ = lease_tx.send(Some(end));
        assert_eq!(take(&mut stream, 1).await, [(0, 1)]);
        drop(lease_tx);
        let _ = q;
    }
}
