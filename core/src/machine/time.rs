//! Time as the machine sees it: the driver's monotonic and wall clocks, read by the driver and
//! handed in with every input (the machine reads no clock).

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A point of the driver's monotonic clock, in milliseconds from any origin; it never goes
/// back. Timeouts, leases, backoffs and wakes are kept in it. Wall-clock times (fires, records)
/// are epoch milliseconds (`i64`) or [`DateTime`]s: the two cannot be mixed up by accident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Mono(pub u64);

impl Mono {
    /// The end of time: later than any deadline.
    pub const MAX: Mono = Mono(u64::MAX);

    /// The milliseconds since the clock's origin.
    pub const fn ms(self) -> u64 {
        self.0
    }

    /// The point `ms` milliseconds later (saturating).
    #[must_use]
    pub const fn after(self, ms: u64) -> Mono {
        Mono(self.0.saturating_add(ms))
    }

    /// The point `ms` milliseconds earlier (saturating at the origin).
    #[must_use]
    pub const fn before(self, ms: u64) -> Mono {
        Mono(self.0.saturating_sub(ms))
    }

    /// The milliseconds from `earlier` to this point; 0 if `earlier` is not earlier.
    pub const fn since(self, earlier: Mono) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Mono {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// A point in time as the driver sees it: a monotonic clock for timeouts and leases, and the
/// wall clock for cron. The machine never reads a clock itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// The monotonic clock.
    pub mono: Mono,
    /// The wall-clock time, UTC. May jump; only cron uses it.
    pub wall: DateTime<Utc>,
}

impl Now {
    /// The wall time in epoch milliseconds.
    pub fn wall_ms(&self) -> i64 {
        self.wall.timestamp_millis()
    }

    /// The monotonic time at which the wall clock will show `wall`, if it keeps its pace.
    pub fn mono_at(&self, wall_ms: i64) -> Mono {
        let delta = wall_ms.saturating_sub(self.wall_ms());
        if delta <= 0 {
            self.mono
        } else {
            self.mono.after(delta as u64)
        }
    }
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How far the wall clock (epoch ms) is ahead of the monotonic one.
pub(crate) fn wall_offset(now: Now) -> i64 {
    now.wall_ms()
        .saturating_sub(i64::try_from(now.mono.ms()).unwrap_or(i64::MAX))
}

/// Whether a wait of `wait` ms that started at `since` (now, if it has not started yet) is
/// still on; if so, `wake` gets its end.
pub(crate) fn waiting(since: &mut Option<Mono>, wait: u64, now: Now, wake: &mut Vec<Mono>) -> bool {
    let end = since.get_or_insert(now.mono).after(wait);
    if now.mono < end {
        wake.push(end);
        return true;
    }
    false
}
