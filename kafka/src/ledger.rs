//! Which messages the application holds, per claim: what was handed out,
//! what is acknowledged, and so the offset below which everything is
//! processed (what the member commits) and when a stopping partition is
//! drained.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tenure_core::{FencingToken, Offset, Progress, TopicPartition};

use crate::dead_letter::DeadLetterProducer;
use crate::event::DataEvent;
use crate::message::Message;

/// Which messages of a partition the application holds.
#[derive(Debug)]
struct Ledger {
    /// Taken from the fetched batches, in offset order (offsets grow):
    /// handed out, waiting in a lane, or acknowledged; acknowledged ones
    /// leave from the front.
    outstanding: VecDeque<Entry>,
    /// How many of `outstanding` are handed out and not acknowledged.
    in_flight: usize,
    /// The last offset taken from the fetched batches (handed out, or
    /// waiting in a lane behind an earlier message of its key).
    last_delivered: Option<Offset>,
    /// The highest offset below which everything handed out is acknowledged.
    watermark: Option<Offset>,
    /// The watermark last reported to the member.
    reported: Option<Offset>,
    /// Told to stop: nothing more is handed out.
    stopping: bool,
    /// Drained and not yet reported.
    drained: bool,
    /// The current fetch of the claim; messages of an earlier one are not
    /// handed out.
    generation: u64,
    /// The generation the last seek started: what was handed out before
    /// it (from batches of an earlier generation) was let go, and its
    /// acknowledgements count for nothing.
    sought: u64,
    /// Paused by the application: nothing is handed out until resumed.
    paused: bool,
    /// Where the current fetch started (an offset its policy resolved, or
    /// a seek's), for the position before anything is handed out.
    started_at: Option<Offset>,
    /// The last message the current fetch brought for the application to
    /// take (in its buffer, or in the fetcher's hands).
    fetched_to: Option<Offset>,
    /// What acknowledgements tell the claim's lanes (see
    /// [`crate::ProcessingOrder`]); idle for a claim without them.
    lanes: LaneMail,
    /// What is done above the watermark, and how often the messages there
    /// failed: acknowledged out of order or dead-lettered under this
    /// claim, or done under an earlier owner as the progress record read
    /// with the committed offset says (those are not handed out again).
    /// The member commits it beside the offset.
    progress: Progress,
    /// `progress` changed since the member's task last read it.
    progress_moved: bool,
    /// The progress holds as many ranges as its record may, and that was
    /// said: no new message is taken until the watermark moves.
    progress_full: bool,
}

/// One message taken from a fetched batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    offset: Offset,
    /// Its key's lane ([`lane_of`]); 0: none.
    lane: u64,
    state: EntryState,
}

/// Where a taken message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EntryState {
    /// In a lane, behind an earlier message of its key: not handed out yet.
    Waiting,
    /// Handed out, not acknowledged.
    Held,
    /// Acknowledged.
    Done,
}

/// The lane of a message with `key`, in [`crate::ProcessingOrder::Key`]:
/// the key's hash, never 0 (`None`, no key: a lane of its own, 0).
pub(crate) fn lane_of(key: Option<&[u8]>) -> u64 {
    use std::hash::{Hash, Hasher};
    let Some(key) = key else {
        return 0;
    };
    // SipHash with fixed keys: the same lane in every process, which
    // nothing relies on but a reader of a trace.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish() | 1
}

/// What acknowledgements tell a claim's lanes, kept under the ledger's
/// lock so that the delivery side and the application's acknowledgements
/// see one state.
#[derive(Default)]
struct LaneMail {
    /// Lanes whose message handed out was acknowledged since the delivery
    /// side last looked: the next message waiting in each may go.
    freed: Vec<u64>,
    /// The delivery side found nothing to hand out and waits to be woken
    /// by an acknowledgement or a resume.
    wanted: bool,
    /// Changes when what the lanes hold is let go (a seek).
    epoch: u64,
    /// How to wake the delivery side.
    wake: Option<LaneWake>,
    /// Nacked messages whose delay is over, with the epoch they were
    /// nacked in, for the delivery side to hand out again.
    retried: Vec<(u64, Message)>,
}

impl std::fmt::Debug for LaneMail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaneMail")
            .field("freed", &self.freed)
            .field("wanted", &self.wanted)
            .field("epoch", &self.epoch)
            .field("retried", &self.retried.len())
            .finish_non_exhaustive()
    }
}

/// How an acknowledgement wakes the stream that hands out a claim's
/// lanes: the group stream is told which queue to look at again, a
/// partition stream is notified.
pub(crate) type LaneWake = Arc<dyn Fn() + Send + Sync>;

/// What a claim's lanes learn from its ledger ([`LedgerCell::lane_news`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneNews {
    /// Changes when what the lanes hold is let go.
    pub(crate) epoch: u64,
    /// Messages handed out and not acknowledged.
    pub(crate) in_flight: usize,
    /// Nothing may be handed out for now.
    pub(crate) paused: bool,
    /// Nothing more will be handed out.
    pub(crate) stopping: bool,
}

/// What became of a nack or a rejection ([`LedgerCell::nack`],
/// [`LedgerCell::reject`]).
#[derive(Clone, Debug)]
pub(crate) enum Nacked {
    /// Back in its lane: hand it to [`LedgerCell::retry`] with `epoch`
    /// once its delay is over, on `runtime` (`None`: the ledger was made
    /// outside one).
    Retry {
        epoch: u64,
        runtime: Option<tokio::runtime::Handle>,
    },
    /// Given up after `attempts` hand-outs: still held, for `producer` to
    /// produce to the dead-letter topic (on `runtime`) and then
    /// acknowledge.
    DeadLetter {
        producer: Arc<DeadLetterProducer>,
        runtime: Option<tokio::runtime::Handle>,
        attempts: u32,
    },
    /// Let go: the claim is stopping, or a seek let the message go, or it
    /// was not held. Nothing to do.
    LetGo,
    /// The claim has no lanes ([`crate::ProcessingOrder::Partition`]) to
    /// hand a nacked message to again, or there is no dead-letter topic
    /// for a rejected one: nothing changed, the application still holds
    /// the message.
    Refused,
}

/// Whether a message waiting in a lane was handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandOut {
    /// Handed out: the application holds it.
    Handed,
    /// Not now: the claim is paused; it waits on.
    NotNow,
    /// Never: the claim is stopping, or the message was let go (a seek).
    Gone,
}

/// One claim's ledger, shared by its messages (no lookup on the hot path).
#[derive(Debug)]
pub(crate) struct LedgerCell {
    /// The claim's partition, for what the ledger says.
    partition: TopicPartition,
    pub(crate) token: FencingToken,
    ledger: Mutex<Ledger>,
    /// The runtime the claim runs on, where a nacked message waits out
    /// its delay and a dead letter is produced.
    runtime: Option<tokio::runtime::Handle>,
    /// The member's dead-letter topic, if it has one.
    dead_letters: Option<Arc<DeadLetterProducer>>,
    /// Wake the member's task: `moved` when the watermark moved first since
    /// the task last read it, `drained` when a drain ended.
    wake: Wake,
}

/// How the ledgers wake the member's task. Watermarks are read at most
/// every [`WATERMARK_READ_INTERVAL`]: under a fast application, waking the
/// task for every acknowledgement made it run as often as the application
/// did. A drain ends a handoff, so it wakes the task at once.
#[derive(Clone, Debug, Default)]
pub(crate) struct Wake {
    pub(crate) moved: Arc<tokio::sync::Notify>,
    pub(crate) drained: Arc<tokio::sync::Notify>,
}

/// How often, at most, the member's task reads the watermarks the
/// application's acknowledgements moved (a commit, a seek and a stop read
/// them at once).
pub(crate) const WATERMARK_READ_INTERVAL: Duration = Duration::from_millis(5);

impl Ledger {
    /// Where the message at `offset`, from a batch of `generation`, is in
    /// `outstanding`, if it is handed out and not let go by a seek.
    fn held_at(&self, offset: Offset, generation: u64) -> Option<usize> {
        if generation < self.sought {
            return None;
        }
        let at = self
            .outstanding
            .binary_search_by_key(&offset, |entry| entry.offset)
            .ok()?;
        (self.outstanding[at].state == EntryState::Held).then_some(at)
    }
}

impl LedgerCell {
    fn lock(&self) -> MutexGuard<'_, Ledger> {
        match self.ledger.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The claim's current fetch: messages of an earlier one are not handed
    /// out.
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Holds a claim paused from its start: a claim paused under this
    /// token before a suspension stays paused.
    pub(crate) fn hold_paused(&self) {
        self.lock().paused = true;
    }

    /// Stops handing out for now, and starts a new generation, so that
    /// what the paused fetch still brings is not handed out; `false` if
    /// the claim is stopping or paused already.
    pub(crate) fn pause(&self) -> bool {
        let mut ledger = self.lock();
        if ledger.stopping || ledger.paused {
            return false;
        }
        ledger.paused = true;
        ledger.generation += 1;
        ledger.fetched_to = None;
        true
    }

    /// Ends a pause: `Some` with the last offset handed out (`None` in it:
    /// nothing yet) if the claim was paused and is not stopping, so its
    /// fetch starts again after it; `None` otherwise.
    pub(crate) fn resume(&self) -> Option<Option<Offset>> {
        let mut ledger = self.lock();
        let resumed = ledger.paused && !ledger.stopping;
        ledger.paused = false;
        // Messages waiting in lanes may go again.
        let wake = resumed.then(|| ledger.lanes.wake.clone()).flatten();
        let last = ledger.last_delivered;
        drop(ledger);
        if let Some(wake) = wake {
            wake();
        }
        resumed.then_some(last)
    }

    /// Hands out from `offset` on in a new generation: what was handed out
    /// and not acknowledged is let go; moving forward counts the skipped
    /// offsets as processed, moving back never lowers the watermark.
    /// `Some(paused)` if it moved, `None` if the claim is stopping.
    pub(crate) fn seek(&self, offset: Offset) -> Option<bool> {
        let mut ledger = self.lock();
        if ledger.stopping {
            return None;
        }
        ledger.generation += 1;
        ledger.sought = ledger.generation;
        ledger.outstanding.clear();
        ledger.in_flight = 0;
        ledger.lanes.epoch += 1;
        ledger.lanes.freed.clear();
        let let_go = std::mem::take(&mut ledger.lanes.retried);
        ledger.fetched_to = None;
        ledger.started_at = Some(offset);
        // The application asks for these offsets again: what an earlier
        // owner or this claim did above the watermark is not skipped.
        if !ledger.progress.is_empty() {
            ledger.progress = Progress::new();
            ledger.progress_moved = true;
        }
        ledger.last_delivered = offset.checked_sub(1).filter(|o| *o >= 0);
        if ledger.last_delivered > ledger.watermark {
            ledger.watermark = ledger.last_delivered;
            self.wake.moved.notify_one();
        }
        let paused = ledger.paused;
        // Dropped once unlocked: a message refers to its ledger.
        drop(ledger);
        drop(let_go);
        Some(paused)
    }

    /// The fetch of `generation` starts at `offset` (its policy resolved
    /// it): the position until a message is handed out.
    pub(crate) fn started_at(&self, offset: Offset, generation: u64) {
        let mut ledger = self.lock();
        if ledger.generation == generation && ledger.last_delivered.is_none() {
            ledger.started_at = Some(offset);
        }
    }

    /// The fetch of `generation` brought messages up to `last` for the
    /// application to take.
    pub(crate) fn fetched(&self, last: Offset, generation: u64) {
        let mut ledger = self.lock();
        if ledger.generation == generation && ledger.fetched_to < Some(last) {
            ledger.fetched_to = Some(last);
        }
    }

    /// What the application is doing with this claim: where it stands (it
    /// moves with every message taken and every acknowledgement), and
    /// whether messages wait for it (fetched and not taken, or taken and
    /// not acknowledged).
    fn activity(&self) -> Activity {
        let ledger = self.lock();
        let untaken = !ledger.paused
            && !ledger.stopping
            && ledger.fetched_to.is_some()
            && ledger.fetched_to > ledger.last_delivered;
        Activity {
            progress: (
                ledger.generation,
                ledger.last_delivered,
                ledger.in_flight,
                ledger.watermark,
            ),
            waiting: untaken || !ledger.outstanding.is_empty(),
        }
    }

    /// The offset of the next message to be handed out: after the last one
    /// handed out, else where the fetch starts (`None`: not known yet).
    pub(crate) fn position(&self) -> Option<Offset> {
        let ledger = self.lock();
        ledger
            .last_delivered
            .map(|last| last.saturating_add(1))
            .or(ledger.started_at)
    }

    /// Records a message handed to the application; `false` if it may not
    /// be handed out: it is not of this cell's claim or current fetch, or
    /// the claim is stopping or paused.
    pub(crate) fn deliver(&self, offset: Offset, token: FencingToken, generation: u64) -> bool {
        self.take(offset, 0, true, token, generation)
    }

    /// Records a message taken from a fetched batch, in lane `lane`:
    /// handed to the application (`handed`) or waiting in its lane; `false`
    /// if it may not be taken (see [`LedgerCell::deliver`]).
    pub(crate) fn take(
        &self,
        offset: Offset,
        lane: u64,
        handed: bool,
        token: FencingToken,
        generation: u64,
    ) -> bool {
        let mut ledger = self.lock();
        if token != self.token
            || ledger.stopping
            || ledger.paused
            || ledger.generation != generation
        {
            return false;
        }
        if ledger.progress.is_done(offset) {
            // Done under an earlier owner, as the progress record says:
            // not handed out again, and processed once everything before
            // it is.
            if !ledger.outstanding.is_empty() {
                ledger.outstanding.push_back(Entry {
                    offset,
                    lane,
                    state: EntryState::Done,
                });
            }
            ledger.last_delivered = Some(offset);
            self.advance(ledger);
            return false;
        }
        let state = if handed {
            ledger.in_flight += 1;
            EntryState::Held
        } else {
            EntryState::Waiting
        };
        ledger.outstanding.push_back(Entry {
            offset,
            lane,
            state,
        });
        ledger.last_delivered = Some(offset);
        true
    }

    /// Whether the claim's progress holds as many ranges as its record may
    /// ([`Progress::is_full`]): its lanes then take no new message until
    /// the watermark moves (the messages in flight and waiting in lanes go
    /// on), and the first time it fills, a warning says so.
    pub(crate) fn progress_full(&self) -> bool {
        let mut ledger = self.lock();
        if !ledger.progress.is_full() {
            return false;
        }
        if !ledger.progress_full {
            ledger.progress_full = true;
            tracing::warn!(
                partition = %self.partition,
                token = self.token.0,
                ranges = ledger.progress.done().len(),
                "the progress record is full: no new message of the partition is handed out until the committed offset moves"
            );
        }
        true
    }

    /// The application answered the claim's start offset itself: the
    /// progress read with the member's committed offset says nothing of
    /// it.
    pub(crate) fn forget_progress(&self) {
        let mut ledger = self.lock();
        if !ledger.progress.is_empty() {
            ledger.progress = Progress::new();
            ledger.progress_moved = true;
        }
    }

    /// Hands out the message at `offset`, which waited in its lane.
    pub(crate) fn hand_out(&self, offset: Offset, epoch: u64) -> HandOut {
        let mut ledger = self.lock();
        if ledger.stopping || ledger.lanes.epoch != epoch {
            return HandOut::Gone;
        }
        if ledger.paused {
            return HandOut::NotNow;
        }
        let Ok(at) = ledger
            .outstanding
            .binary_search_by_key(&offset, |entry| entry.offset)
        else {
            return HandOut::Gone;
        };
        if ledger.outstanding[at].state != EntryState::Waiting {
            return HandOut::Gone;
        }
        ledger.outstanding[at].state = EntryState::Held;
        ledger.in_flight += 1;
        HandOut::Handed
    }

    /// Installs how an acknowledgement or a resume wakes the stream that
    /// hands out this claim's lanes.
    pub(crate) fn set_lane_wake(&self, wake: LaneWake) {
        self.lock().lanes.wake = Some(wake);
    }

    /// The message at `offset`, from a batch of `generation`, failed: it
    /// goes back to its lane, not handed out, its key's later messages
    /// still waiting behind it and the watermark still below it, until
    /// [`LedgerCell::retry`] brings it back.
    ///
    /// Once it was nacked as often as the dead-letter topic allows, it
    /// stays held instead, for the dead-letter producer.
    pub(crate) fn nack(&self, offset: Offset, generation: u64) -> Nacked {
        let mut ledger = self.lock();
        if ledger.lanes.wake.is_none() {
            return Nacked::Refused;
        }
        let Some(at) = ledger.held_at(offset, generation) else {
            return Nacked::LetGo;
        };
        // Counted in the progress, whose record carries the count across
        // a handoff.
        let failures = ledger.progress.fail(offset);
        self.progress_moved(&mut ledger);
        if let Some(producer) = &self.dead_letters {
            if failures >= producer.max_attempts() {
                return Nacked::DeadLetter {
                    producer: producer.clone(),
                    runtime: self.runtime.clone(),
                    attempts: failures,
                };
            }
        }
        ledger.outstanding[at].state = EntryState::Waiting;
        ledger.in_flight -= 1;
        let wake = if std::mem::take(&mut ledger.lanes.wanted) {
            ledger.lanes.wake.clone()
        } else {
            None
        };
        let stopping = ledger.stopping;
        let epoch = ledger.lanes.epoch;
        // A drain waits for the messages handed out: this one is no
        // longer, and it stays below the committed offset.
        self.advance(ledger);
        if let Some(wake) = wake {
            wake();
        }
        if stopping {
            Nacked::LetGo
        } else {
            Nacked::Retry {
                epoch,
                runtime: self.runtime.clone(),
            }
        }
    }

    /// The application gives up the message at `offset`, from a batch of
    /// `generation`: it stays held, for the dead-letter producer, if there
    /// is a dead-letter topic.
    pub(crate) fn reject(&self, offset: Offset, generation: u64) -> Nacked {
        let Some(producer) = &self.dead_letters else {
            return Nacked::Refused;
        };
        let ledger = self.lock();
        match ledger.held_at(offset, generation) {
            Some(_) => Nacked::DeadLetter {
                producer: producer.clone(),
                runtime: self.runtime.clone(),
                attempts: ledger.progress.failures(offset).saturating_add(1),
            },
            None => Nacked::LetGo,
        }
    }

    /// A dead letter of a claim that is stopping is not produced: the
    /// message at `offset` no longer counts as in flight (the drain does
    /// not wait for it) and stays below the committed offset, for the
    /// next owner.
    pub(crate) fn abandon(&self, offset: Offset, generation: u64) {
        let mut ledger = self.lock();
        let Some(at) = ledger.held_at(offset, generation) else {
            return;
        };
        ledger.outstanding[at].state = EntryState::Waiting;
        ledger.in_flight -= 1;
        self.advance(ledger);
    }

    /// Whether a message of `generation` may still be acted on: the claim
    /// is not stopping and no seek let it go.
    pub(crate) fn holds(&self, generation: u64) -> bool {
        let ledger = self.lock();
        !ledger.stopping && generation >= ledger.sought
    }

    /// A nacked message's delay is over: the delivery side hands it out
    /// again, unless the claim stopped or a seek let it go meanwhile.
    pub(crate) fn retry(&self, message: Message, epoch: u64) {
        let mut ledger = self.lock();
        if ledger.stopping || ledger.lanes.epoch != epoch {
            drop(ledger);
            return;
        }
        ledger.lanes.retried.push((epoch, message));
        let wake = ledger.lanes.wake.clone();
        ledger.lanes.wanted = false;
        drop(ledger);
        if let Some(wake) = wake {
            wake();
        }
    }

    /// What the claim's lanes need to know now: the lanes freed since the
    /// last call (moved into `freed`), the nacked messages to hand out
    /// again (moved into `retried`), and the claim's state.
    pub(crate) fn lane_news(
        &self,
        freed: &mut Vec<u64>,
        retried: &mut Vec<(u64, Message)>,
    ) -> LaneNews {
        let mut ledger = self.lock();
        freed.append(&mut ledger.lanes.freed);
        retried.append(&mut ledger.lanes.retried);
        LaneNews {
            epoch: ledger.lanes.epoch,
            in_flight: ledger.in_flight,
            paused: ledger.paused,
            stopping: ledger.stopping,
        }
    }

    /// The lanes' side has nothing to hand out until an acknowledgement
    /// comes (or, with `in_flight_below`, until fewer than that many are in
    /// flight): `true` if one came meanwhile (look again now); otherwise
    /// the next acknowledgement or resume wakes it.
    pub(crate) fn wait_for_lanes(&self, in_flight_below: Option<usize>) -> bool {
        let mut ledger = self.lock();
        let room = in_flight_below.is_some_and(|bound| ledger.in_flight < bound);
        if !ledger.lanes.freed.is_empty() || !ledger.lanes.retried.is_empty() || room {
            return true;
        }
        ledger.lanes.wanted = true;
        false
    }

    /// The message at `offset`, from a batch of `generation`, is
    /// processed: its lane is free, and the watermark moves past it once
    /// everything before it is processed too.
    pub(crate) fn ack(&self, offset: Offset, generation: u64) {
        let mut ledger = self.lock();
        // A message handed out before a seek: the seek let it go, and the
        // offset may be out again as another message.
        if generation < ledger.sought {
            return;
        }
        // Acknowledgements mostly come in order: the front is found first.
        let Ok(at) = ledger
            .outstanding
            .binary_search_by_key(&offset, |entry| entry.offset)
        else {
            return;
        };
        let entry = &mut ledger.outstanding[at];
        if entry.state != EntryState::Held {
            return;
        }
        entry.state = EntryState::Done;
        let lane = entry.lane;
        ledger.in_flight -= 1;
        if at > 0 {
            // Above the watermark: the progress record keeps it, so that
            // a next owner does not process it again.
            ledger.progress.mark_done(offset);
            self.progress_moved(&mut ledger);
        }
        if lane != 0 {
            ledger.lanes.freed.push(lane);
        }
        let wake = if std::mem::take(&mut ledger.lanes.wanted) {
            ledger.lanes.wake.clone()
        } else {
            None
        };
        while ledger
            .outstanding
            .front()
            .is_some_and(|entry| entry.state == EntryState::Done)
        {
            ledger.outstanding.pop_front();
        }
        self.advance(ledger);
        if let Some(wake) = wake {
            wake();
        }
    }

    /// Counts the offsets up to `last` that a fetch of the claim `token`
    /// went past without a message as handed out (and, once everything
    /// handed out before them is acknowledged, as processed).
    pub(crate) fn pass(&self, last: Offset, token: FencingToken, generation: u64) {
        let mut ledger = self.lock();
        if token != self.token
            || ledger.stopping
            || ledger.generation != generation
            || ledger.last_delivered >= Some(last)
        {
            return;
        }
        ledger.last_delivered = Some(last);
        self.advance(ledger);
    }

    /// The progress changed without the watermark moving: the member's
    /// task is woken to read it, as for the watermark's first move since
    /// it read it.
    fn progress_moved(&self, ledger: &mut Ledger) {
        if !std::mem::replace(&mut ledger.progress_moved, true) {
            self.wake.moved.notify_one();
        }
    }

    /// Moves the watermark up to what is acknowledged, and wakes the
    /// member's task if it moved or a drain ended.
    fn advance(&self, mut ledger: MutexGuard<'_, Ledger>) {
        let watermark = match ledger.outstanding.front() {
            Some(first) => first.offset.checked_sub(1),
            None => ledger.last_delivered,
        };
        // Only the first move since the task read it: the task reads the
        // latest watermark, not every one.
        let mut moved = false;
        if watermark > ledger.watermark {
            moved = ledger.watermark == ledger.reported;
            ledger.watermark = watermark;
            if let Some(frontier) = watermark.and_then(|w| w.checked_add(1)) {
                if !ledger.progress.is_empty() {
                    ledger.progress.forget_below(frontier);
                    ledger.progress_moved = true;
                    ledger.progress_full = false;
                }
            }
        }
        let mut drained = false;
        if ledger.stopping && ledger.in_flight == 0 && !ledger.drained {
            ledger.drained = true;
            drained = true;
        }
        drop(ledger);
        if drained {
            self.wake.drained.notify_one();
        } else if moved {
            self.wake.moved.notify_one();
        }
    }
}

/// What the application is doing with one claim, as the stall check reads
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Activity {
    /// Where it stands: the fetch, the last message taken, how many are
    /// taken and not acknowledged, and the offset below which all are. Any
    /// change is progress.
    pub(crate) progress: (u64, Option<Offset>, usize, Option<Offset>),
    /// Whether messages wait for the application.
    pub(crate) waiting: bool,
}

/// The ledgers of the current claims, for the member's task.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ledgers {
    cells: Arc<Mutex<BTreeMap<TopicPartition, Arc<LedgerCell>>>>,
    pub(crate) wake: Wake,
    /// The member's dead-letter topic, given to every claim's ledger.
    dead_letters: Option<Arc<DeadLetterProducer>>,
}

impl Ledgers {
    /// Gives the claims opened from now on `producer` for their dead
    /// letters.
    pub(crate) fn set_dead_letters(&mut self, producer: Arc<DeadLetterProducer>) {
        self.dead_letters = Some(producer);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Arc<LedgerCell>>> {
        match self.cells.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Opens the ledger of the claim `token` of `partition`, which starts
    /// with `progress` (the progress record read with the committed
    /// offset): what it names done is not handed out.
    pub(crate) fn open(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        progress: Progress,
    ) -> Arc<LedgerCell> {
        let cell = Arc::new(LedgerCell {
            partition: partition.clone(),
            token,
            ledger: Mutex::new(Ledger {
                outstanding: VecDeque::new(),
                in_flight: 0,
                last_delivered: None,
                watermark: None,
                reported: None,
                stopping: false,
                drained: false,
                generation: 0,
                sought: 0,
                paused: false,
                started_at: None,
                fetched_to: None,
                lanes: LaneMail::default(),
                progress,
                progress_moved: false,
                progress_full: false,
            }),
            wake: self.wake.clone(),
            runtime: tokio::runtime::Handle::try_current().ok(),
            dead_letters: self.dead_letters.clone(),
        });
        self.lock().insert(partition.clone(), cell.clone());
        cell
    }

    /// Marks a partition stopping: nothing more of it is handed out.
    pub(crate) fn stop(&self, partition: &TopicPartition, token: FencingToken) {
        let cells = self.lock();
        if let Some(cell) = cells.get(partition).filter(|c| c.token == token) {
            let mut ledger = cell.lock();
            ledger.stopping = true;
            // Messages waiting in lanes were never handed out: the drain
            // waits for those handed out only (the committed offset stays
            // below the first waiting one).
            ledger.drained = ledger.in_flight == 0;
            // Dropped once unlocked: a message refers to its ledger.
            let let_go = std::mem::take(&mut ledger.lanes.retried);
            drop(ledger);
            drop(let_go);
        }
    }

    /// Every claim is stopping, as the member's data plane shuts down:
    /// nothing more is handed out, and the nacked messages waiting to be
    /// handed out again are let go (each refers to its ledger, which
    /// holds it until then).
    pub(crate) fn stop_all(&self) {
        let cells: Vec<Arc<LedgerCell>> = self.lock().values().cloned().collect();
        for cell in cells {
            let mut ledger = cell.lock();
            ledger.stopping = true;
            let let_go = std::mem::take(&mut ledger.lanes.retried);
            drop(ledger);
            drop(let_go);
        }
    }

    /// What the application is doing with each claim.
    pub(crate) fn activities(&self) -> Vec<(TopicPartition, FencingToken, Activity)> {
        self.lock()
            .iter()
            .map(|(partition, cell)| (partition.clone(), cell.token, cell.activity()))
            .collect()
    }

    /// What changed since the last call: watermarks to report, then drains
    /// that ended (a drained partition's ledger goes).
    pub(crate) fn changes(&self, out: &mut VecDeque<DataEvent>) {
        if let Some(producer) = &self.dead_letters {
            let mut problems = VecDeque::new();
            producer.problems(&mut problems);
            out.extend(problems.into_iter().map(DataEvent::Problem));
        }
        let mut cells = self.lock();
        let mut drained = Vec::new();
        for (partition, cell) in cells.iter() {
            let mut ledger = cell.lock();
            // What is done above the watermark changed: the member commits
            // it with the offset after the watermark or, before the first
            // message of the fetch is processed, with where it started
            // (the committed offset, or where its policy put it).
            if ledger.progress_moved {
                let next = ledger.watermark.and_then(|w| w.checked_add(1));
                if let Some(next) = next.or(ledger.started_at) {
                    ledger.progress_moved = false;
                    ledger.reported = ledger.watermark;
                    out.push_back(DataEvent::Progressed(
                        partition.clone(),
                        cell.token,
                        next,
                        ledger.progress.clone(),
                    ));
                }
            }
            if ledger.watermark > ledger.reported {
                ledger.reported = ledger.watermark;
                if let Some(offset) = ledger.watermark {
                    out.push_back(DataEvent::Processed(partition.clone(), cell.token, offset));
                }
            }
            if ledger.drained {
                drained.push((partition.clone(), cell.token));
            }
        }
        for (partition, token) in drained {
            cells.remove(&partition);
            out.push_back(DataEvent::Drained(partition, token));
        }
    }
}

#[cfg(test)]
// Done ranges are compared as the ranges they are, one or many.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    /// The ledger's watermark, as the member's task would read it.
    fn processed(ledgers: &Ledgers) -> Vec<Offset> {
        let mut out = VecDeque::new();
        ledgers.changes(&mut out);
        out.into_iter()
            .filter_map(|event| match event {
                DataEvent::Processed(_, _, offset) => Some(offset),
                _ => None,
            })
            .collect()
    }

    /// The ledgers with one claim, of partition t/0 under token 7.
    fn one_claim() -> (Ledgers, TopicPartition, FencingToken, Arc<LedgerCell>) {
        let ledgers = Ledgers::default();
        let partition = TopicPartition::new("t", 0);
        let token = FencingToken(7);
        let cell = ledgers.open(&partition, token, Progress::new());
        (ledgers, partition, token, cell)
    }

    #[test]
    fn offsets_a_fetch_passed_count_once_the_messages_before_them_are_processed() {
        let (ledgers, partition, token, cell) = one_claim();

        // Records 10 and 11, then a commit marker at 12.
        assert!(cell.deliver(10, token, 0));
        assert!(cell.deliver(11, token, 0));
        cell.pass(12, token, 0);
        cell.ack(10, 0);
        assert_eq!(processed(&ledgers), [10], "11 is not processed yet");
        cell.ack(11, 0);
        assert_eq!(processed(&ledgers), [12], "past the marker");

        // Only a marker, nothing outstanding: it counts at once.
        cell.pass(15, token, 0);
        assert_eq!(processed(&ledgers), [15]);

        // Not under another claim, nor from an earlier fetch, nor backwards.
        cell.pass(20, FencingToken(6), 0);
        cell.pass(20, token, 1);
        cell.pass(14, token, 0);
        assert_eq!(processed(&ledgers), Vec::<Offset>::new());

        // Not once the partition is stopping.
        ledgers.stop(&partition, token);
        cell.pass(20, token, 0);
        assert_eq!(processed(&ledgers), Vec::<Offset>::new());
    }

    /// The progress the ledgers report, with the offset below which all
    /// is processed.
    fn progressed(ledgers: &Ledgers) -> Vec<(Offset, Progress)> {
        let mut out = VecDeque::new();
        ledgers.changes(&mut out);
        out.into_iter()
            .filter_map(|event| match event {
                DataEvent::Progressed(_, _, next, progress) => Some((next, progress)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn what_the_progress_record_names_done_is_not_handed_out_again() {
        let ledgers = Ledgers::default();
        let token = FencingToken(7);
        let mut read = Progress::new();
        for offset in [11, 12, 14] {
            read.mark_done(offset);
        }
        read.fail(13);
        let cell = ledgers.open(&TopicPartition::new("t", 0), token, read);

        // 10 is handed out; 11 and 12 were done by the last owner.
        assert!(cell.take(10, 0, true, token, 0));
        assert!(!cell.take(11, 0, true, token, 0), "11 handed out again");
        assert!(!cell.take(12, 0, true, token, 0), "12 handed out again");
        assert!(cell.take(13, 0, true, token, 0));
        assert!(!cell.take(14, 0, true, token, 0), "14 handed out again");
        assert!(cell.take(15, 0, true, token, 0));

        // 10 done: past 11 and 12, up to 13, which is held; the record
        // still names 14, and 13's failure.
        cell.ack(10, 0);
        let reported = progressed(&ledgers);
        let Some((next, progress)) = reported.last() else {
            panic!("no progress reported: {reported:?}");
        };
        assert_eq!(*next, 13);
        assert_eq!(progress.done(), [14..15]);
        assert_eq!(progress.failures(13), 1);

        // 13 fails again: counted on from the record's count.
        cell.set_lane_wake(Arc::new(|| {}));
        assert!(matches!(cell.nack(13, 0), Nacked::Retry { .. }));
        let reported = progressed(&ledgers);
        assert_eq!(
            reported.last().map(|(_, p)| p.failures(13)),
            Some(2),
            "{reported:?}"
        );

        // 15 done out of order, then 13: everything up to 15 is.
        cell.ack(15, 0);
        assert_eq!(cell.hand_out(13, 0), HandOut::Handed);
        cell.ack(13, 0);
        let reported = progressed(&ledgers);
        assert_eq!(
            reported.last(),
            Some(&(16, Progress::new())),
            "{reported:?}"
        );
    }

    #[test]
    fn a_full_progress_holds_new_messages_back_until_the_watermark_moves() {
        let (ledgers, _, token, cell) = one_claim();
        // 0 held; every second offset after it done: one range each.
        assert!(cell.take(0, 0, true, token, 0));
        let mut offset = 1;
        while !cell.progress_full() {
            assert!(cell.take(offset, 0, true, token, 0));
            assert!(cell.take(offset + 1, 0, true, token, 0));
            cell.ack(offset + 1, 0);
            offset += 2;
            assert!(offset < 4 * tenure_core::progress::MAX_DONE_RANGES as i64);
        }
        assert_eq!(
            progressed(&ledgers).last().map(|(_, p)| p.done().len()),
            Some(tenure_core::progress::MAX_DONE_RANGES)
        );
        // The first message done: the watermark moves past the first
        // range, and there is room again.
        cell.ack(0, 0);
        cell.ack(1, 0);
        assert!(!cell.progress_full());
        let reported = progressed(&ledgers);
        assert_eq!(
            reported.last().map(|(next, _)| *next),
            Some(3),
            "{reported:?}"
        );
    }

    #[test]
    fn a_shutdown_lets_go_of_nacked_messages_and_their_batches() {
        let (ledgers, _, token, cell) = one_claim();
        cell.set_lane_wake(Arc::new(|| {}));
        let batch = Arc::new(crate::message::Batch {
            topic: "t".into(),
            partition: 0,
            token,
            generation: 0,
            ledger: cell.clone(),
            records: vec![crate::message::Record {
                offset: 0,
                key: None,
                value: None,
                headers: Default::default(),
                timestamp: crate::Timestamp::CreateTime(0),
            }],
        });
        assert!(cell.deliver(0, token, 0));
        let message = Message::new(batch.clone(), 0);
        let weak = Arc::downgrade(&batch);
        drop(batch);
        // No runtime here: back in its lane at once, held by the ledger.
        assert!(message.nack(Duration::ZERO).is_ok());
        assert!(
            weak.upgrade().is_some(),
            "the nacked message holds its batch"
        );
        ledgers.stop_all();
        assert!(weak.upgrade().is_none(), "the batch outlived the shutdown");
        assert!(!cell.holds(0), "still handing out after the shutdown");
    }

    #[test]
    fn an_acknowledgement_from_before_a_seek_back_marks_nothing() {
        let (ledgers, _, token, cell) = one_claim();

        assert!(cell.deliver(10, token, 0));
        assert!(cell.deliver(11, token, 0));
        cell.ack(10, 0);
        assert_eq!(processed(&ledgers), [10]);

        // Back to 11: the old 11 is let go, and the new one is handed out.
        assert_eq!(cell.seek(11), Some(false));
        let generation = cell.generation();
        assert!(cell.deliver(11, token, generation));
        // The old 11 finishes: that says nothing of the new one.
        cell.ack(11, 0);
        assert_eq!(processed(&ledgers), Vec::<Offset>::new());
        cell.ack(11, generation);
        assert_eq!(processed(&ledgers), [11]);
    }
}
