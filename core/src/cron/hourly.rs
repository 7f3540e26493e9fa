//! The fire times of an expression that repeats every hour, found without a calendar search.
//!
//! An expression whose hours, days of the month, months, days of the week and years are all
//! "every" (`* * * * * ?`, `0/5 * * * * ?`, `0 0/15 * * * ?`, `0 0 * * * ?`) fires at the same
//! seconds of every local hour. Where the zone's offset from UTC never changes (UTC, the `Etc/`
//! zones, ElasticJob's `GMT±hh:mm` ids), those are fixed seconds of every UTC hour shifted by
//! the offset, so the next fire is the next set bit of a 3,600-bit mask: no date arithmetic,
//! no time-zone lookups. Most jobs' crons are of this kind, and every instance asks for the
//! next fire of each of its jobs at every fire; croner's calendar search costs some thousands
//! of instructions an answer.
//!
//! The answers are croner's (a property test in `cron/tests.rs` compares both for random
//! expressions, instants and offsets); zones whose offset changes keep croner's search, as
//! do all other expressions.

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use crate::time_zone::JobTimeZone;

/// Seconds in an hour.
const HOUR: i64 = 3_600;
/// Words of the mask.
const WORDS: usize = 57;

/// The seconds of the hour (minute × 60 + second) at which an hourly expression fires.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct HourMask {
    bits: [u64; WORDS],
}

impl std::fmt::Debug for HourMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count: u32 = self.bits.iter().map(|w| w.count_ones()).sum();
        write!(f, "HourMask({count} seconds an hour)")
    }
}

impl HourMask {
    /// The mask of the seconds `seconds` of the minutes `minutes` (both 0-59); `None` when
    /// either is empty (such an expression never fires, which croner's search says).
    pub(super) fn new(
        seconds: impl Iterator<Item = u32> + Clone,
        minutes: impl Iterator<Item = u32>,
    ) -> Option<HourMask> {
        let mut bits = [0u64; WORDS];
        let mut any = false;
        for m in minutes.filter(|m| *m < 60) {
            for s in seconds.clone().filter(|s| *s < 60) {
                let at = (m * 60 + s) as usize;
                bits[at / 64] |= 1 << (at % 64);
                any = true;
            }
        }
        any.then_some(HourMask { bits })
    }

    /// Whether second `at` of the hour (0-3599) is set.
    fn has(&self, at: usize) -> bool {
        self.bits[at / 64] & (1 << (at % 64)) != 0
    }

    /// The first set second of the hour at or after `from` (0-3599), if any.
    fn first_from(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        let mut bits = self.bits[word] & (u64::MAX << (from % 64));
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.bits[word];
        }
    }

    /// The first fire strictly after `after` in a zone `offset_s` seconds east of UTC,
    /// whole seconds (a fraction of `after` is ignored, as croner does).
    pub(super) fn next_after(&self, after: DateTime<Utc>, offset_s: i64) -> Option<DateTime<Utc>> {
        let start = after.timestamp().checked_add(1)?.checked_add(offset_s)?;
        let hour_start = start.div_euclid(HOUR) * HOUR;
        let at = start.rem_euclid(HOUR) as usize;
        let local = match self.first_from(at) {
            Some(hit) => hour_start + hit as i64,
            // The mask is never empty: the first set second of the next hour.
            None => hour_start + HOUR + self.first_from(0)? as i64,
        };
        debug_assert!(self.has(local.rem_euclid(HOUR) as usize));
        DateTime::from_timestamp(local.checked_sub(offset_s)?, 0)
    }
}

/// The offset (seconds east of UTC) of `tz` if it never changes, else `None`.
pub(super) fn constant_offset(tz: &JobTimeZone, at: DateTime<Utc>) -> Option<i64> {
    match tz {
        JobTimeZone::Fixed { offset, .. } => Some(i64::from(offset.local_minus_utc())),
        JobTimeZone::Named(zone) if never_changes(*zone) => Some(i64::from(
            zone.offset_from_utc_datetime(&at.naive_utc())
                .fix()
                .local_minus_utc(),
        )),
        JobTimeZone::Named(_) => None,
    }
}

/// Whether the IANA zone has one offset for all time: UTC and its aliases, and the `Etc/`
/// zones (`Etc/GMT+5` and the like), which the database defines as fixed.
fn never_changes(zone: Tz) -> bool {
    let name = zone.name();
    name.starts_with("Etc/")
        || matches!(
            name,
            "UTC" | "UCT" | "GMT" | "GMT0" | "GMT+0" | "GMT-0" | "Greenwich" | "Universal" | "Zulu"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn finds_the_next_second_of_the_mask() {
        // 0/15 * * * * ?: seconds 0, 15, 30, 45 of every minute.
        let m = HourMask::new([0, 15, 30, 45].into_iter(), 0..60).unwrap();
        assert_eq!(
            m.next_after(at("2026-12-01T10:00:00Z"), 0),
            Some(at("2026-12-01T10:00:15Z"))
        );
        assert_eq!(
            m.next_after(at("2026-12-01T10:00:14.900Z"), 0),
            Some(at("2026-12-01T10:00:15Z"))
        );
        assert_eq!(
            m.next_after(at("2026-12-01T10:59:45Z"), 0),
            Some(at("2026-12-01T11:00:00Z"))
        );
    }

    #[test]
    fn wraps_to_the_next_hour_and_shifts_by_the_offset() {
        // 0 30 * * * ?: minute 30 of every hour, in a zone 45 minutes east of UTC (local
        // xx:30 is UTC xx-1:45).
        let m = HourMask::new([0].into_iter(), [30].into_iter()).unwrap();
        assert_eq!(
            m.next_after(at("2026-12-01T09:45:00Z"), 45 * 60),
            Some(at("2026-12-01T10:45:00Z"))
        );
        assert_eq!(
            m.next_after(at("2026-12-01T09:44:59Z"), 45 * 60),
            Some(at("2026-12-01T09:45:00Z"))
        );
        // Before the epoch: the hour is found with Euclid's division.
        assert_eq!(
            m.next_after(at("1969-12-31T23:00:00Z"), 0),
            Some(at("1969-12-31T23:30:00Z"))
        );
    }

    #[test]
    fn an_empty_field_makes_no_mask() {
        assert!(HourMask::new(std::iter::empty(), 0..60).is_none());
        assert!(HourMask::new(0..60, std::iter::empty()).is_none());
    }

    #[test]
    fn only_fixed_zones_have_a_constant_offset() {
        let now = Utc.with_ymd_and_hms(2026, 7, 1, 0, 0, 0).unwrap();
        assert_eq!(constant_offset(&JobTimeZone::utc(), now), Some(0));
        let gmt8 = JobTimeZone::parse("GMT+08:00").unwrap();
        assert_eq!(constant_offset(&gmt8, now), Some(8 * 3_600));
        let etc = JobTimeZone::parse("Etc/GMT+5").unwrap();
        assert_eq!(constant_offset(&etc, now), Some(-5 * 3_600));
        let berlin = JobTimeZone::parse("Europe/Berlin").unwrap();
        assert_eq!(constant_offset(&berlin, now), None);
        // India has kept one offset for decades, but the database says it changed once: not
        // taken for constant.
        let kolkata = JobTimeZone::parse("Asia/Kolkata").unwrap();
        assert_eq!(constant_offset(&kolkata, now), None);
    }
}
