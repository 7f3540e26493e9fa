//! Exponential backoff: the pauses between the tries of something that keeps failing.
//!
//! [`Backoff`] is a pure value (a base, a cap and a factor); [`Backoff::pause`] is the pause
//! before a given retry, and [`Retries`] counts the failures of one run of them for a loop
//! that sleeps between tries. Jitter, where a caller wants it, is a number the caller draws
//! ([`Backoff::pause_with_jitter`]): the core reads no randomness and no clock.

use std::time::Duration;

/// Pauses that start at `base` and grow by `factor` at each retry, up to `cap`.
///
/// ```
/// # use std::time::Duration;
/// # use shardjob_core::backoff::Backoff;
/// let backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(500));
/// let pauses: Vec<u128> = (1..=6).map(|r| backoff.pause(r).as_millis()).collect();
/// assert_eq!(pauses, [50, 100, 200, 400, 500, 500]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    factor: u32,
}

impl Backoff {
    /// Pauses from `base`, doubling at each retry, never above `cap` (nor below `base` when
    /// `base` is above `cap`: the cap wins).
    pub const fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            factor: 2,
        }
    }

    /// The same pauses, growing by `factor` instead of doubling (`0` and `1` keep them at
    /// `base`).
    pub const fn with_factor(self, factor: u32) -> Backoff {
        Backoff { factor, ..self }
    }

    /// The first pause.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The longest pause.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// How much each pause grows over the one before.
    pub const fn factor(&self) -> u32 {
        self.factor
    }

    /// The pause before retry number `retry` (from 1; `0` counts as 1): `base × factor^(retry −
    /// 1)`, at most `cap`. Never overflows: a product beyond `Duration`'s range is the cap.
    pub fn pause(&self, retry: u32) -> Duration {
        let growth = self
            .factor
            .max(1)
            .checked_pow(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(growth).min(self.cap)
    }

    /// [`pause`](Self::pause) spread by `jitter`, a number from 0 to 1 the caller draws
    /// (clamped to that range; NaN counts as 0): from half the pause (at 0) to all of it (at
    /// 1), so that clients failing together do not all try again together, and none waits
    /// less than half its pause.
    pub fn pause_with_jitter(&self, retry: u32, jitter: f64) -> Duration {
        let pause = self.pause(retry);
        let jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        let half = pause / 2;
        // At most the pause, whatever f64's rounding does to the largest durations.
        half.saturating_add((pause - half).mul_f64(jitter))
            .min(pause)
    }

    /// A count of failures that starts at none.
    pub const fn retries(self) -> Retries {
        Retries {
            backoff: self,
            failures: 0,
        }
    }
}

/// One run of failures: each [`next_pause`](Self::next_pause) counts a failure and gives the
/// pause before the next try; [`reset`](Self::reset) after a success starts over from the
/// base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retries {
    backoff: Backoff,
    failures: u32,
}

impl Retries {
    /// Counts a failure; the pause before the next try.
    pub fn next_pause(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff.pause(self.failures)
    }

    /// The failures counted since the start or the last [`reset`](Self::reset).
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// Starts over: the next pause is the base.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn pauses_double_from_the_base_up_to_the_cap() {
        let b = Backoff::new(ms(100), ms(350));
        let pauses: Vec<Duration> = (1..=5).map(|r| b.pause(r)).collect();
        assert_eq!(pauses, [ms(100), ms(200), ms(350), ms(350), ms(350)]);
        assert_eq!(b.pause(0), ms(100));
        assert_eq!(b.pause(u32::MAX), ms(350));
    }

    #[test]
    fn another_factor_and_degenerate_ones() {
        let b = Backoff::new(ms(10), Duration::from_secs(10)).with_factor(3);
        let pauses: Vec<Duration> = (1..=4).map(|r| b.pause(r)).collect();
        assert_eq!(pauses, [ms(10), ms(30), ms(90), ms(270)]);
        for factor in [0, 1] {
            let flat = Backoff::new(ms(10), ms(50)).with_factor(factor);
            assert_eq!(flat.pause(7), ms(10));
        }
        // A cap below the base wins.
        assert_eq!(Backoff::new(ms(100), ms(20)).pause(1), ms(20));
    }

    #[test]
    fn no_overflow_at_the_edges() {
        let b = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(b.pause(40), Duration::MAX);
        let b =
            Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX).with_factor(u32::MAX);
        assert_eq!(b.pause(3), Duration::MAX);
        assert_eq!(
            Backoff::new(Duration::ZERO, ms(5)).pause(30),
            Duration::ZERO
        );
    }

    #[test]
    fn jitter_spreads_from_half_to_all_of_the_pause() {
        let b = Backoff::new(ms(100), ms(1000));
        assert_eq!(b.pause_with_jitter(2, 0.0), ms(100));
        assert_eq!(b.pause_with_jitter(2, 0.5), ms(150));
        assert_eq!(b.pause_with_jitter(2, 1.0), ms(200));
        assert_eq!(b.pause_with_jitter(2, 7.0), ms(200));
        assert_eq!(b.pause_with_jitter(2, -1.0), ms(100));
        assert_eq!(b.pause_with_jitter(2, f64::NAN), ms(100));
        assert_eq!(
            Backoff::new(Duration::MAX, Duration::MAX).pause_with_jitter(1, 1.0),
            Duration::MAX
        );
    }

    #[test]
    fn retries_count_failures_and_start_over_after_a_success() {
        let mut r = Backoff::new(ms(20), ms(160)).retries();
        assert_eq!(r.failures(), 0);
        let pauses: Vec<Duration> = (0..5).map(|_| r.next_pause()).collect();
        assert_eq!(pauses, [ms(20), ms(40), ms(80), ms(160), ms(160)]);
        assert_eq!(r.failures(), 5);
        r.reset();
        assert_eq!(r.next_pause(), ms(20));
    }
}
