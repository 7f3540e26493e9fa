//! Time as the machine sees it: the driver's monotonic and wall clocks, read by the driver and
//! handed in with every input (the machine reads no clock).

use std::time::Duration;

use chrono::{DateTime, Utc};

/// A point in time as the driver sees it: a monotonic clock for timeouts and leases, and the
/// wall clock for cron. The machine never reads a clock itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Milliseconds of a monotonic clock (any origin; never goes back).
    pub mono: u64,
    /// The wall-clock time, UTC. May jump; only cron uses it.
    pub wall: DateTime<Utc>,
}

impl Now {
    /// The wall time in epoch milliseconds.
    pub fn wall_ms(&self) -> i64 {
        self.wall.timestamp_millis()
    }

    /// The monotonic time at which the wall clock will show `wall`, if it keeps its pace.
    pub fn mono_at(&self, wall_ms: i64) -> u64 {
        let delta = wall_ms.saturating_sub(self.wall_ms());
        if delta <= 0 {
            self.mono
        } else {
            self.mono.saturating_add(delta as u64)
        }
    }
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How far the wall clock (epoch ms) is ahead of the monotonic one.
pub(crate) fn wall_offset(now: Now) -> i64 {
    now.wall_ms()
        .saturating_sub(i64::try_from(now.mono).unwrap_or(i64::MAX))
}

/// Whether a wait of `wait` ms that started at `since` (now, if it has not started yet) is
/// still on; if so, `wake` gets its end.
pub(crate) fn waiting(since: &mut Option<u64>, wait: u64, now: Now, wake: &mut Vec<u64>) -> bool {
    let end = since.get_or_insert(now.mono).saturating_add(wait);
    if now.mono < end {
        wake.push(end);
        return true;
    }
    false
}
