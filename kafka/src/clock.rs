//! The clock a hand-out checks the member's deadline against: the kernel's
//! coarse monotonic clock where there is one, with its error accounted for.
//!
//! Every message handed out is checked against the member's deadline at
//! that moment (nothing is handed out after it). A precise clock read costs
//! a few tens of nanoseconds, a tenth of what the rest of a hand-out costs;
//! Linux's `CLOCK_MONOTONIC_COARSE` is the same clock as
//! `CLOCK_MONOTONIC` (which `std::time::Instant` reads), kept at the last
//! tick: never ahead of it, and behind it by at most its resolution. A
//! deadline more than [`MARGIN_TICKS`] resolutions away by the coarse clock
//! has not passed by the precise one; within that margin, and wherever
//! there is no coarse clock, the precise clock decides.

use std::time::Instant;

/// How many of the coarse clock's resolutions a deadline must be away for
/// the coarse clock alone to say it has not passed: the kernel's bound is
/// one; the second covers a tick handled late.
const MARGIN_TICKS: u32 = 2;

/// A deadline as the coarse clock reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CoarseDeadline {
    /// The deadline less the margin, in the coarse clock's nanoseconds:
    /// while the coarse clock reads less, the deadline has not passed.
    #[cfg(target_os = "linux")]
    safe_until: u64,
}

impl CoarseDeadline {
    /// `end` on the coarse clock, or `None` where there is no coarse clock
    /// or `end` is too close to tell by it.
    pub(crate) fn new(end: Instant) -> Option<CoarseDeadline> {
        #[cfg(target_os = "linux")]
        {
            let resolution = coarse::resolution()?;
            // `Instant::now()` is read after the monotonic clock, so `end`
            // converted through them never comes out later than it is.
            let monotonic = coarse::read(libc::CLOCK_MONOTONIC)?;
            let left = end.checked_duration_since(Instant::now())?;
            let margin = resolution.checked_mul(MARGIN_TICKS)?;
            let safe_left = left.checked_sub(margin)?;
            let safe_until = monotonic.checked_add(u64::try_from(safe_left.as_nanos()).ok()?)?;
            Some(CoarseDeadline { safe_until })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = end;
            None
        }
    }

    /// Whether the deadline has certainly not passed: `false` means "ask
    /// the precise clock", not "passed".
    pub(crate) fn surely_ahead(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            coarse::read(libc::CLOCK_MONOTONIC_COARSE).is_some_and(|now| now < self.safe_until)
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }
}

#[cfg(target_os = "linux")]
mod coarse {
    use std::sync::OnceLock;
    use std::time::Duration;

    /// Nanoseconds of `clock`, or `None` if the kernel refuses to read it.
    pub(super) fn read(clock: libc::clockid_t) -> Option<u64> {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `time` is a valid, writable timespec for the call's
        // duration; clock_gettime writes nothing else.
        let status = unsafe { libc::clock_gettime(clock, &mut time) };
        if status != 0 {
            return None;
        }
        let seconds = u64::try_from(time.tv_sec).ok()?;
        let nanos = u64::try_from(time.tv_nsec).ok()?;
        seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
    }

    /// The coarse clock's resolution (its tick), asked once: `None` if the
    /// kernel has no coarse clock.
    pub(super) fn resolution() -> Option<Duration> {
        static RESOLUTION: OnceLock<Option<Duration>> = OnceLock::new();
        *RESOLUTION.get_or_init(|| {
            let mut resolution = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: as in `read`.
            let status =
                unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut resolution) };
            if status != 0 {
                return None;
            }
            let seconds = u64::try_from(resolution.tv_sec).ok()?;
            let nanos = u32::try_from(resolution.tv_nsec).ok()?;
            // A coarse clock as slow as a second would make the margin
            // larger than most sessions' suspension margins: not worth it.
            (seconds == 0).then(|| Duration::new(0, nanos))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// How far ahead a deadline must be for the coarse clock to tell;
    /// `None` where there is no coarse clock.
    fn margin() -> Option<Duration> {
        #[cfg(target_os = "linux")]
        {
            coarse::resolution()?.checked_mul(MARGIN_TICKS)
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }

    /// A deadline well ahead is seen as ahead by the coarse clock; one
    /// within the margin, or passed, never is.
    #[test]
    fn the_coarse_clock_never_says_ahead_of_a_close_or_passed_deadline() {
        let Some(margin) = margin() else {
            // No coarse clock here: the precise clock decides everything.
            assert!(CoarseDeadline::new(Instant::now() + Duration::from_secs(60)).is_none());
            return;
        };
        let far = CoarseDeadline::new(Instant::now() + Duration::from_secs(60))
            .expect("a deadline a minute away is far enough");
        assert!(far.surely_ahead());
        assert!(CoarseDeadline::new(Instant::now() + margin / 2).is_none());
        assert!(CoarseDeadline::new(Instant::now()).is_none());
        // Close enough to pass while the test runs: once it has passed by
        // the precise clock, the coarse one never says it is ahead.
        let end = Instant::now() + margin + Duration::from_millis(20);
        let close = CoarseDeadline::new(end).expect("just past the margin");
        while Instant::now() < end {
            std::hint::spin_loop();
        }
        for _ in 0..1000 {
            assert!(!close.surely_ahead(), "ahead of a passed deadline");
        }
    }
}
