//! What a partition's owner has done above its committed offset: the
//! acknowledged offsets past the frontier (messages processed out of
//! order, by key-ordered lanes) and how often the messages still in
//! flight have failed. The owner writes it beside the committed offset,
//! in the same fenced write; a new owner skips what it says was done and
//! carries the failure counts on.
//!
//! Its record is JSON at `<group>/progress/<topic>/<partition>` (etcd: the
//! `progress/` key beside the offset's):
//! `{"version":1,"committed":N,"done":[[a,b],…],"attempts":[[o,n],…]}`,
//! `committed` the offset record it was written with, each `[a,b]` the
//! half-open range of offsets `a..b` done, each `[o,n]` an offset not done
//! that failed `n` times. The offset record stays the plain number Kafka
//! 0.8's tools read; a reader trusts a progress record only when its
//! `committed` is the offset it read beside it, so a record left behind
//! by anything that moved the offset on its own (a tool resetting it)
//! counts for nothing.

use std::ops::Range;

use crate::error::StoreError;
use crate::records::RecordError;
use crate::types::Offset;

/// The version of the progress record this code writes; a record of a
/// later version is not read (a member that cannot read it processes
/// again what it names, which is safe).
pub const PROGRESS_VERSION: u64 = 1;

/// How many ranges of done offsets a progress record holds at most: a
/// partition whose acknowledgements above the frontier would need more
/// stops handing out messages until the frontier moves. At about 24
/// bytes a range, a full record of 256 is some 6 KiB; a batch of
/// [`OPS_PER_BATCH`](crate::records::OPS_PER_BATCH) of them stays under
/// etcd's default request limit of 1.5 MiB.
pub const MAX_DONE_RANGES: usize = 256;

/// How many failure counts a progress record holds at most: past it, the
/// counts of the highest offsets are left out (their messages then get
/// the attempts allowed anew after a handoff).
pub const MAX_ATTEMPT_COUNTS: usize = 256;

/// What is committed for a partition: the next offset to consume, and the
/// progress above it written in the same fenced write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Committed {
    /// The next offset to consume (the offset record).
    pub offset: Offset,
    /// What was done above it (the progress record; empty when there is
    /// none, or none that counts).
    pub progress: Progress,
}

impl Committed {
    /// `offset` committed with nothing done above it.
    pub fn at(offset: Offset) -> Committed {
        Committed {
            offset,
            progress: Progress::new(),
        }
    }
}

/// The acknowledged offsets above a partition's committed offset, and the
/// failures of the messages not yet done: what the owner writes beside
/// the offset, and what a new owner starts from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Progress {
    /// Offsets done, as sorted, disjoint, non-adjacent, non-empty ranges.
    done: Vec<Range<Offset>>,
    /// Offsets not done with how many times each failed, sorted by
    /// offset, each count at least 1.
    attempts: Vec<(Offset, u32)>,
}

impl Progress {
    /// No offset done above the frontier, no failure counted.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Whether the record says nothing: no offset done, no failure.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty() && self.attempts.is_empty()
    }

    /// The done offsets, as sorted, disjoint ranges.
    pub fn done(&self) -> &[Range<Offset>] {
        &self.done
    }

    /// The failure counts of offsets not done, sorted by offset.
    pub fn attempts(&self) -> &[(Offset, u32)] {
        &self.attempts
    }

    /// Whether `offset` is done.
    pub fn is_done(&self, offset: Offset) -> bool {
        let at = self.done.partition_point(|range| range.end <= offset);
        self.done.get(at).is_some_and(|range| range.start <= offset)
    }

    /// How many times the message at `offset` failed (0 when not
    /// counted).
    pub fn failures(&self, offset: Offset) -> u32 {
        self.attempts
            .binary_search_by_key(&offset, |&(o, _)| o)
            .map_or(0, |at| self.attempts[at].1)
    }

    /// Marks `offset` done (and forgets its failures).
    pub fn mark_done(&mut self, offset: Offset) {
        let Some(after) = offset.checked_add(1) else {
            return;
        };
        if let Ok(at) = self.attempts.binary_search_by_key(&offset, |&(o, _)| o) {
            self.attempts.remove(at);
        }
        // The first range that ends at or after `offset`: it holds
        // `offset`, or follows it, or ends right at it.
        let at = self.done.partition_point(|range| range.end < offset);
        match self.done.get(at).cloned() {
            Some(range) if range.start <= offset && offset < range.end => {}
            Some(range) if range.end == offset => {
                self.done[at].end = after;
                if self
                    .done
                    .get(at + 1)
                    .is_some_and(|next| next.start == after)
                {
                    self.done[at].end = self.done[at + 1].end;
                    self.done.remove(at + 1);
                }
            }
            Some(range) if range.start == after => self.done[at].start = offset,
            _ => self.done.insert(at, offset..after),
        }
    }

    /// Counts one more failure of the message at `offset`; the count now.
    pub fn fail(&mut self, offset: Offset) -> u32 {
        match self.attempts.binary_search_by_key(&offset, |&(o, _)| o) {
            Ok(at) => {
                self.attempts[at].1 = self.attempts[at].1.saturating_add(1);
                self.attempts[at].1
            }
            Err(at) => {
                self.attempts.insert(at, (offset, 1));
                1
            }
        }
    }

    /// Forgets everything below `frontier` (the committed offset moved
    /// there): what is left is what lies above it.
    pub fn forget_below(&mut self, frontier: Offset) {
        self.done.retain_mut(|range| {
            range.start = range.start.max(frontier);
            range.start < range.end
        });
        self.attempts.retain(|&(offset, _)| offset >= frontier);
    }

    /// Whether the record holds as many ranges as it may
    /// ([`MAX_DONE_RANGES`]): the partition's owner then hands out no new
    /// message until the frontier moves.
    pub fn is_full(&self) -> bool {
        self.done.len() >= MAX_DONE_RANGES
    }

    /// The record of this progress written beside the committed offset
    /// `committed`.
    pub fn encode(&self, committed: Offset) -> Vec<u8> {
        // Past the bound, the highest ranges go: their messages are
        // processed again by a next owner, which is safe; a record that
        // grows without bound is not.
        let done: Vec<[Offset; 2]> = self
            .done
            .iter()
            .take(MAX_DONE_RANGES)
            .map(|r| [r.start, r.end])
            .collect();
        let attempts: Vec<(Offset, u32)> = self
            .attempts
            .iter()
            .take(MAX_ATTEMPT_COUNTS)
            .copied()
            .collect();
        serde_json::json!({
            "version": PROGRESS_VERSION,
            "committed": committed,
            "done": done,
            "attempts": attempts,
        })
        .to_string()
        .into_bytes()
    }

    /// Reads the progress record at `path` written beside the committed
    /// offset `committed` (the one read with it): `None` when it was
    /// written with another offset or in a later version, which count for
    /// nothing; [`StoreError::Corrupt`] when it cannot be read.
    pub fn decode(
        path: &str,
        data: &[u8],
        committed: Offset,
    ) -> Result<Option<Progress>, StoreError> {
        Progress::parse(data, committed).map_err(|e| e.at(path))
    }

    fn parse(data: &[u8], committed: Offset) -> Result<Option<Progress>, RecordError> {
        let value: serde_json::Value = serde_json::from_slice(data)
            .map_err(|e| RecordError::caused("progress record is not JSON", e))?;
        let number = |field: &str| {
            value
                .get(field)
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| {
                    RecordError::from(format!("progress record has no {field:?} number"))
                })
        };
        let version = value
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| RecordError::from("progress record has no \"version\" number"))?;
        if version > PROGRESS_VERSION {
            return Ok(None);
        }
        if number("committed")? != committed {
            return Ok(None);
        }
        let pairs = |field: &str| -> Result<Vec<(i64, i64)>, RecordError> {
            let Some(list) = value.get(field) else {
                return Ok(Vec::new());
            };
            let list = list.as_array().ok_or_else(|| {
                RecordError::from(format!("progress record's {field:?} is not a list"))
            })?;
            list.iter()
                .map(|pair| match pair.as_array().map(Vec::as_slice) {
                    Some([a, b]) => a.as_i64().zip(b.as_i64()).ok_or(()),
                    _ => Err(()),
                })
                .collect::<Result<_, ()>>()
                .map_err(|()| {
                    RecordError::from(format!(
                        "progress record's {field:?} holds something else than pairs of numbers"
                    ))
                })
        };
        let mut progress = Progress::new();
        // The first range may start at the committed offset; each next
        // one after a gap, so that ranges never touch.
        let mut floor = committed;
        for (start, end) in pairs("done")? {
            if start < floor || end <= start {
                return Err(RecordError::from(format!(
                    "progress record's done range [{start},{end}) is empty, out of order or below the committed offset {committed}"
                )));
            }
            progress.done.push(start..end);
            floor = end.saturating_add(1);
        }
        let mut last = None;
        for (offset, count) in pairs("attempts")? {
            let count = u32::try_from(count).ok().filter(|&c| c > 0);
            let (Some(count), true) = (count, offset >= committed && last < Some(offset)) else {
                return Err(RecordError::from(format!(
                    "progress record's attempts at {offset} are out of order, below the committed offset {committed} or not a positive count"
                )));
            };
            if !progress.is_done(offset) {
                progress.attempts.push((offset, count));
            }
            last = Some(offset);
        }
        Ok(Some(progress))
    }
}

#[cfg(test)]
// Done ranges are compared as the ranges they are, one or many.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    fn done_of(offsets: &[Offset]) -> Progress {
        let mut progress = Progress::new();
        for &offset in offsets {
            progress.mark_done(offset);
        }
        progress
    }

    #[test]
    fn marks_merge_into_ranges_in_any_order() {
        let progress = done_of(&[5, 3, 9, 4, 10, 7, 6]);
        assert_eq!(progress.done(), &[3..8, 9..11]);
        assert!(progress.is_done(3) && progress.is_done(7) && progress.is_done(10));
        assert!(!progress.is_done(2) && !progress.is_done(8) && !progress.is_done(11));
        assert_eq!(done_of(&[5, 5, 5]).done(), &[5..6], "a mark twice is one");
    }

    #[test]
    fn marks_in_every_order_give_the_same_ranges() {
        // Every order of a few offsets with gaps between them.
        let offsets = [1, 2, 4, 5, 6, 9];
        let mut order = offsets;
        for round in 0..720 {
            let mut k = round;
            for i in (1..order.len()).rev() {
                order.swap(i, k % (i + 1));
                k /= i + 1;
            }
            let progress = done_of(&order);
            assert_eq!(progress.done(), &[1..3, 4..7, 9..10], "order {order:?}");
        }
    }

    #[test]
    fn failures_count_until_done_and_forget_below() {
        let mut progress = Progress::new();
        assert_eq!(progress.fail(8), 1);
        assert_eq!(progress.fail(8), 2);
        assert_eq!(progress.fail(3), 1);
        assert_eq!(progress.failures(8), 2);
        progress.mark_done(3);
        assert_eq!(progress.failures(3), 0);
        progress.mark_done(12);
        progress.forget_below(9);
        assert_eq!(progress.attempts(), &[]);
        assert_eq!(progress.done(), &[12..13]);
        progress.forget_below(20);
        assert!(progress.is_empty());
    }

    #[test]
    fn the_record_reads_back_only_beside_its_offset() {
        let mut progress = done_of(&[12, 13, 15]);
        progress.fail(14);
        let record = progress.encode(10);
        assert_eq!(
            String::from_utf8_lossy(&record),
            r#"{"attempts":[[14,1]],"committed":10,"done":[[12,14],[15,16]],"version":1}"#
        );
        assert_eq!(Progress::decode("p", &record, 10), Ok(Some(progress)));
        assert_eq!(
            Progress::decode("p", &record, 11),
            Ok(None),
            "another offset's"
        );
        let later = br#"{"version":2,"committed":10,"bits":"ff"}"#;
        assert_eq!(
            Progress::decode("p", later, 10),
            Ok(None),
            "a later version"
        );
    }

    #[test]
    fn a_bad_record_is_corrupt_not_trusted() {
        for bad in [
            &b"not json"[..],
            br#"{"committed":10,"done":[]}"#,
            br#"{"version":1,"done":[]}"#,
            br#"{"version":1,"committed":10,"done":[[9,11]]}"#,
            br#"{"version":1,"committed":10,"done":[[12,12]]}"#,
            br#"{"version":1,"committed":10,"done":[[14,15],[12,13]]}"#,
            br#"{"version":1,"committed":10,"done":[[12,14],[14,15]]}"#,
            br#"{"version":1,"committed":10,"done":[[12,"x"]]}"#,
            br#"{"version":1,"committed":10,"attempts":[[12,0]]}"#,
            br#"{"version":1,"committed":10,"attempts":[[13,1],[12,1]]}"#,
        ] {
            let error = Progress::decode("/g/progress/t/0", bad, 10).expect_err("corrupt");
            assert!(
                matches!(&error, StoreError::Corrupt { path, .. } if path == "/g/progress/t/0"),
                "{}: {error:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
