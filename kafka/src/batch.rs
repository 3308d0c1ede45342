//! One fetch of a partition on its way from the fetcher to delivery: its
//! messages, the offsets it went past without one, and its metrics.

use std::sync::Arc;

use tenure_core::{FencingToken, Offset};

use crate::budget::Held;
use crate::ledger::LedgerCell;
use crate::message::Batch;
use crate::telemetry::Tally;

/// What one fetch of a partition brought: its messages, and how far the
/// fetch went past the last of them.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// The messages' records (none when the fetch only went past offsets
    /// without one).
    pub(crate) batch: Arc<Batch>,
    /// Offsets past the last message that hold nothing to hand out
    /// (transaction markers, records of aborted transactions): once the
    /// messages before them are handed out, they count as handed out, so
    /// that the committed offset can reach the log's end.
    pub(crate) passed: Option<Passed>,
    /// The batch's metrics, recorded as it is handed out.
    pub(crate) tally: Option<Tally>,
    /// The part of the member's buffer budget the messages take, given
    /// back when the batch is done with (`None` for a batch not fetched
    /// under a budget).
    pub(crate) held: Option<Held>,
}

/// Offsets a fetch went past without a message, up to `last`.
#[derive(Debug)]
pub(crate) struct Passed {
    pub(crate) ledger: Arc<LedgerCell>,
    pub(crate) token: FencingToken,
    pub(crate) generation: u64,
    pub(crate) last: Offset,
}
