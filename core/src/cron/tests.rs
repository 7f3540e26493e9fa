use super::*;
use chrono::{NaiveDateTime, Timelike};
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn zone(s: &str) -> JobTimeZone {
    JobTimeZone::parse(s).unwrap()
}

/// Quartz's reference start: Sunday 2026-11-22 06:00:00 UTC.
fn start() -> DateTime<Utc> {
    utc("2026-11-22T06:00:00Z")
}

fn next_n(expr: &str, after: DateTime<Utc>, tz: &JobTimeZone, n: usize) -> Vec<DateTime<Utc>> {
    CronExpr::parse(expr)
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
        .fires_after(after, tz)
        .take(n)
        .collect()
}

fn times(list: &[&str]) -> Vec<DateTime<Utc>> {
    list.iter().map(|s| utc(s)).collect()
}

/// Whether the local time matches the fields, computed without croner.
fn matches_local(fields: &Fields, t: NaiveDateTime) -> bool {
    let (year, month, day) = (t.year(), t.month(), t.day());
    let last = month_len(year, month).unwrap();
    let weekday = t.weekday().number_from_sunday(); // 1 = SUN, as Quartz
    let day_ok = match &fields.day_of_month {
        DayOfMonth::NoSpec => match &fields.day_of_week {
            DayOfWeek::NoSpec => unreachable!(),
            DayOfWeek::Days(days) => days.contains(&weekday),
            DayOfWeek::Last(d) => *d == weekday && day + 7 > last,
            DayOfWeek::Nth(d, k) => *d == weekday && (day - 1) / 7 + 1 == *k,
        },
        DayOfMonth::Days(days) => days.contains(&day),
        DayOfMonth::Last(l) => l.day_in(year, month) == Some(day),
        DayOfMonth::NearestWeekday(n) => {
            *n <= last && nearest_weekday(year, month, *n, last) == Some(day)
        }
    };
    day_ok
        && fields.seconds.contains(&t.second())
        && fields.minutes.contains(&t.minute())
        && fields.hours.contains(&t.hour())
        && fields.months.contains(&month)
        && fields
            .years
            .as_ref()
            .is_none_or(|y| u32::try_from(year).is_ok_and(|y2| y.contains(&y2)))
}

fn parse_err(expr: &str) -> CronError {
    match CronExpr::parse(expr) {
        Ok(c) => panic!("{expr} parsed as {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn quartz_ground_truth() {
    // Quartz 2.3.2, next 3 fire times after 2026-11-22T06:00:00Z in UTC.
    let cases: &[(&str, [&str; 3])] = &[
        (
            "0/5 * * * * ?",
            [
                "2026-11-22T06:00:05Z",
                "2026-11-22T06:00:10Z",
                "2026-11-22T06:00:15Z",
            ],
        ),
        (
            "0 0 12 ? * WED",
            [
                "2026-11-25T12:00:00Z",
                "2026-12-02T12:00:00Z",
                "2026-12-09T12:00:00Z",
            ],
        ),
        (
            "0 15 10 L * ?",
            [
                "2026-11-30T10:15:00Z",
                "2026-12-31T10:15:00Z",
                "2027-01-31T10:15:00Z",
            ],
        ),
        (
            "0 15 10 ? * 6L",
            [
                "2026-11-27T10:15:00Z",
                "2026-12-25T10:15:00Z",
                "2027-01-29T10:15:00Z",
            ],
        ),
        (
            "0 15 10 ? * 6#3",
            [
                "2026-12-18T10:15:00Z",
                "2027-01-15T10:15:00Z",
                "2027-02-19T10:15:00Z",
            ],
        ),
        (
            "0 0/30 8-10 * * ?",
            [
                "2026-11-22T08:00:00Z",
                "2026-11-22T08:30:00Z",
                "2026-11-22T09:00:00Z",
            ],
        ),
        (
            "0 0 12 * * ? 2027",
            [
                "2027-01-01T12:00:00Z",
                "2027-01-02T12:00:00Z",
                "2027-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 15W * ?",
            [
                "2026-12-15T12:00:00Z",
                "2027-01-15T12:00:00Z",
                "2027-02-15T12:00:00Z",
            ],
        ),
        (
            "0 0 12 LW * ?",
            [
                "2026-11-30T12:00:00Z",
                "2026-12-31T12:00:00Z",
                "2027-01-29T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-3 * ?",
            [
                "2026-11-27T12:00:00Z",
                "2026-12-28T12:00:00Z",
                "2027-01-28T12:00:00Z",
            ],
        ),
        (
            "0 0 12 1/5 * ?",
            [
                "2026-11-26T12:00:00Z",
                "2026-12-01T12:00:00Z",
                "2026-12-06T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 2",
            [
                "2026-11-23T12:00:00Z",
                "2026-11-30T12:00:00Z",
                "2026-12-07T12:00:00Z",
            ],
        ),
    ];
    for (expr, expected) in cases {
        assert_eq!(
            next_n(expr, start(), &JobTimeZone::utc(), 3),
            times(expected),
            "{expr}"
        );
    }
    for expr in ["0 0 12 * * *", "0 0 12 1 * MON"] {
        assert!(
            matches!(parse_err(expr), CronError::DayFields { .. }),
            "{expr}"
        );
    }
}

#[test]
fn quartz_oracle_more() {
    // Also computed with the Quartz 2.3.2 jar, same start and zone.
    let cases: &[(&str, [&str; 3])] = &[
        (
            "0\t0\t12\t*\t*\t?",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-23T12:00:00Z",
                "2026-11-24T12:00:00Z",
            ],
        ),
        (
            "0 0 12 * * ? */5",
            [
                "2030-01-01T12:00:00Z",
                "2030-01-02T12:00:00Z",
                "2030-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 * * ? 2020/5",
            [
                "2030-01-01T12:00:00Z",
                "2030-01-02T12:00:00Z",
                "2030-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 * * ? 2099",
            [
                "2099-01-01T12:00:00Z",
                "2099-01-02T12:00:00Z",
                "2099-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 /5 * ?",
            [
                "2026-11-26T12:00:00Z",
                "2026-12-01T12:00:00Z",
                "2026-12-06T12:00:00Z",
            ],
        ),
        (
            "0 0 12 1 1/12 ?",
            [
                "2027-01-01T12:00:00Z",
                "2028-01-01T12:00:00Z",
                "2029-01-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 1 NOV-FEB ?",
            [
                "2026-12-01T12:00:00Z",
                "2027-01-01T12:00:00Z",
                "2027-02-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 1/31 * ?",
            [
                "2026-12-01T12:00:00Z",
                "2027-01-01T12:00:00Z",
                "2027-02-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 1W * ?",
            [
                "2026-12-01T12:00:00Z",
                "2027-01-01T12:00:00Z",
                "2027-02-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 25-5 * ?",
            [
                "2026-11-25T12:00:00Z",
                "2026-11-26T12:00:00Z",
                "2026-11-27T12:00:00Z",
            ],
        ),
        (
            "0 0 12 28/5 * ?",
            [
                "2026-11-28T12:00:00Z",
                "2026-12-28T12:00:00Z",
                "2027-01-28T12:00:00Z",
            ],
        ),
        (
            "0 0 12 31W * ?",
            [
                "2026-12-31T12:00:00Z",
                "2027-01-29T12:00:00Z",
                "2027-03-31T12:00:00Z",
            ],
        ),
        (
            "0 0 12 5-5 * ?",
            [
                "2026-12-05T12:00:00Z",
                "2027-01-05T12:00:00Z",
                "2027-02-05T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * */2",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-24T12:00:00Z",
                "2026-11-26T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * /3",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-25T12:00:00Z",
                "2026-11-28T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 1/7",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-29T12:00:00Z",
                "2026-12-06T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 1L",
            [
                "2026-11-29T12:00:00Z",
                "2026-12-27T12:00:00Z",
                "2027-01-31T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 2-6/2",
            [
                "2026-11-23T12:00:00Z",
                "2026-11-25T12:00:00Z",
                "2026-11-27T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 6#5",
            [
                "2027-01-29T12:00:00Z",
                "2027-04-30T12:00:00Z",
                "2027-07-30T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * 7-1",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-28T12:00:00Z",
                "2026-11-29T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * FRI-MON",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-23T12:00:00Z",
                "2026-11-27T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * FRIL",
            [
                "2026-11-27T12:00:00Z",
                "2026-12-25T12:00:00Z",
                "2027-01-29T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * L",
            [
                "2026-11-28T12:00:00Z",
                "2026-12-05T12:00:00Z",
                "2026-12-12T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * SUN-SAT",
            [
                "2026-11-22T12:00:00Z",
                "2026-11-23T12:00:00Z",
                "2026-11-24T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * fri#3",
            [
                "2026-12-18T12:00:00Z",
                "2027-01-15T12:00:00Z",
                "2027-02-19T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? * mon",
            [
                "2026-11-23T12:00:00Z",
                "2026-11-30T12:00:00Z",
                "2026-12-07T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? JAN-MAR *",
            [
                "2027-01-01T12:00:00Z",
                "2027-01-02T12:00:00Z",
                "2027-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 ? jan,Mar *",
            [
                "2027-01-01T12:00:00Z",
                "2027-01-02T12:00:00Z",
                "2027-01-03T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-0 * ?",
            [
                "2026-11-30T12:00:00Z",
                "2026-12-31T12:00:00Z",
                "2027-01-31T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-15W 2 ?",
            [
                "2027-02-12T12:00:00Z",
                "2028-02-14T12:00:00Z",
                "2029-02-13T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-27W 2 ?",
            [
                "2027-02-01T12:00:00Z",
                "2028-02-02T12:00:00Z",
                "2029-02-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-28 2 ?",
            [
                "2028-02-01T12:00:00Z",
                "2032-02-01T12:00:00Z",
                "2036-02-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-30 * ?",
            [
                "2026-12-01T12:00:00Z",
                "2027-01-01T12:00:00Z",
                "2027-03-01T12:00:00Z",
            ],
        ),
        (
            "0 0 12 L-3W * ?",
            [
                "2026-11-27T12:00:00Z",
                "2026-12-28T12:00:00Z",
                "2027-01-28T12:00:00Z",
            ],
        ),
        (
            "0 0 22-2 * * ?",
            [
                "2026-11-22T22:00:00Z",
                "2026-11-22T23:00:00Z",
                "2026-11-23T00:00:00Z",
            ],
        ),
        (
            "0 0 5/23 * * ?",
            [
                "2026-11-23T05:00:00Z",
                "2026-11-24T05:00:00Z",
                "2026-11-25T05:00:00Z",
            ],
        ),
        (
            "0 0/59 * * * ?",
            [
                "2026-11-22T06:59:00Z",
                "2026-11-22T07:00:00Z",
                "2026-11-22T07:59:00Z",
            ],
        ),
        (
            "50-10/5 0 0 * * ?",
            [
                "2026-11-23T00:00:00Z",
                "2026-11-23T00:00:05Z",
                "2026-11-23T00:00:10Z",
            ],
        ),
    ];
    for (expr, expected) in cases {
        assert_eq!(
            next_n(expr, start(), &JobTimeZone::utc(), 3),
            times(expected),
            "{expr}"
        );
    }
}

#[test]
fn last_day_offsets_follow_the_month() {
    // `L-n` for every n against Quartz's rule: n days before the last day, and no fire in
    // a month where that is before the 1st.
    for n in 0..=30u32 {
        let expr = format!("0 0 12 L-{n} * ?");
        let fired = next_n(&expr, utc("2026-01-01T00:00:00Z"), &JobTimeZone::utc(), 24);
        let mut expected = Vec::new();
        for (year, month) in (2026..2030).flat_map(|y| (1..=12).map(move |m| (y, m))) {
            let last = month_len(year, month).unwrap();
            if n < last {
                expected.push(
                    Utc.with_ymd_and_hms(year, month, last - n, 12, 0, 0)
                        .unwrap(),
                );
            }
        }
        expected.truncate(24);
        assert_eq!(fired, expected, "{expr}");
    }
}

#[test]
fn last_day_offset_in_a_zone_with_daylight_saving() {
    // 2026-03-29 is the 3rd-to-last day of March and Berlin's spring-forward day.
    let berlin = zone("Europe/Berlin");
    assert_eq!(
        next_n("0 0 12 L-2 * ?", utc("2026-03-01T00:00:00Z"), &berlin, 2),
        times(&["2026-03-29T10:00:00Z", "2026-04-28T10:00:00Z"])
    );
    // Every second of the day: the search skips non-matching candidate days whole.
    assert_eq!(
        next_n("* * * L-2 * ?", utc("2026-03-27T12:00:00Z"), &berlin, 2),
        times(&["2026-03-28T23:00:00Z", "2026-03-28T23:00:01Z"])
    );
    let last = CronExpr::parse("* * * L-2 * ?")
        .unwrap()
        .next_after(utc("2026-03-29T21:59:58Z"), &berlin);
    assert_eq!(last, Some(utc("2026-03-29T21:59:59Z")));
    assert_eq!(
        CronExpr::parse("* * * L-2 * ?")
            .unwrap()
            .next_after(utc("2026-03-29T21:59:59Z"), &berlin),
        Some(utc("2026-04-27T22:00:00Z"))
    );
}

#[test]
fn time_zones() {
    let after = utc("2026-07-01T00:00:00Z");
    for tz in ["Asia/Shanghai", "GMT+08:00", "GMT+8"] {
        assert_eq!(
            next_n("0 0 9 * * ?", after, &zone(tz), 2),
            times(&["2026-07-01T01:00:00Z", "2026-07-02T01:00:00Z"]),
            "{tz}"
        );
    }
    assert_eq!(
        next_n("0 30 9 * * ?", after, &zone("GMT-0330"), 1),
        times(&["2026-07-01T13:00:00Z"])
    );
    // The local date decides the day fields: Monday 09:00 in Shanghai is Monday 01:00 UTC,
    // and Monday 02:00 in Shanghai is Sunday 18:00 UTC.
    assert_eq!(
        next_n("0 0 2 ? * MON", start(), &zone("Asia/Shanghai"), 1),
        times(&["2026-11-22T18:00:00Z"])
    );
}

#[test]
fn daily_job_keeps_local_time_across_daylight_saving() {
    let new_york = zone("America/New_York");
    // Spring forward on 2026-03-08, fall back on 2026-11-01.
    assert_eq!(
        next_n("0 0 9 * * ?", utc("2026-03-07T00:00:00Z"), &new_york, 2),
        times(&["2026-03-07T14:00:00Z", "2026-03-08T13:00:00Z"])
    );
    assert_eq!(
        next_n("0 0 9 * * ?", utc("2026-10-31T00:00:00Z"), &new_york, 2),
        times(&["2026-10-31T13:00:00Z", "2026-11-01T14:00:00Z"])
    );
    let berlin = zone("Europe/Berlin");
    // Spring forward on 2026-03-29, fall back on 2026-10-25.
    assert_eq!(
        next_n("0 0 9 * * ?", utc("2026-03-28T00:00:00Z"), &berlin, 2),
        times(&["2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z"])
    );
    assert_eq!(
        next_n("0 0 9 * * ?", utc("2026-10-24T00:00:00Z"), &berlin, 2),
        times(&["2026-10-24T07:00:00Z", "2026-10-25T08:00:00Z"])
    );
}

#[test]
fn fixed_time_in_the_spring_forward_gap_fires_when_the_gap_ends() {
    // 02:30 does not exist on 2026-03-08 in New York (02:00 EST -> 03:00 EDT): the job
    // fires at 03:00 EDT. Quartz 2.3.2 skips that day (checked with the Quartz jar).
    assert_eq!(
        next_n(
            "0 30 2 * * ?",
            utc("2026-03-07T12:00:00Z"),
            &zone("America/New_York"),
            2
        ),
        times(&["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"])
    );
    assert_eq!(
        next_n(
            "0 30 2 * * ?",
            utc("2026-03-28T12:00:00Z"),
            &zone("Europe/Berlin"),
            2
        ),
        times(&["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"])
    );
    // An interval job has no fire times inside the gap.
    assert_eq!(
        next_n(
            "0 0/30 * * * ?",
            utc("2026-03-08T06:00:00Z"),
            &zone("America/New_York"),
            3
        ),
        times(&[
            "2026-03-08T06:30:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:30:00Z"
        ])
    );
}

#[test]
fn repeated_hour_when_the_clock_falls_back() {
    let new_york = zone("America/New_York");
    // 01:30 happens twice on 2026-11-01 (EDT, then EST): a fixed-time job fires once,
    // at the first.
    assert_eq!(
        next_n("0 30 1 * * ?", utc("2026-11-01T04:00:00Z"), &new_york, 2),
        times(&["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"])
    );
    // An interval job fires in both passes.
    assert_eq!(
        next_n("0 0/30 * * * ?", utc("2026-11-01T04:00:00Z"), &new_york, 6),
        times(&[
            "2026-11-01T04:30:00Z",
            "2026-11-01T05:00:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T06:00:00Z",
            "2026-11-01T06:30:00Z",
            "2026-11-01T07:00:00Z",
        ])
    );
}

#[test]
fn strictly_after() {
    let every_5s = CronExpr::parse("0/5 * * * * ?").unwrap();
    let tz = JobTimeZone::utc();
    let on = utc("2026-11-22T06:00:05Z");
    assert_eq!(
        every_5s.next_after(on, &tz),
        Some(utc("2026-11-22T06:00:10Z"))
    );
    let fraction = utc("2026-11-22T06:00:04.999Z");
    assert_eq!(every_5s.next_after(fraction, &tz), Some(on));
    let past = utc("2026-11-22T06:00:05.001Z");
    assert_eq!(
        every_5s.next_after(past, &tz),
        Some(utc("2026-11-22T06:00:10Z"))
    );
}

#[test]
fn expressions_that_never_fire() {
    let tz = JobTimeZone::utc();
    for expr in [
        "0 0 0 30 2 ?",
        "0 0 0 31 4,6,9,11 ?",
        "0 0 0 31W 2 ?",
        "0 0 0 L-30 2 ?",
        "0 0 12 * * ? 2025",
        "0 0 12 * * ? 1970",
        "0 0 0 29 2 ? 2027",
        "0 0 0 L-28 2 ? 2027,2029,2031",
        "0 0 12 ? 2 2#5 2027",
    ] {
        let cron = CronExpr::parse(expr).unwrap();
        assert_eq!(cron.next_after(start(), &tz), None, "{expr}");
        assert_eq!(cron.fires_after(start(), &tz).count(), 0, "{expr}");
    }
    // The last fire time of a bounded year range ends the iterator.
    let cron = CronExpr::parse("0 0 12 31 12 ? 2026-2027").unwrap();
    let all: Vec<_> = cron.fires_after(start(), &tz).collect();
    assert_eq!(
        all,
        times(&["2026-12-31T12:00:00Z", "2027-12-31T12:00:00Z"])
    );
}

#[test]
fn extreme_instants_do_not_panic() {
    for tz in [
        "UTC",
        "Asia/Shanghai",
        "GMT+14",
        "GMT-12",
        "America/New_York",
    ] {
        let tz = zone(tz);
        for expr in [
            "* * * * * ?",
            "0 0 12 L-3 * ?",
            "0 0 0 ? * 6#5",
            "0 0 0 1 1 ? 2099",
        ] {
            let cron = CronExpr::parse(expr).unwrap();
            assert_eq!(
                cron.next_after(DateTime::<Utc>::MAX_UTC, &tz),
                None,
                "{expr}"
            );
            let _ = cron.next_after(DateTime::<Utc>::MIN_UTC, &tz);
        }
    }
}

#[test]
fn five_fields_get_a_hint() {
    let err = parse_err("*/5 * * * *");
    assert!(matches!(err, CronError::FieldCount { found: 5, .. }));
    let message = err.to_string();
    assert!(
        message.contains(
            "expected 6 or 7 fields (seconds minutes hours day-of-month month day-of-week \
             [year]), found 5"
        ),
        "{message}"
    );
    assert!(message.contains("seconds field"), "{message}");
    assert!(matches!(
        parse_err("0 0 12 * * ? 2027 extra"),
        CronError::FieldCount { found: 8, .. }
    ));
    assert!(matches!(
        parse_err("0"),
        CronError::FieldCount { found: 1, .. }
    ));
}

#[test]
fn day_fields_must_have_exactly_one_question_mark() {
    let message = parse_err("0 0 12 1 * MON").to_string();
    assert!(
        message.contains("day-of-month `1`") && message.contains("day-of-week `MON`"),
        "{message}"
    );
    let message = parse_err("0 0 12 ? * ?").to_string();
    assert!(message.contains("both `?`"), "{message}");
}

#[test]
fn invalid_fields_name_the_field_and_token() {
    let cases: &[(&str, CronField, &str)] = &[
        ("60 * * * * ?", CronField::Seconds, "60"),
        ("0/0 * * * * ?", CronField::Seconds, "0/0"),
        ("1-5/0 * * * * ?", CronField::Seconds, "1-5/0"),
        ("0/60 * * * * ?", CronField::Seconds, "0/60"),
        ("0 60 12 * * ?", CronField::Minutes, "60"),
        ("0 */90 12 * * ?", CronField::Minutes, "*/90"),
        ("0 0 24 * * ?", CronField::Hours, "24"),
        ("0 0 0/24 * * ?", CronField::Hours, "0/24"),
        ("0 0 1- * * ?", CronField::Hours, "1-"),
        ("0 0 1-2-3 * * ?", CronField::Hours, "1-2-3"),
        ("0 0 x * * ?", CronField::Hours, "x"),
        ("0 0 12 0 * ?", CronField::DayOfMonth, "0"),
        ("0 0 12 32 * ?", CronField::DayOfMonth, "32"),
        ("0 0 12 1/32 * ?", CronField::DayOfMonth, "1/32"),
        ("0 0 12 32W * ?", CronField::DayOfMonth, "32W"),
        ("0 0 12 0W * ?", CronField::DayOfMonth, "0W"),
        ("0 0 12 L-31 * ?", CronField::DayOfMonth, "L-31"),
        ("0 0 12 L,5 * ?", CronField::DayOfMonth, "L,5"),
        ("0 0 12 15W,20 * ?", CronField::DayOfMonth, "15W,20"),
        ("0 0 12 1-15W * ?", CronField::DayOfMonth, "1-15W"),
        ("0 0 12 5L * ?", CronField::DayOfMonth, "5L"),
        ("0 0 12 LW-1 * ?", CronField::DayOfMonth, "LW-1"),
        ("0 0 12 W * ?", CronField::DayOfMonth, "W"),
        ("0 0 12 1#2 * ?", CronField::DayOfMonth, "1#2"),
        ("0 0 12 1,,2 * ?", CronField::DayOfMonth, "1,,2"),
        ("0 0 12 1, * ?", CronField::DayOfMonth, "1,"),
        ("0 0 12 * 0 ?", CronField::Month, "0"),
        ("0 0 12 * 13 ?", CronField::Month, "13"),
        ("0 0 12 * 1/13 ?", CronField::Month, "1/13"),
        ("0 0 12 * JANUARY ?", CronField::Month, "JANUARY"),
        ("0 0 12 * JAN-DEC/2 ?", CronField::Month, "JAN-DEC/2"),
        ("0 0 12 * L ?", CronField::Month, "L"),
        ("0 0 12 ? * 0", CronField::DayOfWeek, "0"),
        ("0 0 12 ? * 8", CronField::DayOfWeek, "8"),
        ("0 0 12 ? * 1/8", CronField::DayOfWeek, "1/8"),
        ("0 0 12 ? * 5#0", CronField::DayOfWeek, "5#0"),
        ("0 0 12 ? * 5#6", CronField::DayOfWeek, "5#6"),
        ("0 0 12 ? * 5#1#2", CronField::DayOfWeek, "5#1#2"),
        ("0 0 12 ? * 3L,5", CronField::DayOfWeek, "3L,5"),
        ("0 0 12 ? * 2#1,4", CronField::DayOfWeek, "2#1,4"),
        ("0 0 12 ? * L-2", CronField::DayOfWeek, "L-2"),
        ("0 0 12 ? * 15W", CronField::DayOfWeek, "15W"),
        ("0 0 12 ? * MONDAY", CronField::DayOfWeek, "MONDAY"),
        ("0 0 12 ? * MON-FRI/2", CronField::DayOfWeek, "MON-FRI/2"),
        ("0 0 12 ? * MON/2", CronField::DayOfWeek, "MON/2"),
        ("0 0 12 ? * 2-FRI", CronField::DayOfWeek, "2-FRI"),
        ("0 0 12 ? * MON-6", CronField::DayOfWeek, "MON-6"),
        ("0 0 12 * * ? 1969", CronField::Year, "1969"),
        ("0 0 12 * * ? 2100", CronField::Year, "2100"),
        ("0 0 12 * * ? 2030-2028", CronField::Year, "2030-2028"),
        ("0 0 12 * * ? 99999999999", CronField::Year, "99999999999"),
        ("? 0 12 * * ?", CronField::Seconds, "?"),
        ("0 0 12 * * ? ?", CronField::Year, "?"),
        ("0 0 12 * ? ?", CronField::Month, "?"),
        ("0 5L 12 * * ?", CronField::Minutes, "5L"),
        ("0 0 3W * * ?", CronField::Hours, "3W"),
        ("1#1 0 12 * * ?", CronField::Seconds, "1#1"),
    ];
    for (expr, field, token) in cases {
        match parse_err(expr) {
            CronError::InvalidField {
                field: f,
                token: t,
                ref reason,
                ..
            } => {
                assert_eq!((f, t.as_str()), (*field, *token), "{expr}: {reason}");
                let message = parse_err(expr).to_string();
                assert!(
                    message.contains(field.name()) && message.contains(token),
                    "{expr}: {message}"
                );
            }
            other => panic!("{expr}: unexpected {other:?}"),
        }
    }
}

#[test]
fn garbage_empty_and_long_input() {
    assert_eq!(parse_err(""), CronError::Empty);
    assert_eq!(parse_err(" \t\n "), CronError::Empty);
    for garbage in [
        "hello world",
        "@daily",
        "* * * * * ? * * *",
        "0 0 12 * * ？",
        "0 0 12 * * ? ä",
        "💥 0 12 * * ?",
        "- - - - - -",
        "/ / / / / /",
        ", , , , , ,",
    ] {
        let _ = parse_err(garbage);
    }
    let long = format!("0 0 12 * * ? {}", "2027,".repeat(1000));
    let err = parse_err(&long);
    assert!(matches!(err, CronError::TooLong { .. }), "{err:?}");
    assert!(err.to_string().len() < 300, "{err}");
    let long_token = format!("0 0 12 * * ? {}", "9".repeat(900));
    let message = parse_err(&long_token).to_string();
    assert!(message.len() < 600, "{message}");
}

#[test]
fn text_round_trips() {
    let cron: CronExpr = "  0 15 10 ? * 6L \n".parse().unwrap();
    assert_eq!(cron.as_str(), "0 15 10 ? * 6L");
    assert_eq!(cron.to_string(), "0 15 10 ? * 6L");
    assert_eq!(format!("{cron:?}"), r#"CronExpr("0 15 10 ? * 6L")"#);
    assert_eq!(CronExpr::parse(&cron.to_string()).unwrap(), cron);
    assert_ne!(CronExpr::parse("0 15 10 ? * FRIL").unwrap(), cron);
    assert_eq!(String::from(cron.clone()), "0 15 10 ? * 6L");
    assert_eq!(CronExpr::try_from("0 15 10 ? * 6L").unwrap(), cron);
}

#[test]
fn serde_uses_the_text() {
    let cron = CronExpr::parse("0 0/5 * * * ?").unwrap();
    assert_eq!(
        serde_yaml_ng::to_string(&cron).unwrap().trim(),
        "0 0/5 * * * ?"
    );
    let back: CronExpr = serde_yaml_ng::from_str("0 0/5 * * * ?").unwrap();
    assert_eq!(back, cron);
    let err = serde_yaml_ng::from_str::<CronExpr>("0 0 12 * * *").unwrap_err();
    assert!(err.to_string().contains("day-of-week"), "{err}");
}

#[test]
fn iterator_is_fused_and_increasing() {
    let tz = zone("Europe/Berlin");
    let cron = CronExpr::parse("0 0/20 1-3 * * ? 2026").unwrap();
    let all: Vec<_> = cron.fires_after(utc("2026-12-30T00:00:00Z"), &tz).collect();
    // From 01:00 local on the 30th (excluded) to 03:40 on the 31st.
    assert_eq!(all.len(), 8 + 9);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let mut it = cron.fires_after(utc("2026-12-31T02:40:00Z"), &tz);
    assert_eq!(it.next(), None);
    assert_eq!(it.next(), None);
}

/// One item of a plain list field between `min` and `max`.
fn item(min: u32, max: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_owned()),
        (min..=max).prop_map(|v| v.to_string()),
        (min..=max, min..=max).prop_map(|(a, b)| format!("{a}-{b}")),
        (min..=max, 1..=(max - min).max(1)).prop_map(|(a, s)| format!("{a}/{s}")),
        (min..=max, min..=max, 1..=(max - min).max(1)).prop_map(|(a, b, s)| format!("{a}-{b}/{s}")),
        (1..=(max - min).max(1)).prop_map(|s| format!("*/{s}")),
    ]
}

fn plain(min: u32, max: u32) -> impl Strategy<Value = String> {
    prop::collection::vec(item(min, max), 1..3).prop_map(|items| items.join(","))
}

/// Day-of-month and day-of-week, one of them `?`.
fn days() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        plain(1, 31).prop_map(|d| (d, "?".to_owned())),
        Just(("L".to_owned(), "?".to_owned())),
        Just(("LW".to_owned(), "?".to_owned())),
        (0..=30u32, any::<bool>())
            .prop_map(|(n, w)| (format!("L-{n}{}", if w { "W" } else { "" }), "?".to_owned())),
        (1..=31u32).prop_map(|n| (format!("{n}W"), "?".to_owned())),
        plain(1, 7).prop_map(|d| ("?".to_owned(), d)),
        (1..=7u32).prop_map(|d| ("?".to_owned(), format!("{d}L"))),
        (1..=7u32, 1..=5u32).prop_map(|(d, k)| ("?".to_owned(), format!("{d}#{k}"))),
    ]
}

fn expression() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("0".to_owned()), plain(0, 59)],
        plain(0, 59),
        plain(0, 23),
        days(),
        plain(1, 12),
        prop_oneof![
            3 => Just(String::new()),
            1 => (2020..=2040u32, 0..=10u32).prop_map(|(a, n)| format!(" {a}-{}", a + n)),
        ],
    )
        .prop_map(|(s, m, h, (dom, dow), mon, year)| format!("{s} {m} {h} {dom} {mon} {dow}{year}"))
}

fn any_zone() -> impl Strategy<Value = JobTimeZone> {
    prop::sample::select(vec![
        "UTC",
        "GMT+05:30",
        "GMT-8",
        "Asia/Shanghai",
        "America/New_York",
        "Europe/Berlin",
        "Australia/Lord_Howe",
    ])
    .prop_map(zone)
}

fn any_instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2000-01-01 to 2060-01-01, with fractions of a second.
    (946_684_800i64..2_840_140_800, 0u32..1_000_000_000)
        .prop_map(|(s, n)| DateTime::from_timestamp(s, n).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_never_panics(s in "\\PC{0,80}") {
        let _ = CronExpr::parse(&s);
    }

    #[test]
    fn parse_never_panics_on_cron_like_text(s in "[0-9*/?,LW#A-Za-z -]{0,40}") {
        if let Ok(cron) = CronExpr::parse(&s) {
            let _ = cron.next_after(start(), &JobTimeZone::utc());
        }
    }

    #[test]
    fn fire_times_increase_and_match(
        expr in expression(),
        tz in any_zone(),
        after in any_instant(),
    ) {
        let cron = CronExpr::parse(&expr).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let fields = parse_fields(&expr).unwrap();
        let mut previous = after;
        for t in cron.fires_after(after, &tz).take(20) {
            prop_assert!(t > previous, "{expr}: {t} after {previous}");
            prop_assert_eq!(t.nanosecond(), 0);
            let local = tz.to_local(t);
            // A fixed-time job whose time falls into a clock gap fires when the gap ends,
            // where the wall clock shows another time.
            let after_gap = tz.offset_at(t) != tz.offset_at(t - TimeDelta::hours(3));
            prop_assert!(
                matches_local(&fields, local) || after_gap,
                "{expr} in {tz}: {t} (local {local}) does not match"
            );
            // The search from just before a fire time finds it again.
            prop_assert_eq!(cron.next_after(t - TimeDelta::seconds(1), &tz), Some(t));
            previous = t;
        }
    }

    #[test]
    fn no_fire_time_is_skipped(
        s in prop::sample::select(vec!["0", "0,30", "15", "*/20"]),
        rest in (plain(0, 59), plain(0, 23), days(), plain(1, 12)),
        tz in prop::sample::select(vec!["UTC", "GMT+05:30"]).prop_map(zone),
        after in any_instant(),
    ) {
        let (m, h, (dom, dow), mon) = rest;
        let expr = format!("{s} {m} {h} {dom} {mon} {dow}");
        let cron = CronExpr::parse(&expr).unwrap();
        let fields = parse_fields(&expr).unwrap();
        // Brute force over three days, second by second where the seconds field allows.
        let after = after.with_nanosecond(0).unwrap();
        let end = after + TimeDelta::days(3);
        let mut expected = Vec::new();
        let mut minute = after - TimeDelta::seconds(i64::from(after.second()));
        while minute < end {
            for &second in &fields.seconds {
                let t = minute + TimeDelta::seconds(i64::from(second));
                if t > after && t < end && matches_local(&fields, tz.to_local(t)) {
                    expected.push(t);
                }
            }
            minute += TimeDelta::minutes(1);
        }
        let fired: Vec<_> = cron.fires_after(after, &tz).take_while(|t| *t < end).collect();
        prop_assert_eq!(fired, expected, "{}", expr);
    }
}

/// An expression that fires at the same seconds of every hour: seconds and minutes drawn,
/// everything else "every" (written in the ways Quartz allows).
fn hourly_expression() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just("*".to_owned()), Just("0".to_owned()), plain(0, 59)],
        prop_oneof![Just("*".to_owned()), plain(0, 59)],
        prop_oneof![
            Just("*".to_owned()),
            Just("0-23".to_owned()),
            Just("0/1".to_owned())
        ],
        prop_oneof![
            Just(("*", "?")),
            Just(("?", "*")),
            Just(("1-31", "?")),
            Just(("?", "1-7")),
            Just(("?", "SUN-SAT")),
        ],
        prop_oneof![Just("*"), Just("1-12"), Just("JAN-DEC")],
        prop_oneof![Just(""), Just(" *")],
    )
        .prop_map(|(s, m, h, (dom, dow), mon, year)| format!("{s} {m} {h} {dom} {mon} {dow}{year}"))
}

/// Zones whose offset never changes, where the hourly mask answers.
fn constant_zone() -> impl Strategy<Value = JobTimeZone> {
    prop_oneof![
        prop::sample::select(vec!["UTC", "Etc/UTC", "GMT", "Etc/GMT+5", "Etc/GMT-14"])
            .prop_map(zone),
        // Java custom ids, whole minutes from -18:00 to +18:00.
        (-18 * 60..=18 * 60i32).prop_map(|m| {
            let sign = if m < 0 { '-' } else { '+' };
            zone(&format!("GMT{sign}{:02}:{:02}", m.abs() / 60, m.abs() % 60))
        }),
    ]
}

#[test]
fn hourly_expressions_take_the_mask() {
    for expr in [
        "* * * * * ?",
        "0/5 * * * * ?",
        "0 0/15 * * * ?",
        "0 0 * * * ?",
        "0 0 * ? * *",
    ] {
        assert!(CronExpr::parse(expr).unwrap().hourly.is_some(), "{expr}");
    }
    for expr in [
        "0 0 9 * * ?",
        "0 0 * 1 * ?",
        "0 0 * ? * MON",
        "0 0 * * 1 ?",
        "0 0 * * * ? 2030",
        "0 0 * L * ?",
    ] {
        assert!(CronExpr::parse(expr).unwrap().hourly.is_none(), "{expr}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The hourly mask gives croner's answers, fire after fire.
    #[test]
    fn the_hourly_mask_agrees_with_the_search(
        expr in hourly_expression(),
        tz in constant_zone(),
        after in any_instant(),
    ) {
        let cron = CronExpr::parse(&expr).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(cron.hourly.is_some(), "{expr} has no mask");
        let mut at = after;
        for _ in 0..30 {
            let fast = cron.next_after(at, &tz);
            let searched = cron.searched_after(at, at, &tz);
            prop_assert_eq!(fast, searched, "{} in {} after {}", expr, tz, at);
            let Some(next) = fast else { break };
            // Now and then a step into the middle of a second, or past an hour.
            at = next + TimeDelta::milliseconds(i64::from(next.timestamp() as u32 % 7) * 397);
        }
    }
}
