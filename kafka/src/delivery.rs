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
use crate::config::ProcessingOrder;
use crate::ledger::{lane_of, HandOut, LaneWake, LedgerCell};
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
    /// The claim's lanes, in [`ProcessingOrder::Key`] and
    /// [`ProcessingOrder::Unordered`]; `None` in partition order.
    lanes: Option<Lanes>,
}

/// How many messages may wait in the lanes of a partition, per message it
/// may have in flight: past that, the partition's next message waits for
/// a lane to move, so that one busy key cannot pull its whole partition
/// into memory.
const WAITING_PER_IN_FLIGHT: usize = 4;

/// A claim's lanes: which keys have a message handed out, and the messages
/// waiting behind each, in offset order.
#[derive(Debug)]
struct Lanes {
    /// Lanes by key: [`ProcessingOrder::Key`]; else in flight only.
    by_key: bool,
    max_in_flight: usize,
    /// Most messages waiting in all lanes at once.
    max_waiting: usize,
    /// The claim's ledger (from its first batch), which tells of
    /// acknowledgements.
    ledger: Option<Arc<LedgerCell>>,
    /// The ledger's epoch the lanes hold messages of.
    epoch: u64,
    /// Lanes with a message handed out or ready to be, each with the
    /// messages waiting behind it.
    busy: HashMap<u64, VecDeque<Message>>,
    /// Messages whose turn came (the one before them in their lane was
    /// acknowledged), in the order their turns came.
    ready: VecDeque<Message>,
    /// Messages in `busy`'s queues.
    waiting: usize,
    /// Messages handed out and not acknowledged, as last heard (never
    /// fewer than there are: only acknowledgements lower it).
    in_flight: usize,
    /// Lanes freed, as the ledger told them.
    freed: Vec<u64>,
    /// Nacked messages back from their delay, as the ledger gave them.
    retried: Vec<(u64, Message)>,
}

/// Whether a claim's lanes may hand out now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LaneState {
    /// They may.
    Open,
    /// Not until the claim is resumed.
    Paused,
    /// Never again: what its batches hold is dropped.
    Stopping,
}

impl Lanes {
    fn new(order: ProcessingOrder) -> Option<Lanes> {
        let max_in_flight = order.max_in_flight()?;
        Some(Lanes {
            by_key: matches!(order, ProcessingOrder::Key { .. }),
            max_in_flight,
            max_waiting: max_in_flight.saturating_mul(WAITING_PER_IN_FLIGHT),
            ledger: None,
            epoch: 0,
            busy: HashMap::new(),
            ready: VecDeque::new(),
            waiting: 0,
            in_flight: 0,
            freed: Vec::new(),
            retried: Vec::new(),
        })
    }

    /// Hears what acknowledgements did: freed lanes hand their next
    /// waiting message on to `ready`, and so do nacked messages whose
    /// delay is over (each still holds its lane); a seek or a stop lets go
    /// of everything waiting.
    fn hear(&mut self) -> LaneState {
        let Some(ledger) = &self.ledger else {
            return LaneState::Open;
        };
        let news = ledger.lane_news(&mut self.freed, &mut self.retried);
        self.in_flight = news.in_flight;
        let state = if news.stopping {
            LaneState::Stopping
        } else if news.paused {
            LaneState::Paused
        } else {
            LaneState::Open
        };
        if news.epoch != self.epoch || news.stopping {
            self.epoch = news.epoch;
            self.busy.clear();
            self.ready.clear();
            self.freed.clear();
            self.retried.clear();
            self.waiting = 0;
            return state;
        }
        for (epoch, message) in self.retried.drain(..) {
            if epoch == self.epoch {
                self.ready.push_back(message);
            }
        }
        for lane in self.freed.drain(..) {
            if let Some(behind) = self.busy.get_mut(&lane) {
                match behind.pop_front() {
                    Some(next) => {
                        self.waiting -= 1;
                        self.ready.push_back(next);
                    }
                    None => {
                        self.busy.remove(&lane);
                    }
                }
            }
        }
        state
    }

    /// Nothing to hand out: asks the ledger to wake the stream at the next
    /// acknowledgement; `true` if one came meanwhile (look again).
    fn wait(&self, for_room: bool) -> bool {
        let Some(ledger) = &self.ledger else {
            return false;
        };
        ledger.wait_for_lanes(for_room.then_some(self.max_in_flight))
    }
}

impl Queue {
    fn new(receiver: mpsc::Receiver<Fetched>, order: ProcessingOrder) -> Queue {
        Queue {
            receiver,
            current: None,
            passed: None,
            tally: None,
            held: None,
            lanes: Lanes::new(order),
        }
    }

    fn load(&mut self, fetched: Fetched) {
        self.pass();
        if let Some(lanes) = &mut self.lanes {
            if lanes.ledger.is_none() {
                lanes.ledger = Some(fetched.batch.ledger.clone());
            }
        }
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
        if self.lanes.is_some() {
            return self.take_in_lanes(lease);
        }
        loop {
            if let Err(end) = self.advance() {
                return end;
            }
            let Some((batch, next)) = self.current.as_mut() else {
                return Take::Empty;
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

    /// [`Queue::take`] for a claim with lanes: the next message whose lane
    /// is free (one that waited first), while fewer than `max_in_flight`
    /// are in flight. A message whose lane is busy (an earlier message of
    /// its key is handed out and not acknowledged) is taken from the batch
    /// into its lane's queue, and handed out when its turn comes, so that
    /// other keys' messages behind it go on.
    fn take_in_lanes(&mut self, lease: &mut Deadline) -> Take {
        loop {
            let Some(lanes) = self.lanes.as_mut() else {
                return Take::Empty;
            };
            let state = lanes.hear();
            let stopping = state == LaneState::Stopping;
            if !stopping && lanes.in_flight >= lanes.max_in_flight {
                if lanes.wait(true) {
                    continue;
                }
                return Take::Empty;
            }
            if state == LaneState::Open && !lanes.ready.is_empty() {
                if !lease.holds() {
                    return Take::Expired;
                }
                let Some(message) = lanes.ready.pop_front() else {
                    continue;
                };
                match message.ledger().hand_out(message.offset(), lanes.epoch) {
                    HandOut::Handed => {
                        lanes.in_flight += 1;
                        return Take::Message(message);
                    }
                    HandOut::NotNow => {
                        // Paused: it waits for the resume, which wakes
                        // the stream.
                        lanes.ready.push_front(message);
                        if lanes.wait(false) {
                            continue;
                        }
                        return Take::Empty;
                    }
                    HandOut::Gone => continue,
                }
            }
            match self.advance() {
                Ok(()) => {}
                Err(Take::Empty) => {
                    // Wait for a fetch or, with lanes busy, an
                    // acknowledgement.
                    let lanes = self.lanes.as_ref();
                    let busy = lanes.is_some_and(|lanes| lanes.in_flight > 0);
                    if !stopping && busy && lanes.is_some_and(|lanes| lanes.wait(false)) {
                        continue;
                    }
                    return Take::Empty;
                }
                Err(end) => return end,
            }
            let (Some((batch, next)), Some(lanes)) = (self.current.as_mut(), self.lanes.as_mut())
            else {
                return Take::Empty;
            };
            if !lease.holds() {
                return Take::Expired;
            }
            let index = *next;
            let record = &batch.records[index];
            let lane = if lanes.by_key {
                lane_of(record.key.as_deref())
            } else {
                0
            };
            let busy = lane != 0 && lanes.busy.contains_key(&lane);
            // The lanes are full, or the progress record is: this message
            // waits in its batch until an acknowledgement makes room.
            if !stopping
                && ((busy && lanes.waiting >= lanes.max_waiting) || batch.ledger.progress_full())
            {
                if lanes.wait(false) {
                    continue;
                }
                return Take::Empty;
            }
            *next += 1;
            let last = *next == batch.records.len();
            let taken =
                batch
                    .ledger
                    .take(record.offset, lane, !busy, batch.token, batch.generation);
            if taken {
                if let Some(tally) = &mut self.tally {
                    tally.handed(record);
                }
            }
            let message = taken.then(|| Message::new(batch.clone(), index));
            if last {
                self.current = None;
                self.pass();
            }
            let (Some(message), Some(lanes)) = (message, self.lanes.as_mut()) else {
                continue;
            };
            if busy {
                lanes.waiting += 1;
                lanes.busy.entry(lane).or_default().push_back(message);
                continue;
            }
            if lane != 0 {
                lanes.busy.insert(lane, VecDeque::new());
            }
            lanes.in_flight += 1;
            return Take::Message(message);
        }
    }

    /// Makes the current batch one with a record left to take, loading
    /// fetched batches (and counting what each finished one passed) as
    /// needed; otherwise why there is none: nothing fetched yet
    /// ([`Take::Empty`]), or the fetcher gone ([`Take::Closed`]).
    fn advance(&mut self) -> Result<(), Take> {
        loop {
            if let Some((batch, next)) = &self.current {
                if *next < batch.records.len() {
                    return Ok(());
                }
            }
            self.current = None;
            self.pass();
            match self.receiver.try_recv() {
                Ok(fetched) => self.load(fetched),
                Err(TryRecvError::Empty) => return Err(Take::Empty),
                Err(TryRecvError::Disconnected) => return Err(Take::Closed),
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
    /// With lanes: what an acknowledgement or a resume notifies, and the
    /// wait for it while nothing can be handed out.
    lanes_moved: Option<LanesMoved>,
}

/// How an acknowledgement wakes a partition stream whose lanes wait.
struct LanesMoved {
    notify: Arc<tokio::sync::Notify>,
    waiting: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

impl std::fmt::Debug for LanesMoved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanesMoved")
            .field("waiting", &self.waiting.is_some())
            .finish()
    }
}

impl Batches {
    pub(crate) fn new(
        receiver: mpsc::Receiver<Fetched>,
        lease: Lease,
        order: ProcessingOrder,
    ) -> Batches {
        let queue = Queue::new(receiver, order);
        let lanes_moved = queue.lanes.is_some().then(|| LanesMoved {
            notify: Arc::new(tokio::sync::Notify::new()),
            waiting: None,
        });
        Batches {
            queue,
            lease: Deadline::new(lease),
            lanes_moved,
        }
    }

    /// How the claim's ledger wakes this stream when an acknowledgement
    /// frees a lane (`None`: no lanes).
    pub(crate) fn lane_wake(&self) -> Option<LaneWake> {
        let notify = self.lanes_moved.as_ref()?.notify.clone();
        Some(Arc::new(move || notify.notify_one()))
    }

    /// The next message that may still be handed out (see [`Queue::take`]);
    /// `None` once the claim has ended and its queue is empty.
    pub(crate) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Message>> {
        loop {
            match self.queue.take(&mut self.lease) {
                Take::Message(message) => return Poll::Ready(Some(message)),
                Take::Empty => {
                    if let Poll::Ready(fetched) = self.queue.receiver.poll_recv(cx) {
                        match fetched {
                            Some(fetched) => self.queue.load(fetched),
                            None => return Poll::Ready(None),
                        }
                        continue;
                    }
                    let Some(moved) = self.lanes_moved.as_mut() else {
                        return Poll::Pending;
                    };
                    let notify = &moved.notify;
                    let waiting = moved.waiting.get_or_insert_with(|| {
                        let notify = notify.clone();
                        Box::pin(async move { notify.notified().await })
                    });
                    std::task::ready!(waiting.as_mut().poll(cx));
                    moved.waiting = None;
                }
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
    /// A claim's queue, opened when its partition starts, with the order
    /// its topic's messages are handed out in.
    Opened(u64, mpsc::Receiver<Fetched>, ProcessingOrder),
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

    /// How the claim's ledger wakes the group stream when an
    /// acknowledgement frees one of the claim's lanes: it puts the claim's
    /// queue back in line.
    pub(crate) fn lane_wake(&self) -> LaneWake {
        let (id, signals) = (self.id, self.signals.clone());
        Arc::new(move || {
            let _ = signals.send(Signal::Filled(id));
        })
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

    /// A new claim's queue, whose messages are handed out in `order`.
    pub(crate) fn open(&mut self, order: ProcessingOrder) -> QueueSender {
        let (batches, receiver) = mpsc::channel(self.capacity);
        let id = self.next_id;
        self.next_id += 1;
        let _ = self.signals.send(Signal::Opened(id, receiver, order));
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
            Signal::Opened(id, receiver, order) => {
                self.idle.insert(id, Queue::new(receiver, order));
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
// Done ranges are compared as the ranges they are, one or many.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use tenure_core::{FencingToken, TopicPartition};

    use super::*;
    use crate::ledger::{LedgerCell, Ledgers};
    use crate::message::Record;
    use tenure_core::Progress;

    fn batch(partition: u32, offsets: std::ops::Range<i64>, ledger: &Arc<LedgerCell>) -> Fetched {
        let keys = vec![None; offsets.clone().count()];
        keyed_in(partition, offsets.start, &keys, ledger, 0)
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
                    Progress::new(),
                )
            })
            .collect();
        let senders: Vec<QueueSender> = (0..3)
            .map(|_| queues.open(ProcessingOrder::Partition))
            .collect();

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
        let cell0 = ledgers.open(&p0, FencingToken(1), Progress::new());
        let cell1 = ledgers.open(&p1, FencingToken(2), Progress::new());
        let (q0, q1) = (
            queues.open(ProcessingOrder::Partition),
            queues.open(ProcessingOrder::Partition),
        );
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
        let cell = ledgers.open(
            &TopicPartition::new("t", 0),
            FencingToken(1),
            Progress::new(),
        );
        let q = queues.open(ProcessingOrder::Partition);
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

    /// A batch of `partition` from `first` on, one message per key in
    /// `keys` (`None`: no key).
    fn keyed(
        partition: u32,
        first: i64,
        keys: &[Option<&str>],
        ledger: &Arc<LedgerCell>,
    ) -> Fetched {
        keyed_in(partition, first, keys, ledger, 0)
    }

    /// [`keyed`], fetched in `generation` of its claim.
    fn keyed_in(
        partition: u32,
        first: i64,
        keys: &[Option<&str>],
        ledger: &Arc<LedgerCell>,
        generation: u64,
    ) -> Fetched {
        let records = keys
            .iter()
            .zip(first..)
            .map(|(key, offset)| Record {
                offset,
                key: key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
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
                generation,
                ledger: ledger.clone(),
                records,
            }),
            passed: None,
            tally: None,
            held: None,
        }
    }

    /// A claim's queue on its own, fed through its channel, with its
    /// ledger: what a partition stream hands out, without a task.
    struct Claimed {
        ledgers: Ledgers,
        partition: TopicPartition,
        cell: Arc<LedgerCell>,
        sender: mpsc::Sender<Fetched>,
        queue: Queue,
        lease: Deadline,
        _lease_tx: tokio::sync::watch::Sender<Option<std::time::Instant>>,
    }

    impl Claimed {
        fn new(order: ProcessingOrder) -> Claimed {
            let ledgers = Ledgers::default();
            let partition = TopicPartition::new("t", 0);
            let cell = ledgers.open(&partition, FencingToken(3), Progress::new());
            if order.max_in_flight().is_some() {
                // Taken from by hand: nothing to wake.
                cell.set_lane_wake(Arc::new(|| {}));
            }
            let (sender, receiver) = mpsc::channel(64);
            let (lease_tx, lease) = live_lease();
            Claimed {
                ledgers,
                partition,
                cell,
                sender,
                queue: Queue::new(receiver, order),
                lease: Deadline::new(lease),
                _lease_tx: lease_tx,
            }
        }

        fn feed(&self, first: i64, keys: &[Option<&str>]) {
            self.sender
                .try_send(keyed(0, first, keys, &self.cell))
                .expect("room in the queue");
        }

        /// What a fetch that starts again after a resume brings: the
        /// records from `first` on, in the claim's current generation.
        fn feed_again(&self, first: i64, keys: &[Option<&str>]) {
            let generation = self.cell.generation();
            self.sender
                .try_send(keyed_in(0, first, keys, &self.cell, generation))
                .expect("room in the queue");
        }

        /// Resumes the claim if it is paused, and feeds what its fetch
        /// would bring again: the records of `keys` after the last one
        /// taken.
        fn resume(&self, keys: &[Option<&str>]) {
            if let Some(last) = self.cell.resume() {
                let from = last.map_or(0, |last| last + 1);
                if let Some(rest) = keys.get(from as usize..).filter(|r| !r.is_empty()) {
                    self.feed_again(from, rest);
                }
            }
        }

        /// Every message that may be handed out now.
        fn take_all(&mut self) -> Vec<Message> {
            let mut out = Vec::new();
            while let Take::Message(message) = self.queue.take(&mut self.lease) {
                out.push(message);
            }
            out
        }

        /// The last offset processed as the member would read it (the
        /// last one reported), if it moved past anything (-1: everything
        /// below 0, nothing).
        fn processed(&self) -> Option<Offset> {
            self.reported().0
        }

        /// The last watermark reported since the last call, and the last
        /// progress.
        fn reported(&self) -> (Option<Offset>, Option<Progress>) {
            let (processed, progress) = reports_of(&self.ledgers);
            (
                processed.last().copied().filter(|o| *o >= 0),
                progress.last().cloned(),
            )
        }
    }

    fn processed_of(ledgers: &Ledgers) -> Vec<Offset> {
        reports_of(ledgers).0
    }

    /// The watermarks (the last offset processed) the ledgers report, and
    /// the progress they report with them.
    fn reports_of(ledgers: &Ledgers) -> (Vec<Offset>, Vec<Progress>) {
        let mut out = VecDeque::new();
        ledgers.changes(&mut out);
        let mut processed = Vec::new();
        let mut progress = Vec::new();
        for event in out {
            match event {
                crate::DataEvent::Processed(_, _, offset) => processed.push(offset),
                crate::DataEvent::Progressed(_, _, next, reported) => {
                    processed.push(next - 1);
                    progress.push(reported);
                }
                _ => {}
            }
        }
        (processed, progress)
    }

    fn offsets(messages: &[Message]) -> Vec<i64> {
        messages.iter().map(Message::offset).collect()
    }

    use bytes::Bytes;
    use tenure_core::Offset;

    #[test]
    fn a_key_waits_for_its_last_message_while_other_keys_go_on() {
        let mut claim = Claimed::new(ProcessingOrder::key(8));
        let (a, b, c) = (Some("a"), Some("b"), Some("c"));
        claim.feed(0, &[a, b, a, c, a, b, None, None]);

        // One of each key, and every keyless one: 2, 4 and 5 wait.
        let first = claim.take_all();
        assert_eq!(offsets(&first), [0, 1, 3, 6, 7]);

        // Out of order: 3 (c), then 1 (b) frees 5; nothing is committed
        // while 0 is held.
        first[2].ack();
        first[1].ack();
        let next = claim.take_all();
        assert_eq!(offsets(&next), [5]);
        assert_eq!(claim.processed(), None);

        // 0 (a) frees 2; 0's acknowledgement commits up to 1 only.
        first[0].ack();
        assert_eq!(claim.processed(), Some(1));
        let then = claim.take_all();
        assert_eq!(offsets(&then), [2]);
        then[0].ack();
        assert_eq!(offsets(&claim.take_all()), [4]);
        assert_eq!(claim.processed(), Some(3), "4 is held");
    }

    #[test]
    fn no_more_than_max_in_flight_are_held_at_once() {
        let mut claim = Claimed::new(ProcessingOrder::unordered(3));
        claim.feed(0, &[Some("a"); 10]);
        let held = claim.take_all();
        assert_eq!(
            offsets(&held),
            [0, 1, 2],
            "unordered: one key, three in flight"
        );
        held[1].ack();
        let more = claim.take_all();
        assert_eq!(offsets(&more), [3]);
        assert_eq!(claim.processed(), None);
        held[0].ack();
        assert_eq!(claim.processed(), Some(1));
    }

    #[test]
    fn a_stop_drains_what_was_handed_out_and_commits_below_what_waited() {
        let mut claim = Claimed::new(ProcessingOrder::key(4));
        claim.feed(10, &[Some("a"), Some("a"), Some("b"), Some("a")]);
        let held = claim.take_all();
        assert_eq!(offsets(&held), [10, 12]);

        claim.ledgers.stop(&claim.partition, FencingToken(3));
        assert!(claim.take_all().is_empty(), "nothing once stopping");
        held[1].ack();
        assert_eq!(claim.processed(), Some(9), "10 is held");
        held[0].ack();
        let mut events = VecDeque::new();
        claim.ledgers.changes(&mut events);
        assert!(
            matches!(
                events.iter().collect::<Vec<_>>()[..],
                [
                    crate::DataEvent::Progressed(_, _, 11, progress),
                    crate::DataEvent::Drained(..)
                ] if progress.done() == [12..13]
            ),
            "drained with 11 and 13 never handed out, committed up to 10 with 12 done: {events:?}"
        );
    }

    #[test]
    fn a_seek_lets_go_of_what_waits_in_the_lanes() {
        let mut claim = Claimed::new(ProcessingOrder::key(4));
        claim.feed(0, &[Some("a"), Some("a"), Some("a")]);
        let held = claim.take_all();
        assert_eq!(offsets(&held), [0]);
        assert_eq!(claim.cell.seek(100), Some(false));
        // The old message's acknowledgement no longer counts, and what
        // waited behind it is not handed out.
        held[0].ack();
        assert!(claim.take_all().is_empty());
        // What the new fetch brings goes through fresh lanes.
        let generation = claim.cell.generation();
        let mut fetched = keyed(0, 100, &[Some("a"), Some("b")], &claim.cell);
        Arc::get_mut(&mut fetched.batch).expect("alone").generation = generation;
        claim.sender.try_send(fetched).expect("room");
        assert_eq!(offsets(&claim.take_all()), [100, 101]);
    }

    #[test]
    fn a_paused_claims_waiting_messages_go_out_on_resume() {
        let mut claim = Claimed::new(ProcessingOrder::key(4));
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = woken.clone();
        claim.cell.set_lane_wake(Arc::new(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
        claim.feed(0, &[Some("a"), Some("a")]);
        let held = claim.take_all();
        assert_eq!(offsets(&held), [0]);
        assert!(claim.cell.pause());
        held[0].ack();
        assert!(claim.take_all().is_empty(), "nothing while paused");
        assert_eq!(claim.cell.resume(), Some(Some(1)));
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst) >= 1);
        assert_eq!(
            offsets(&claim.take_all()),
            [1],
            "1 waited through the pause"
        );
    }

    #[tokio::test]
    async fn an_acknowledgement_wakes_the_group_stream_for_the_next_of_its_key() {
        let ledgers = Ledgers::default();
        let (_lease_tx, lease) = live_lease();
        let (mut queues, mut stream) = GroupQueues::new(4, 64, lease);
        let cell = ledgers.open(
            &TopicPartition::new("t", 0),
            FencingToken(1),
            Progress::new(),
        );
        let q = queues.open(ProcessingOrder::key(4));
        cell.set_lane_wake(q.lane_wake());
        assert!(q.send(keyed(0, 0, &[Some("a"), Some("a")], &cell)).await);
        let first = stream.next().await.expect("a message");
        assert_eq!(first.offset(), 0);
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(waiting.is_err(), "1 handed out before 0 was acknowledged");
        let acker = tokio::spawn(async move { first.ack() });
        let second = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("woken by the acknowledgement")
            .expect("a message");
        assert_eq!(second.offset(), 1);
        acker.await.expect("acked");
    }

    #[tokio::test(start_paused = true)]
    async fn a_nacked_message_comes_back_after_its_delay_and_its_key_waits() {
        let ledgers = Ledgers::default();
        let (_lease_tx, lease) = live_lease();
        let (mut queues, mut stream) = GroupQueues::new(4, 64, lease);
        let partition = TopicPartition::new("t", 0);
        let cell = ledgers.open(&partition, FencingToken(1), Progress::new());
        let q = queues.open(ProcessingOrder::key(4));
        cell.set_lane_wake(q.lane_wake());
        assert!(
            q.send(keyed(0, 0, &[Some("a"), Some("a"), Some("b")], &cell))
                .await
        );
        let first = stream.next().await.expect("a message");
        let other = stream.next().await.expect("a message");
        assert_eq!((first.offset(), other.offset()), (0, 2));
        let delay = std::time::Duration::from_secs(5);
        let nacked_at = tokio::time::Instant::now();
        assert!(first.nack(delay).is_ok(), "refused with lanes");
        other.ack();
        let again = tokio::time::timeout(std::time::Duration::from_secs(60), stream.next())
            .await
            .expect("handed out again")
            .expect("a message");
        assert_eq!(again.offset(), 0, "1 went out before 0 of its key");
        assert!(nacked_at.elapsed() >= delay, "back before its delay");
        let processed = processed_of(&ledgers);
        assert!(
            processed.iter().all(|o| *o < 0),
            "committed past 0: {processed:?}"
        );
        again.ack();
        let next = tokio::time::timeout(std::time::Duration::from_secs(60), stream.next())
            .await
            .expect("woken by the acknowledgement")
            .expect("a message");
        assert_eq!(next.offset(), 1);
        next.ack();
        assert_eq!(processed_of(&ledgers).last(), Some(&2));
    }

    #[test]
    fn a_nack_in_partition_order_and_a_reject_without_dead_letters_give_it_back() {
        let mut claim = Claimed::new(ProcessingOrder::Partition);
        claim.feed(0, &[Some("a")]);
        let mut messages = claim.take_all();
        let message = messages.pop().expect("a message");
        let back = message
            .nack(std::time::Duration::ZERO)
            .expect_err("no lanes to go back to");
        let back = back
            .reject("unreadable")
            .expect_err("no dead-letter topic to go to");
        back.ack();
        assert_eq!(claim.processed(), Some(0));
    }

    #[tokio::test]
    async fn an_acknowledgement_wakes_a_partition_stream() {
        let ledgers = Ledgers::default();
        let (_lease_tx, lease) = live_lease();
        let cell = ledgers.open(
            &TopicPartition::new("t", 0),
            FencingToken(1),
            Progress::new(),
        );
        let (sender, receiver) = mpsc::channel(4);
        let batches = Batches::new(receiver, lease, ProcessingOrder::unordered(1));
        cell.set_lane_wake(batches.lane_wake().expect("lanes"));
        let mut stream = PartitionStream {
            partition: TopicPartition::new("t", 0),
            token: FencingToken(1),
            batches,
        };
        sender
            .send(keyed(0, 0, &[None, None], &cell))
            .await
            .expect("sent");
        let first = stream.next().await.expect("a message");
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), stream.next()).await;
        assert!(waiting.is_err(), "two in flight with a bound of one");
        first.ack();
        let second = tokio::time::timeout(std::time::Duration::from_secs(10), stream.next())
            .await
            .expect("woken by the acknowledgement")
            .expect("a message");
        assert_eq!(second.offset(), 1);
    }

    /// What the application does next, in the property below.
    #[derive(Clone, Debug)]
    enum Step {
        /// Takes every message it may.
        Take,
        /// Acknowledges the held message at this index (modulo how many).
        Ack(usize),
        /// Nacks it, to be handed out again at once.
        Nack(usize),
        /// The application pauses the partition: what its fetch brought
        /// is not handed out, and is fetched again on resume.
        Pause,
        /// It resumes it.
        Resume,
        /// The partition stops (at most once: the claim ends).
        Stop,
    }

    fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop_oneof![
                3 => Just(Step::Take),
                6 => (0usize..64).prop_map(Step::Ack),
                2 => (0usize..64).prop_map(Step::Nack),
                1 => Just(Step::Pause),
                1 => Just(Step::Resume),
                1 => Just(Step::Stop),
            ],
            1..120,
        )
    }

    proptest::proptest! {
        /// For any keys, bound and order of acknowledgements, nacks, pauses
        /// and resumes (a new generation of the claim's fetch): a
        /// message is handed out only once every earlier message of its
        /// key is acknowledged, at most `max_in_flight` are held at once,
        /// each is handed out once (again only after a nack), the
        /// committed offset never passes a message taken and not
        /// acknowledged, and every message goes out once the application
        /// acknowledges what it holds.
        #[test]
        fn lanes_keep_key_order_and_commits_never_pass_a_held_message(
            keys in proptest::collection::vec(proptest::option::weighted(0.9, 0u8..6), 1..80),
            max_in_flight in 1usize..8,
            by_key in proptest::bool::ANY,
            steps in steps(),
        ) {
            let order = if by_key {
                ProcessingOrder::key(max_in_flight)
            } else {
                ProcessingOrder::unordered(max_in_flight)
            };
            let mut claim = Claimed::new(order);
            let names: Vec<Option<String>> =
                keys.iter().map(|k| k.map(|k| format!("k{k}"))).collect();
            let refs: Vec<Option<&str>> = names.iter().map(|k| k.as_deref()).collect();
            for (chunk, first) in refs.chunks(7).zip((0i64..).step_by(7)) {
                claim.feed(first, chunk);
            }
            let key_of = |offset: i64| keys[offset as usize];
            let mut held: Vec<Message> = Vec::new();
            let mut acked = std::collections::BTreeSet::new();
            let mut handed = std::collections::BTreeSet::new();
            let mut nacked = std::collections::BTreeSet::new();
            let mut committed: Option<Offset> = None;
            let mut stopped = false;
            let all = steps.iter().cloned().chain(std::iter::repeat_n(Step::Take, 1));
            let check = |claim: &mut Claimed,
                             held: &mut Vec<Message>,
                             acked: &std::collections::BTreeSet<i64>,
                             handed: &mut std::collections::BTreeSet<i64>,
                             nacked: &mut std::collections::BTreeSet<i64>,
                             committed: &mut Option<Offset>| {
                for message in claim.take_all() {
                    let offset = message.offset();
                    let again = nacked.remove(&offset);
                    proptest::prop_assert!(
                        handed.insert(offset) || again,
                        "{offset} handed out twice"
                    );
                    if by_key {
                        if let Some(key) = key_of(offset) {
                            for earlier in 0..offset {
                                if key_of(earlier) == Some(key) {
                                    proptest::prop_assert!(
                                        acked.contains(&earlier),
                                        "{offset} handed out before {earlier} of its key was acknowledged"
                                    );
                                }
                            }
                        }
                    }
                    held.push(message);
                }
                proptest::prop_assert!(held.len() <= max_in_flight, "{} held", held.len());
                let (now, progress) = claim.reported();
                if let Some(now) = now {
                    proptest::prop_assert!(Some(now) >= *committed, "the commit moved back");
                    *committed = Some(now);
                }
                // The progress record names only acknowledged offsets,
                // above the committed one.
                for range in progress.iter().flat_map(|p| p.done().iter().cloned()) {
                    for offset in range {
                        proptest::prop_assert!(
                            acked.contains(&offset) && Some(offset) > *committed,
                            "the progress names {offset}, not acknowledged or not above {committed:?}"
                        );
                    }
                }
                if let Some(committed) = *committed {
                    for offset in 0..=committed {
                        proptest::prop_assert!(
                            acked.contains(&offset),
                            "committed {committed} past {offset}, not acknowledged"
                        );
                    }
                }
                Ok(())
            };
            for step in all {
                match step {
                    Step::Take => {}
                    Step::Ack(at) => {
                        if !held.is_empty() {
                            let message = held.swap_remove(at % held.len());
                            acked.insert(message.offset());
                            message.ack();
                        }
                    }
                    Step::Nack(at) => {
                        if !held.is_empty() {
                            let message = held.swap_remove(at % held.len());
                            nacked.insert(message.offset());
                            proptest::prop_assert!(
                                message.nack(std::time::Duration::ZERO).is_ok(),
                                "a nack refused with lanes"
                            );
                        }
                    }
                    Step::Pause => {
                        claim.cell.pause();
                    }
                    Step::Resume => claim.resume(&refs),
                    Step::Stop => {
                        if !stopped {
                            stopped = true;
                            claim.ledgers.stop(&claim.partition, FencingToken(3));
                        }
                    }
                }
                check(&mut claim, &mut held, &acked, &mut handed, &mut nacked, &mut committed)?;
            }
            // The application resumes, and acknowledges what it holds,
            // until nothing more comes: unless stopped, every message went
            // out.
            claim.resume(&refs);
            check(&mut claim, &mut held, &acked, &mut handed, &mut nacked, &mut committed)?;
            while !held.is_empty() {
                for message in held.drain(..) {
                    acked.insert(message.offset());
                    message.ack();
                }
                check(&mut claim, &mut held, &acked, &mut handed, &mut nacked, &mut committed)?;
            }
            if !stopped {
                proptest::prop_assert_eq!(handed.len(), keys.len());
                proptest::prop_assert_eq!(committed, Some(keys.len() as i64 - 1));
            }
        }
    }
}
