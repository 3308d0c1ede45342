//! Which messages the application holds, per claim: what was handed out,
//! what is acknowledged, and so the offset below which everything is
//! processed (what the member commits) and when a stopping partition is
//! drained.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tenure_core::{FencingToken, Offset, TopicPartition};

use crate::event::DataEvent;

/// Which messages of a partition the application holds.
#[derive(Debug)]
struct Ledger {
    /// Handed out, in the order handed out (offsets grow), each with
    /// whether it is acknowledged; acknowledged ones leave from the front.
    outstanding: VecDeque<(Offset, bool)>,
    /// The last offset handed out.
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
    /// Paused by the application: nothing is handed out until resumed.
    paused: bool,
    /// Where the current fetch started (an offset its policy resolved, or
    /// a seek's), for the position before anything is handed out.
    started_at: Option<Offset>,
    /// The last message the current fetch brought for the application to
    /// take (in its buffer, or in the fetcher's hands).
    fetched_to: Option<Offset>,
}

/// One claim's ledger, shared by its messages (no lookup on the hot path).
#[derive(Debug)]
pub(crate) struct LedgerCell {
    pub(crate) token: FencingToken,
    ledger: Mutex<Ledger>,
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
        resumed.then_some(ledger.last_delivered)
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
        ledger.outstanding.clear();
        ledger.fetched_to = None;
        ledger.started_at = Some(offset);
        ledger.last_delivered = offset.checked_sub(1).filter(|o| *o >= 0);
        if ledger.last_delivered > ledger.watermark {
            ledger.watermark = ledger.last_delivered;
            self.wake.moved.notify_one();
        }
        Some(ledger.paused)
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
                ledger.outstanding.len(),
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
        let mut ledger = self.lock();
        if token != self.token
            || ledger.stopping
            || ledger.paused
            || ledger.generation != generation
        {
            return false;
        }
        ledger.outstanding.push_back((offset, false));
        ledger.last_delivered = Some(offset);
        true
    }

    pub(crate) fn ack(&self, offset: Offset) {
        let mut ledger = self.lock();
        // Acknowledgements mostly come in order: the front is found first.
        let Ok(at) = ledger
            .outstanding
            .binary_search_by_key(&offset, |(o, _)| *o)
        else {
            return;
        };
        ledger.outstanding[at].1 = true;
        while ledger.outstanding.front().is_some_and(|(_, acked)| *acked) {
            ledger.outstanding.pop_front();
        }
        self.advance(ledger);
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

    /// Moves the watermark up to what is acknowledged, and wakes the
    /// member's task if it moved or a drain ended.
    fn advance(&self, mut ledger: MutexGuard<'_, Ledger>) {
        let watermark = match ledger.outstanding.front() {
            Some((first, _)) => first.checked_sub(1),
            None => ledger.last_delivered,
        };
        // Only the first move since the task read it: the task reads the
        // latest watermark, not every one.
        let mut moved = false;
        if watermark > ledger.watermark {
            moved = ledger.watermark == ledger.reported;
            ledger.watermark = watermark;
        }
        let mut drained = false;
        if ledger.stopping && ledger.outstanding.is_empty() && !ledger.drained {
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
}

impl Ledgers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<TopicPartition, Arc<LedgerCell>>> {
        match self.cells.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(crate) fn open(&self, partition: &TopicPartition, token: FencingToken) -> Arc<LedgerCell> {
        let cell = Arc::new(LedgerCell {
            token,
            ledger: Mutex::new(Ledger {
                outstanding: VecDeque::new(),
                last_delivered: None,
                watermark: None,
                reported: None,
                stopping: false,
                drained: false,
                generation: 0,
                paused: false,
                started_at: None,
                fetched_to: None,
            }),
            wake: self.wake.clone(),
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
            ledger.drained = ledger.outstanding.is_empty();
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
        let mut cells = self.lock();
        let mut drained = Vec::new();
        for (partition, cell) in cells.iter() {
            let mut ledger = cell.lock();
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

    #[test]
    fn offsets_a_fetch_passed_count_once_the_messages_before_them_are_processed() {
        let ledgers = Ledgers::default();
        let partition = TopicPartition {
            topic: "t".into(),
            partition: 0,
        };
        let token = FencingToken(7);
        let cell = ledgers.open(&partition, token);

        // Records 10 and 11, then a commit marker at 12.
        assert!(cell.deliver(10, token, 0));
        assert!(cell.deliver(11, token, 0));
        cell.pass(12, token, 0);
        cell.ack(10);
        assert_eq!(processed(&ledgers), [10], "11 is not processed yet");
        cell.ack(11);
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
}
