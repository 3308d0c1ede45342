//! Capped exponential backoff with jitter, for retrying store requests.

use std::time::Duration;

use crate::rng::SplitMix64;

/// The delay before retry number `attempt` (0 for the first retry): `min`
/// doubled per attempt, capped at `max`, then drawn uniformly from the upper
/// half so members that failed together do not retry together.
pub(crate) fn delay(rng: &mut SplitMix64, min: Duration, max: Duration, attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
    let ceiling = min.saturating_mul(factor).min(max);
    let half = ceiling / 2;
    let spread = (ceiling - half).as_nanos().min(u128::from(u64::MAX)) as u64;
    half + Duration::from_nanos(rng.below(spread + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_then_caps_and_stays_in_the_upper_half() {
        let mut rng = SplitMix64::new(3);
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(1000);
        for attempt in 0..40 {
            let ceiling = (min * 2u32.pow(attempt.min(20))).min(max);
            for _ in 0..50 {
                let d = delay(&mut rng, min, max, attempt);
                assert!(d <= ceiling, "attempt {attempt}: {d:?} > {ceiling:?}");
                assert!(
                    d >= ceiling / 2,
                    "attempt {attempt}: {d:?} < half of {ceiling:?}"
                );
            }
        }
    }
}
