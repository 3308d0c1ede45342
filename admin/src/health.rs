//! A group's health judged from outside, as Burrow judges a consumer's:
//! per partition, over a sliding window of samples of (committed offset,
//! log end, owner), without thresholds; per group, the worst partition.
//!
//! The rules, in the order [`evaluate`] applies them to one partition:
//!
//! 1. **ERROR** — the partition cannot be judged or its offset is wrong:
//!    its committed-offset record is corrupt, Kafka did not answer for it,
//!    or the committed offset is ahead of the log's end or behind the log's
//!    start (out of range: the member would be refused its next fetch).
//! 2. **OK** — some sample in the window has lag 0: the partition caught up
//!    within the window, whatever else happened.
//! 3. **OK** — fewer than two samples: too early to say.
//! 4. **STOP** — the committed offset did not move over the window, lag is
//!    above 0 and no member owns the partition: nobody is consuming it.
//! 5. **STALL** — the committed offset did not move over the window, lag is
//!    above 0 and a member owns the partition: its owner holds it but does
//!    not get on (stuck processing, not acknowledging, paused).
//! 6. **WARN** — the committed offset moves but lag grew at every step of
//!    the window: the group consumes more slowly than producers write.
//! 7. **OK** — anything else.
//!
//! A group's status is its worst partition's (OK < WARN < STALL < STOP <
//! ERROR), and ERROR while its store cannot be read.

use std::fmt;

use tenure_core::Offset;

/// How a partition or a group is doing. Ordered from best to worst.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "UPPERCASE"))]
#[non_exhaustive]
pub enum Status {
    /// Consuming and keeping up, or too early to say.
    #[default]
    Ok,
    /// Consuming, but falling behind at every step of the window.
    Warn,
    /// Owned, lag above 0, and no commit in the window.
    Stall,
    /// Not owned, lag above 0, and no commit in the window.
    Stop,
    /// Cannot be judged (store or Kafka unreadable) or the committed offset
    /// is outside the log.
    Error,
}

impl Status {
    /// The status as Burrow and the metrics name it: `OK`, `WARN`, `STALL`,
    /// `STOP`, `ERROR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Stall => "STALL",
            Status::Stop => "STOP",
            Status::Error => "ERROR",
        }
    }

    /// The status as a number for a gauge: 0 OK, 1 WARN, 2 STALL, 3 STOP,
    /// 4 ERROR (higher is worse).
    pub fn code(self) -> u8 {
        match self {
            Status::Ok => 0,
            Status::Warn => 1,
            Status::Stall => 2,
            Status::Stop => 3,
            Status::Error => 4,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One look at a partition: what it had committed, where its log was, and
/// whether a member owned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Sample {
    /// When, in milliseconds since the epoch.
    pub at_ms: u64,
    /// The committed offset (the next offset to consume), if any.
    pub committed: Option<Offset>,
    /// The first offset still in the log.
    pub log_start: Offset,
    /// The offset the next produced message will get.
    pub log_end: Offset,
    /// Whether a member owned the partition.
    pub owned: bool,
}

impl Sample {
    /// How many messages were not committed: log end − committed offset
    /// (from the log's start when nothing is committed), never below 0.
    pub fn lag(&self) -> u64 {
        let log = tenure_kafka::LogOffsets {
            start: self.log_start,
            end: self.log_end,
        };
        log.lag(self.committed)
    }

    /// Where consumption would resume: the committed offset, or the log's
    /// start when nothing is committed.
    fn position(&self) -> Offset {
        self.committed.unwrap_or(self.log_start)
    }
}

/// A partition's judgement: its status and why, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// The status.
    pub status: Status,
    /// Why, for a person.
    pub reason: String,
}

impl Judgement {
    fn new(status: Status, reason: impl Into<String>) -> Judgement {
        Judgement {
            status,
            reason: reason.into(),
        }
    }
}

/// Judges one partition from its window of samples (oldest first) and,
/// when it cannot be read, why (`error`). The rules are the module's.
pub fn evaluate(window: &[Sample], error: Option<&str>) -> Judgement {
    if let Some(error) = error {
        return Judgement::new(Status::Error, error);
    }
    let Some(last) = window.last() else {
        return Judgement::new(Status::Ok, "no sample yet");
    };
    if let Some(committed) = last.committed {
        if committed > last.log_end {
            return Judgement::new(
                Status::Error,
                format!(
                    "committed offset {committed} is ahead of the log's end {}",
                    last.log_end
                ),
            );
        }
        if committed < last.log_start {
            return Judgement::new(
                Status::Error,
                format!(
                    "committed offset {committed} is out of range: the log starts at {}",
                    last.log_start
                ),
            );
        }
    }
    if window.iter().any(|sample| sample.lag() == 0) {
        return Judgement::new(Status::Ok, "caught up within the window");
    }
    let [first, .., _] = window else {
        return Judgement::new(Status::Ok, "one sample so far");
    };
    let lag = last.lag();
    if first.position() == last.position() {
        return if last.owned {
            Judgement::new(
                Status::Stall,
                format!("owned, lag {lag}, and no commit in the window"),
            )
        } else {
            Judgement::new(
                Status::Stop,
                format!("no owner, lag {lag}, and no commit in the window"),
            )
        };
    }
    let growing = window.windows(2).all(|step| step[1].lag() > step[0].lag());
    if growing {
        return Judgement::new(
            Status::Warn,
            format!("committing, but lag grew at every step to {lag}"),
        );
    }
    Judgement::new(Status::Ok, "committing")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, committed: Option<Offset>, log_end: Offset, owned: bool) -> Sample {
        Sample {
            at_ms: at,
            committed,
            log_start: 0,
            log_end,
            owned,
        }
    }

    #[test]
    fn any_zero_lag_in_the_window_is_ok() {
        let window = [
            sample(0, Some(10), 10, false),
            sample(1, Some(10), 20, false),
            sample(2, Some(10), 30, false),
        ];
        assert_eq!(evaluate(&window, None).status, Status::Ok);
    }

    #[test]
    fn no_commit_with_lag_is_stall_when_owned_and_stop_when_not() {
        let owned = [sample(0, Some(5), 10, true), sample(1, Some(5), 12, true)];
        assert_eq!(evaluate(&owned, None).status, Status::Stall);
        let unowned = [sample(0, Some(5), 10, true), sample(1, Some(5), 12, false)];
        let judged = evaluate(&unowned, None);
        assert_eq!(judged.status, Status::Stop);
        assert!(judged.reason.contains("lag 7"), "{}", judged.reason);
    }

    #[test]
    fn nothing_committed_counts_from_the_log_start() {
        let window = [sample(0, None, 10, false), sample(1, None, 10, false)];
        assert_eq!(evaluate(&window, None).status, Status::Stop);
    }

    #[test]
    fn commits_moving_while_lag_grows_at_every_step_is_warn() {
        let window = [
            sample(0, Some(1), 10, true),
            sample(1, Some(2), 20, true),
            sample(2, Some(3), 30, true),
        ];
        assert_eq!(evaluate(&window, None).status, Status::Warn);
        // One step where the lag shrank: OK.
        let window = [
            sample(0, Some(1), 10, true),
            sample(1, Some(9), 12, true),
            sample(2, Some(10), 30, true),
        ];
        assert_eq!(evaluate(&window, None).status, Status::Ok);
    }

    #[test]
    fn offsets_outside_the_log_and_unreadable_partitions_are_errors() {
        let ahead = [sample(0, Some(50), 10, true)];
        assert_eq!(evaluate(&ahead, None).status, Status::Error);
        let mut behind = sample(0, Some(5), 10, true);
        behind.log_start = 8;
        let judged = evaluate(&[behind], None);
        assert_eq!(judged.status, Status::Error);
        assert!(judged.reason.contains("out of range"), "{}", judged.reason);
        let fine = [sample(0, Some(5), 5, true)];
        assert_eq!(
            evaluate(&fine, Some("corrupt record")).status,
            Status::Error
        );
    }

    #[test]
    fn one_sample_is_too_early_to_judge() {
        let window = [sample(0, Some(5), 10, false)];
        assert_eq!(evaluate(&window, None).status, Status::Ok);
        assert_eq!(evaluate(&[], None).status, Status::Ok);
    }

    #[test]
    fn statuses_order_from_best_to_worst() {
        assert!(Status::Ok < Status::Warn);
        assert!(Status::Warn < Status::Stall);
        assert!(Status::Stall < Status::Stop);
        assert!(Status::Stop < Status::Error);
        assert_eq!(Status::Stop.code(), 3);
        assert_eq!(Status::Stall.to_string(), "STALL");
    }
}
