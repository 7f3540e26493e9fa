//! Fuzzes `CronExpr::parse` and the fire-time search.
//!
//! Input: 8 bytes of start instant (seconds since the epoch, little endian, folded into the
//! years 1900-2200), 1 byte choosing the time zone, then the expression text.
#![no_main]

use chrono::{DateTime, TimeDelta, Utc};
use libfuzzer_sys::fuzz_target;
use shardjob_core::{CronExpr, JobTimeZone};

const ZONES: [&str; 7] = [
    "UTC",
    "GMT+05:30",
    "GMT-12",
    "Asia/Shanghai",
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
];

fuzz_target!(|data: &[u8]| {
    let Some((head, text)) = data.split_first_chunk::<9>() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(cron) = CronExpr::parse(text) else {
        return;
    };
    // Display gives the text back, and it parses to the same expression.
    assert_eq!(CronExpr::parse(&cron.to_string()).as_ref(), Ok(&cron));

    let mut seconds = [0u8; 8];
    seconds.copy_from_slice(&head[..8]);
    let span = 300 * 365 * 86_400;
    let seconds = i64::from_le_bytes(seconds).rem_euclid(span) - 70 * 365 * 86_400;
    let Some(after) = DateTime::<Utc>::from_timestamp(seconds, 0) else {
        return;
    };
    let Ok(tz) = JobTimeZone::parse(ZONES[usize::from(head[8]) % ZONES.len()]) else {
        return;
    };
    let mut previous = after;
    for t in cron.fires_after(after, &tz).take(8) {
        assert!(t > previous, "{cron}: {t} is not after {previous}");
        // The search from just before a fire time finds it again.
        assert_eq!(cron.next_after(t - TimeDelta::seconds(1), &tz), Some(t));
        previous = t;
    }
});
