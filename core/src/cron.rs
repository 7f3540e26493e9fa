//! Quartz cron expressions, as ElasticJob (Quartz 2.3.2 `CronExpression`) reads them.
//!
//! [`CronExpr::parse`] checks an expression with Quartz's rules and refuses what Quartz refuses,
//! with a message that names the field and the token; [`CronExpr::next_after`] and
//! [`CronExpr::fires_after`] compute fire times in a job's [`JobTimeZone`]. The search itself is
//! done by the `croner` crate, fed with a canonical pattern built from the checked fields;
//! `L-n` in day-of-month, which croner lacks, is computed here.

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::iter::FusedIterator;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveTime, Offset, TimeDelta, TimeZone, Utc,
};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

use crate::time_zone::JobTimeZone;

/// The longest expression [`CronExpr::parse`] accepts, in bytes (after trimming).
pub const MAX_EXPRESSION_LEN: usize = 1024;

/// The field layout, quoted in error messages.
const LAYOUT: &str = "seconds minutes hours day-of-month month day-of-week [year]";

/// How many characters of an expression an error message quotes.
const QUOTE_LIMIT: usize = 120;

/// Upper bound on the days an `L-n` search looks at before it gives up (see
/// [`CronExpr::next_after`]). An expression that can fire finds its next fire time within a few
/// hundred.
const MAX_DAY_SKIPS: u32 = 20_000;

/// croner searches up to this year (its `YEAR_UPPER_LIMIT`).
const SEARCH_YEAR_LIMIT: i32 = 5000;

/// The longest months can be: February counts 29 days.
const MAX_MONTH_LEN: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// The three-letter month names, January first.
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];

/// The three-letter day names in Quartz order: 1 = SUN ... 7 = SAT.
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// A Quartz cron expression: when a job fires.
///
/// Six or seven fields separated by whitespace:
///
/// | field        | values              | special characters      |
/// |--------------|---------------------|-------------------------|
/// | seconds      | 0-59                | `, - * /`               |
/// | minutes      | 0-59                | `, - * /`               |
/// | hours        | 0-23                | `, - * /`               |
/// | day-of-month | 1-31                | `, - * / ? L W`         |
/// | month        | 1-12 or JAN-DEC     | `, - * /`               |
/// | day-of-week  | 1-7 or SUN-SAT      | `, - * / ? L #`         |
/// | year (opt.)  | 1970-2099           | `, - * /`               |
///
/// As in Quartz: day-of-week counts 1 = SUN to 7 = SAT; exactly one of day-of-month and
/// day-of-week is `?`; `a/n` starts at `a` and steps by `n` to the end of the field; a range
/// whose end is below its start wraps around (`22-2` hours, `FRI-MON`); day-of-month takes
/// `L` (last day), `L-n` (n days before the last day, n 0-30; no fire in a month where that
/// is before the 1st), `LW` (last weekday), `L-nW`, and `nW` (the weekday nearest day n,
/// never leaving the month); day-of-week takes `L` alone (= 7, SAT), `dL` (the last day d of
/// the month: `6L` is the last Friday) and `d#k` (the k-th day d: `6#3` is the third Friday,
/// k 1-5). Names and `L`, `W` are case-insensitive.
///
/// One difference in meaning: `nW` does not fire in a month that has no day n (`31W` in
/// April). Quartz 2.3.2 fires there only when the month's last day is a Friday, an artefact
/// of its lenient calendar. For daylight saving time see [`CronExpr::next_after`].
///
/// Parsing is a little stricter than Quartz, which silently ignores or misreads some input;
/// these are refused with a clear message: a step of 0 (Quartz reads `0/0` as `0`), a step
/// after a name (Quartz reads `MON-FRI/2` as `MON-FRI`), `W`, `L` or `#` inside a list
/// (Quartz uses only one element), empty list items, names longer than three letters
/// (Quartz reads `MONDAY` as `MON`), more than seven fields (Quartz ignores the rest), and
/// years outside 1970-2099 (Quartz accepts them and never fires).
///
/// Equality, hashing and [`Display`](fmt::Display) use the expression text as written (trimmed);
/// serde reads and writes that string.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use shardjob_core::{CronExpr, JobTimeZone};
///
/// let cron = CronExpr::parse("0 15 10 ? * 6L").unwrap(); // last Friday of the month
/// let after = Utc.with_ymd_and_hms(2026, 11, 22, 6, 0, 0).unwrap();
/// let next = cron.next_after(after, &JobTimeZone::utc()).unwrap();
/// assert_eq!(next, Utc.with_ymd_and_hms(2026, 11, 27, 10, 15, 0).unwrap());
/// ```
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CronExpr {
    /// The expression as written, trimmed.
    text: String,
    /// The search engine, compiled from the canonical pattern; shared by clones (croner keeps
    /// a few KB of bit fields per expression, and a job's configuration is cloned often).
    cron: Arc<Cron>,
    /// `L-n` / `L-nW` with n > 0, which croner cannot express: its candidate days are in the
    /// croner pattern, and the hits are filtered here.
    last_day: Option<LastDay>,
    /// The day-of-month and month fields never meet (such as `30 2`, February 30th).
    never: bool,
    /// The seconds of the hour it fires at, when it fires at the same ones every hour of every
    /// day (see [`hourly`]); shared by clones.
    hourly: Option<Arc<hourly::HourMask>>,
}

/// A field of a cron expression, as error messages name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CronField {
    /// The first field, 0-59.
    Seconds,
    /// The second field, 0-59.
    Minutes,
    /// The third field, 0-23.
    Hours,
    /// The fourth field, 1-31.
    DayOfMonth,
    /// The fifth field, 1-12 or JAN-DEC.
    Month,
    /// The sixth field, 1-7 or SUN-SAT.
    DayOfWeek,
    /// The optional seventh field, 1970-2099.
    Year,
}

/// A cron expression that [`CronExpr::parse`] refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression is empty or only whitespace.
    #[error(
        "cron expression is empty: expected 6 or 7 fields ({LAYOUT}), for example `0 0/5 * * * ?`"
    )]
    Empty,
    /// The expression is longer than [`MAX_EXPRESSION_LEN`] bytes.
    #[error(
        "cron expression `{start}` is {len} bytes long: at most {MAX_EXPRESSION_LEN} are accepted"
    )]
    TooLong {
        /// Its length in bytes, after trimming.
        len: usize,
        /// Its first characters.
        start: String,
    },
    /// The expression does not have 6 or 7 fields.
    #[error(
        "cron expression `{expr}`: expected 6 or 7 fields ({LAYOUT}), found {found}{}",
        if *found == 5 {
            "; a 5-field crontab line lacks the seconds field Quartz needs first, and Quartz \
             also needs `?` in day-of-month or day-of-week: `*/5 * * * *` is `0 */5 * * * ?`"
        } else {
            ""
        }
    )]
    FieldCount {
        /// The expression (trimmed, shortened if very long).
        expr: String,
        /// How many fields it has.
        found: usize,
    },
    /// A field holds something Quartz does not accept.
    #[error("cron expression `{expr}`: invalid {field} `{token}`: {reason}")]
    InvalidField {
        /// The expression (trimmed, shortened if very long).
        expr: String,
        /// The field.
        field: CronField,
        /// The offending token: the list item, or the whole field.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Day-of-month and day-of-week are both given, or both `?`: Quartz needs exactly one `?`.
    #[error(
        "cron expression `{expr}`: {}",
        if day_of_month == "?" {
            "day-of-month and day-of-week are both `?`: one of them must choose the days, \
             for example `*` in day-of-month"
                .to_owned()
        } else {
            format!(
                "day-of-month `{day_of_month}` and day-of-week `{day_of_week}` are both given, \
                 but Quartz supports only one of them: put `?` in the other, as in \
                 `0 0 12 {day_of_month} * ?` or `0 0 12 ? * {day_of_week}`"
            )
        }
    )]
    DayFields {
        /// The expression (trimmed, shortened if very long).
        expr: String,
        /// The day-of-month field.
        day_of_month: String,
        /// The day-of-week field.
        day_of_week: String,
    },
    /// The checked expression could not be compiled for the search (a defect of shardjob, not
    /// of the expression: please report it).
    #[error("cron expression `{expr}` could not be compiled for the schedule search: {reason}")]
    Compile {
        /// The expression (trimmed, shortened if very long).
        expr: String,
        /// The search engine's message.
        reason: String,
    },
}

impl CronField {
    /// The field's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            CronField::Seconds => "seconds",
            CronField::Minutes => "minutes",
            CronField::Hours => "hours",
            CronField::DayOfMonth => "day-of-month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day-of-week",
            CronField::Year => "year",
        }
    }

    /// The smallest value.
    fn min(self) -> u32 {
        match self {
            CronField::Seconds | CronField::Minutes | CronField::Hours => 0,
            CronField::DayOfMonth | CronField::Month | CronField::DayOfWeek => 1,
            CronField::Year => 1970,
        }
    }

    /// The largest value.
    fn max(self) -> u32 {
        match self {
            CronField::Seconds | CronField::Minutes => 59,
            CronField::Hours => 23,
            CronField::DayOfMonth => 31,
            CronField::Month => 12,
            CronField::DayOfWeek => 7,
            CronField::Year => 2099,
        }
    }

    /// The largest step Quartz allows (`Increment > 60` and the like), if it has a limit.
    fn max_step(self) -> Option<u32> {
        match self {
            CronField::Year => None,
            other => Some(other.max()),
        }
    }

    /// How a wrapping range (`22-2`) counts round, if it may wrap.
    fn modulus(self) -> Option<u32> {
        match self {
            CronField::Seconds | CronField::Minutes => Some(60),
            CronField::Hours => Some(24),
            CronField::DayOfMonth => Some(31),
            CronField::Month => Some(12),
            CronField::DayOfWeek => Some(7),
            CronField::Year => None,
        }
    }

    /// The accepted values, in words.
    fn range_text(self) -> &'static str {
        match self {
            CronField::Seconds | CronField::Minutes => "0-59",
            CronField::Hours => "0-23",
            CronField::DayOfMonth => "1-31",
            CronField::Month => "1-12 or JAN-DEC",
            CronField::DayOfWeek => "1-7 (1 = SUN) or SUN-SAT",
            CronField::Year => "1970-2099",
        }
    }
}

impl fmt::Display for CronField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The day-of-month field.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DayOfMonth {
    /// `?`.
    NoSpec,
    /// Plain days (`*` is all of them).
    Days(BTreeSet<u32>),
    /// `L`, `L-n`, `LW`, `L-nW`.
    Last(LastDay),
    /// `nW`.
    NearestWeekday(u32),
}

/// `L-n` (`offset` n) in day-of-month, with `W` when `weekday`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastDay {
    /// Days before the last day of the month, 0-30.
    offset: u32,
    /// Move to the nearest weekday (`W`).
    weekday: bool,
}

/// The day-of-week field, days counted 1 = SUN to 7 = SAT.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DayOfWeek {
    /// `?`.
    NoSpec,
    /// Plain days (`*` is all of them).
    Days(BTreeSet<u32>),
    /// `dL`: the last day `d` of the month.
    Last(u32),
    /// `d#k`: the k-th day `d` of the month.
    Nth(u32, u32),
}

/// The fields of an expression, checked, with Quartz's meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fields {
    seconds: BTreeSet<u32>,
    minutes: BTreeSet<u32>,
    hours: BTreeSet<u32>,
    day_of_month: DayOfMonth,
    months: BTreeSet<u32>,
    day_of_week: DayOfWeek,
    /// `None` when the year field is absent or `*`.
    years: Option<BTreeSet<u32>>,
}

/// A refused token, before the expression and field are attached.
struct Bad {
    token: String,
    reason: String,
}

impl Bad {
    fn new(token: &str, reason: impl Into<String>) -> Bad {
        Bad {
            token: quote(token, QUOTE_LIMIT),
            reason: reason.into(),
        }
    }
}

impl CronExpr {
    /// Parses a Quartz cron expression (see [`CronExpr`] for the syntax). Leading and trailing
    /// whitespace is ignored.
    ///
    /// Expressions that are valid but can never fire (such as `0 0 0 30 2 ?`, February 30th,
    /// which Quartz accepts too) parse; [`CronExpr::next_after`] returns `None` for them.
    ///
    /// # Errors
    ///
    /// A [`CronError`] naming the field and the token when Quartz would refuse the
    /// expression, or when it is stricter than Quartz (see [`CronExpr`]).
    pub fn parse(expr: &str) -> Result<CronExpr, CronError> {
        let text = expr.trim();
        if text.is_empty() {
            return Err(CronError::Empty);
        }
        if text.len() > MAX_EXPRESSION_LEN {
            return Err(CronError::TooLong {
                len: text.len(),
                start: quote(text, 40),
            });
        }
        let fields = parse_fields(text)?;
        let never = never_fires(&fields);
        let last_day = match fields.day_of_month {
            DayOfMonth::Last(last) if last.offset > 0 => Some(last),
            _ => None,
        };
        let hourly = hourly_mask(&fields).map(Arc::new);
        let pattern = canonical_pattern(&fields);
        let cron = compiled(&pattern).map_err(|e| CronError::Compile {
            expr: quote(text, QUOTE_LIMIT),
            reason: format!("{e} (pattern `{pattern}`)"),
        })?;
        Ok(CronExpr {
            text: text.to_owned(),
            cron,
            last_day,
            never,
            hourly,
        })
    }

    /// The expression as written, trimmed.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first fire time strictly after `after`, or `None` if there is none.
    ///
    /// Fields are matched against the wall-clock time in `tz`, so a daily `0 0 9 * * ?` fires
    /// at 09:00 local time all year and its UTC time moves with daylight saving time.
    /// Fractions of a second in `after` are ignored for matching (`after` at 10:00:00.5 gives
    /// 10:00:01 for an every-second job), and every result is whole seconds.
    ///
    /// Where the clock changes, shardjob follows croner, which differs from Quartz 2.3.2:
    /// - **Clock set forward** (a gap, such as 02:00-03:00 in New York on 2026-03-08): a job
    ///   whose seconds, minutes and hours are single values ("fixed-time", such as
    ///   `0 30 2 * * ?`) and whose time falls into the gap fires once at the first instant after
    ///   the gap (03:00 local, 07:00 UTC); interval and wildcard jobs (`0 0/30 * * * ?`) have no
    ///   fire times inside the gap. Quartz skips a fixed-time fire that falls into the gap: it
    ///   does not run that day at all (checked with the Quartz 2.3.2 jar).
    /// - **Clock set back** (a repeated hour): a fixed-time job fires once, at the first
    ///   occurrence of its time; interval jobs fire in both passes of the repeated hour, so
    ///   they keep their rhythm in real time. Quartz fires a fixed-time job at the second
    ///   occurrence and skips the first pass for interval jobs.
    ///
    /// `None` when the expression can never fire again: its years are past, or its days never
    /// exist (`0 0 0 30 2 ?`, `0 0 12 L-30 2 ?`). A year field of `*` is searched up to the
    /// year 5000. An `L-n` expression whose only candidate days fall in months and years that
    /// do not have them may also give `None` after a bounded search (20 000 days tried).
    pub fn next_after(&self, after: DateTime<Utc>, tz: &JobTimeZone) -> Option<DateTime<Utc>> {
        if self.never || after.year() >= SEARCH_YEAR_LIMIT {
            return None;
        }
        // croner reads the local time of the start, which chrono cannot represent near its
        // own limits; no fire time lies before year 1 anyway.
        let from = match NaiveDate::from_ymd_opt(0, 1, 1) {
            Some(floor) if after.date_naive() < floor => floor.and_time(NaiveTime::MIN).and_utc(),
            _ => after,
        };
        if let Some(mask) = &self.hourly {
            // Far from the search's year limit, where croner's answer could differ.
            if let Some(offset) = hourly::constant_offset(tz, from)
                .filter(|_| from.year() >= 1 && from.year() < SEARCH_YEAR_LIMIT - 1)
            {
                return mask.next_after(from, offset).filter(|next| *next > after);
            }
        }
        self.searched_after(after, from, tz)
    }

    /// [`CronExpr::next_after`] by croner's calendar search, from `from` (`after` moved to
    /// croner's floor).
    fn searched_after(
        &self,
        after: DateTime<Utc>,
        from: DateTime<Utc>,
        tz: &JobTimeZone,
    ) -> Option<DateTime<Utc>> {
        let next = match tz {
            JobTimeZone::Named(zone) => {
                self.next_in(&from.with_timezone(zone))?.with_timezone(&Utc)
            }
            JobTimeZone::Fixed { offset, .. } => self
                .next_in(&from.with_timezone(offset))?
                .with_timezone(&Utc),
        };
        // croner guarantees this; keep the iterator's promise even if it did not.
        (next > after).then_some(next)
    }

    /// The fire times strictly after `after`, in increasing order (see
    /// [`CronExpr::next_after`]). The iterator ends when the expression cannot fire again.
    pub fn fires_after(&self, after: DateTime<Utc>, tz: &JobTimeZone) -> FireTimes<'_> {
        FireTimes {
            expr: self,
            tz: tz.clone(),
            cursor: Some(after),
        }
    }

    /// The search in the zone of `after`.
    fn next_in<Z: TimeZone>(&self, after: &DateTime<Z>) -> Option<DateTime<Z>> {
        let Some(last_day) = self.last_day else {
            return self.cron.find_next_occurrence(after, false).ok();
        };
        // croner looks for the candidate days of `L-n` (the days it can fall on in any month);
        // a hit on a day that is not this month's `L-n` day moves the search to the next day.
        let mut from = after.clone();
        for _ in 0..MAX_DAY_SKIPS {
            let hit = self.cron.find_next_occurrence(&from, false).ok()?;
            let date = hit.date_naive();
            if last_day.day_in(date.year(), date.month()) == Some(date.day()) {
                return Some(hit);
            }
            from = last_second_of_day(&hit)?;
        }
        None
    }
}

impl LastDay {
    /// The day of `month` in `year` this `L-n` / `L-nW` names, if it exists.
    ///
    /// `L-n` is `n` days before the last day; none when that is before the 1st (Quartz skips
    /// such months too). With `W` the day moves to the nearest weekday within the month: a
    /// Saturday to the Friday before (the Monday after on the 1st), a Sunday to the Monday
    /// after (the Friday before on the last day).
    fn day_in(self, year: i32, month: u32) -> Option<u32> {
        let last = month_len(year, month)?;
        let day = last.checked_sub(self.offset).filter(|&d| d >= 1)?;
        if !self.weekday {
            return Some(day);
        }
        nearest_weekday(year, month, day, last)
    }
}

/// The weekday nearest `day` within its month, by Quartz's `W` rule.
fn nearest_weekday(year: i32, month: u32, day: u32, last: u32) -> Option<u32> {
    let date = NaiveDate::from_ymd_opt(year, month, day)?;
    Some(match date.weekday() {
        chrono::Weekday::Sat if day == 1 => day + 2,
        chrono::Weekday::Sat => day - 1,
        chrono::Weekday::Sun if day == last => day - 2,
        chrono::Weekday::Sun => day + 1,
        _ => day,
    })
}

/// The number of days of `month` in `year`.
fn month_len(year: i32, month: u32) -> Option<u32> {
    let first = NaiveDate::from_ymd_opt(year, month, 1)?;
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year.checked_add(1)?, 1, 1)?
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)?
    };
    u32::try_from(next.signed_duration_since(first).num_days()).ok()
}

/// The last instant (whole second) of `hit`'s local day, or `hit` itself if that is not later:
/// a search strictly after it starts at the next local midnight. When midnight falls into a
/// clock gap, the day starts when the gap ends.
fn last_second_of_day<Z: TimeZone>(hit: &DateTime<Z>) -> Option<DateTime<Z>> {
    let zone = hit.timezone();
    let midnight = hit.date_naive().succ_opt()?.and_hms_opt(0, 0, 0)?;
    let start = match zone.from_local_datetime(&midnight) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t,
        LocalResult::None => {
            // The gap starts at the instant midnight names in the offset before it.
            let utc = midnight.checked_sub_offset(hit.offset().fix())?;
            zone.from_utc_datetime(&utc)
        }
    };
    let before = start.checked_sub_signed(TimeDelta::try_seconds(1)?)?;
    Some(if before > *hit { before } else { hit.clone() })
}

/// Successive fire times of a [`CronExpr`], from [`CronExpr::fires_after`].
#[derive(Clone, Debug)]
pub struct FireTimes<'a> {
    expr: &'a CronExpr,
    tz: JobTimeZone,
    /// The last fire time given (or the start); `None` once the expression cannot fire again.
    cursor: Option<DateTime<Utc>>,
}

impl Iterator for FireTimes<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        let next = self.expr.next_after(self.cursor?, &self.tz);
        self.cursor = next;
        next
    }
}

impl FusedIterator for FireTimes<'_> {}

/// Splits and checks the fields of a trimmed, non-empty expression.
fn parse_fields(text: &str) -> Result<Fields, CronError> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    if !(6..=7).contains(&parts.len()) {
        return Err(CronError::FieldCount {
            expr: quote(text, QUOTE_LIMIT),
            found: parts.len(),
        });
    }
    let at = |field: CronField| {
        move |bad: Bad| CronError::InvalidField {
            expr: quote(text, QUOTE_LIMIT),
            field,
            token: bad.token,
            reason: bad.reason,
        }
    };
    let seconds = parse_plain(CronField::Seconds, parts[0]).map_err(at(CronField::Seconds))?;
    let minutes = parse_plain(CronField::Minutes, parts[1]).map_err(at(CronField::Minutes))?;
    let hours = parse_plain(CronField::Hours, parts[2]).map_err(at(CronField::Hours))?;
    let day_of_month = parse_day_of_month(parts[3]).map_err(at(CronField::DayOfMonth))?;
    let months = parse_plain(CronField::Month, parts[4]).map_err(at(CronField::Month))?;
    let day_of_week = parse_day_of_week(parts[5]).map_err(at(CronField::DayOfWeek))?;
    let years = match parts.get(6) {
        None | Some(&"*") => None,
        Some(year) => Some(parse_plain(CronField::Year, year).map_err(at(CronField::Year))?),
    };
    let no_day_of_month = day_of_month == DayOfMonth::NoSpec;
    let no_day_of_week = day_of_week == DayOfWeek::NoSpec;
    if no_day_of_month == no_day_of_week {
        return Err(CronError::DayFields {
            expr: quote(text, QUOTE_LIMIT),
            day_of_month: quote(parts[3], QUOTE_LIMIT),
            day_of_week: quote(parts[5], QUOTE_LIMIT),
        });
    }
    Ok(Fields {
        seconds,
        minutes,
        hours,
        day_of_month,
        months,
        day_of_week,
        years,
    })
}

/// A field without `?`, `L`, `W` or `#`: a list of values, ranges and steps.
fn parse_plain(field: CronField, text: &str) -> Result<BTreeSet<u32>, Bad> {
    if text.contains('?') {
        return Err(Bad::new(
            text,
            "`?` is only allowed as the whole day-of-month or day-of-week field",
        ));
    }
    let mut values = BTreeSet::new();
    for item in text.split(',') {
        if item.is_empty() {
            return Err(Bad::new(
                text,
                "empty item in the list: remove the extra comma",
            ));
        }
        parse_item(field, item, &mut values)?;
    }
    Ok(values)
}

/// One list item: `*`, `v`, `a-b`, `*/n`, `/n`, `a/n`, `a-b/n`, added to `values`.
fn parse_item(field: CronField, item: &str, values: &mut BTreeSet<u32>) -> Result<(), Bad> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(parse_step(field, item, step)?)),
        None => (item, None),
    };
    let (start, stop, named) = if range == "*" || (range.is_empty() && step.is_some()) {
        (field.min(), field.max(), false)
    } else if let Some((a, b)) = range.split_once('-') {
        let (a, a_named) = parse_value(field, item, a)?;
        let (b, b_named) = parse_value(field, item, b)?;
        if a_named != b_named {
            return Err(Bad::new(
                item,
                "a range must use names at both ends or numbers at both ends",
            ));
        }
        if field == CronField::Year && b < a {
            return Err(Bad::new(
                item,
                format!("the range starts after it ends: write `{b}-{a}`"),
            ));
        }
        (a, b, a_named || b_named)
    } else {
        let (value, named) = parse_value(field, item, range)?;
        match step {
            Some(_) => (value, field.max(), named),
            None => (value, value, named),
        }
    };
    if named && step.is_some() {
        return Err(Bad::new(
            item,
            "a step cannot follow a name (Quartz ignores it): write the range with numbers, \
             as in `2-6/2`",
        ));
    }
    // Quartz's `addToSet`: a range whose end is below its start wraps round the field.
    let (stop, modulus) = match field.modulus() {
        Some(m) if stop < start => (stop + m, Some(m)),
        _ => (stop, None),
    };
    let step = step.unwrap_or(1);
    let mut value = start;
    while value <= stop {
        let wrapped = match modulus {
            Some(m) if value % m == 0 && field.min() == 1 => m,
            Some(m) => value % m,
            None => value,
        };
        values.insert(wrapped);
        value = match value.checked_add(step) {
            Some(v) => v,
            None => break,
        };
    }
    Ok(())
}

/// The step after `/`.
fn parse_step(field: CronField, item: &str, step: &str) -> Result<u32, Bad> {
    let Some(n) = number(step) else {
        return Err(Bad::new(
            item,
            format!(
                "the step after `/` must be a number, found `{}`",
                short(step)
            ),
        ));
    };
    if n == 0 {
        return Err(Bad::new(item, "the step after `/` must be at least 1"));
    }
    if let Some(max) = field.max_step().filter(|&max| n > max) {
        return Err(Bad::new(
            item,
            format!("the step {n} is too large: at most {max} for {field}"),
        ));
    }
    Ok(n)
}

/// A value: digits, or a three-letter name in month and day-of-week; `true` for a name.
fn parse_value(field: CronField, item: &str, text: &str) -> Result<(u32, bool), Bad> {
    let upper = text.to_ascii_uppercase();
    let name = match field {
        CronField::Month => MONTH_NAMES.iter().position(|n| *n == upper),
        CronField::DayOfWeek => DAY_NAMES.iter().position(|n| *n == upper),
        _ => None,
    };
    if let Some(index) = name {
        return Ok((index as u32 + 1, true));
    }
    let Some(value) = number(text) else {
        let reason = if text.is_empty() {
            format!("a value is missing: {field} takes {}", field.range_text())
        } else if let Some(reason) = misplaced_special(field, &upper) {
            reason.to_owned()
        } else if upper.len() > 3
            && matches!(field, CronField::Month | CronField::DayOfWeek)
            && upper.is_char_boundary(3)
            && (MONTH_NAMES.contains(&&upper[..3]) || DAY_NAMES.contains(&&upper[..3]))
        {
            format!(
                "`{}` is not a {field}: names are three letters, as in `{}`",
                short(text),
                &upper[..3]
            )
        } else {
            format!(
                "`{}` is not a {field}: use {}",
                short(text),
                field.range_text()
            )
        };
        return Err(Bad::new(item, reason));
    };
    if value < field.min() || value > field.max() {
        return Err(Bad::new(
            item,
            format!(
                "{value} is out of range: {field} takes {}",
                field.range_text()
            ),
        ));
    }
    Ok((value, false))
}

/// A message for `L`, `W` or `#` used where they are not allowed.
fn misplaced_special(field: CronField, upper: &str) -> Option<&'static str> {
    let digits_then = |suffix: char| {
        upper
            .strip_suffix(suffix)
            .is_some_and(|d| d.is_empty() || d.bytes().all(|b| b.is_ascii_digit()))
    };
    if upper.contains('#') {
        return Some(if field == CronField::DayOfWeek {
            "`#` takes a single day, as in `6#3`, and cannot be combined with other days"
        } else {
            "`#` is only allowed in day-of-week, as in `6#3`"
        });
    }
    if digits_then('W') || upper.starts_with("LW") {
        return Some(if field == CronField::DayOfMonth {
            "`W` must stand alone in day-of-month, as in `15W` or `LW`"
        } else {
            "`W` is only allowed in day-of-month, as in `15W`"
        });
    }
    if digits_then('L') || upper.starts_with('L') {
        return Some(match field {
            CronField::DayOfMonth => "`L` must stand alone in day-of-month, as in `L` or `L-3`",
            CronField::DayOfWeek => "`L` must stand alone in day-of-week, as in `L` or `6L`",
            _ => "`L` is only allowed in day-of-month and day-of-week",
        });
    }
    None
}

/// Digits only, at most nine of them.
fn number(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// The day-of-month field.
fn parse_day_of_month(text: &str) -> Result<DayOfMonth, Bad> {
    let field = CronField::DayOfMonth;
    let upper = text.to_ascii_uppercase();
    if upper == "?" {
        return Ok(DayOfMonth::NoSpec);
    }
    let special = upper.contains('L') || upper.contains('W');
    if special && upper.contains(',') {
        return Err(Bad::new(
            text,
            "`L` and `W` cannot be combined with other days in a list (Quartz does not \
             support it)",
        ));
    }
    if let Some(rest) = upper.strip_prefix('L') {
        let (rest, weekday) = match rest.strip_suffix('W') {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let offset = if rest.is_empty() {
            0
        } else {
            match rest.strip_prefix('-').and_then(number) {
                Some(n) if n <= 30 => n,
                Some(n) => {
                    return Err(Bad::new(
                        text,
                        format!("the offset {n} in `L-n` is too large: it must be 0-30"),
                    ));
                }
                None => {
                    return Err(Bad::new(
                        text,
                        "expected `L`, `LW`, `L-n` or `L-nW` with n 0-30",
                    ));
                }
            }
        };
        return Ok(DayOfMonth::Last(LastDay { offset, weekday }));
    }
    if let Some(day) = upper.strip_suffix('W') {
        return match number(day) {
            Some(d) if (1..=31).contains(&d) => Ok(DayOfMonth::NearestWeekday(d)),
            Some(d) => Err(Bad::new(
                text,
                format!("{d} is out of range: `W` takes a day 1-31, as in `15W`"),
            )),
            None => Err(Bad::new(
                text,
                "`W` takes a single day, as in `15W` (no ranges, lists or steps)",
            )),
        };
    }
    if special {
        return Err(Bad::new(
            text,
            "`L` and `W` must stand alone: `L`, `L-3`, `LW`, `L-3W` or `15W`",
        ));
    }
    if upper.contains('#') {
        return Err(Bad::new(
            text,
            "`#` is only allowed in day-of-week, as in `6#3`",
        ));
    }
    parse_plain(field, text).map(DayOfMonth::Days)
}

/// The day-of-week field.
fn parse_day_of_week(text: &str) -> Result<DayOfWeek, Bad> {
    let field = CronField::DayOfWeek;
    let upper = text.to_ascii_uppercase();
    if upper == "?" {
        return Ok(DayOfWeek::NoSpec);
    }
    if upper == "L" {
        // Quartz reads a lone `L` as 7, Saturday.
        return Ok(DayOfWeek::Days(BTreeSet::from([7])));
    }
    if (upper.contains('L') || upper.contains('#')) && upper.contains(',') {
        return Err(Bad::new(
            text,
            "`L` and `#` cannot be combined with other days in a list (Quartz uses only one \
             of them)",
        ));
    }
    if let Some((day, nth)) = upper.split_once('#') {
        let (day, _) = parse_value(field, text, day)?;
        return match number(nth) {
            Some(k) if (1..=5).contains(&k) => Ok(DayOfWeek::Nth(day, k)),
            _ => Err(Bad::new(
                text,
                format!(
                    "`#` must be followed by a number 1-5, found `{}`",
                    short(nth)
                ),
            )),
        };
    }
    if let Some(day) = upper.strip_suffix('L') {
        let (day, _) = parse_value(field, text, day)?;
        return Ok(DayOfWeek::Last(day));
    }
    if upper.contains('W') && !DAY_NAMES.iter().any(|n| upper.contains(n)) {
        return Err(Bad::new(
            text,
            "`W` is only allowed in day-of-month, as in `15W`",
        ));
    }
    parse_plain(field, text).map(DayOfWeek::Days)
}

/// The mask of an expression that fires at the same seconds of every hour: its hours, days of
/// the month, months, days of the week and years are all "every" (one of the two day fields
/// `?`, the other `*`).
fn hourly_mask(fields: &Fields) -> Option<hourly::HourMask> {
    let every = |field: CronField, values: &BTreeSet<u32>| {
        values.len() as u32 == field.max() - field.min() + 1
    };
    let every_day = match (&fields.day_of_month, &fields.day_of_week) {
        (DayOfMonth::Days(days), DayOfWeek::NoSpec) => every(CronField::DayOfMonth, days),
        (DayOfMonth::NoSpec, DayOfWeek::Days(days)) => every(CronField::DayOfWeek, days),
        _ => false,
    };
    if !every_day
        || !every(CronField::Hours, &fields.hours)
        || !every(CronField::Month, &fields.months)
        || fields.years.is_some()
    {
        return None;
    }
    hourly::HourMask::new(
        fields.seconds.iter().copied(),
        fields.minutes.iter().copied(),
    )
}

/// Whether the days of the month and the months can never meet (`30 2`, `31W 4,6`, `L-30 2`).
fn never_fires(fields: &Fields) -> bool {
    let longest = fields
        .months
        .iter()
        .filter_map(|&m| MAX_MONTH_LEN.get((m as usize).checked_sub(1)?))
        .copied()
        .max()
        .unwrap_or(0);
    match &fields.day_of_month {
        DayOfMonth::Days(days) => days.first().is_none_or(|&first| first > longest),
        DayOfMonth::NearestWeekday(day) => *day > longest,
        DayOfMonth::Last(last) => last.offset >= longest,
        DayOfMonth::NoSpec => false,
    }
}

/// The pattern croner searches with: every field written out with plain numbers (Quartz
/// weekday numbering), so that croner's parser sees nothing it reads differently from Quartz.
fn canonical_pattern(fields: &Fields) -> String {
    let list = |field: CronField, values: &BTreeSet<u32>| -> String {
        if values.len() as u32 == field.max() - field.min() + 1 {
            "*".to_owned()
        } else {
            join(values.iter().copied())
        }
    };
    let day_of_month = match &fields.day_of_month {
        DayOfMonth::NoSpec => "*".to_owned(),
        DayOfMonth::Days(days) => list(CronField::DayOfMonth, days),
        DayOfMonth::Last(LastDay { offset: 0, weekday }) => {
            (if *weekday { "LW" } else { "L" }).to_owned()
        }
        // croner has no `L-n`: search the days it can fall on in any month (a 28- to 31-day
        // month, moved by up to two days for `W`) and filter in `CronExpr::next_in`.
        DayOfMonth::Last(LastDay { offset, weekday }) => {
            let (low, high) = if *weekday { (26, 33) } else { (28, 31) };
            join(
                (low..=high)
                    .filter_map(|d: u32| d.checked_sub(*offset).filter(|d| (1..=31).contains(d))),
            )
        }
        DayOfMonth::NearestWeekday(day) => format!("{day}W"),
    };
    let day_of_week = match &fields.day_of_week {
        DayOfWeek::NoSpec => "*".to_owned(),
        DayOfWeek::Days(days) => list(CronField::DayOfWeek, days),
        DayOfWeek::Last(day) => format!("{day}L"),
        DayOfWeek::Nth(day, k) => format!("{day}#{k}"),
    };
    let years = match &fields.years {
        None => "*".to_owned(),
        Some(years) => join(years.iter().copied()),
    };
    format!(
        "{} {} {} {} {} {} {}",
        list(CronField::Seconds, &fields.seconds),
        list(CronField::Minutes, &fields.minutes),
        list(CronField::Hours, &fields.hours),
        day_of_month,
        list(CronField::Month, &fields.months),
        day_of_week,
        years
    )
}

/// `1,2,3`.
fn join(values: impl Iterator<Item = u32>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}

/// A piece of the input as a reason quotes it.
fn short(s: &str) -> String {
    quote(s, 20)
}

/// The first `limit` characters of `s`, with `…` when shortened.
fn quote(s: &str, limit: usize) -> String {
    if s.chars().count() <= limit {
        s.to_owned()
    } else {
        let mut short: String = s.chars().take(limit).collect();
        short.push('…');
        short
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpr").field(&self.text).finish()
    }
}

/// Compiles a canonical croner pattern, sharing the result with every live expression of the
/// same pattern: croner keeps a few KB of bit fields per expression, and ten thousand jobs on
/// a handful of schedules would otherwise hold ten thousand copies. A pure memo (the same
/// pattern always compiles to the same search), so determinism is unaffected.
fn compiled(pattern: &str) -> Result<Arc<Cron>, croner::errors::CronError> {
    /// The memo, and the size at which dead entries are swept next.
    type Memo = (HashMap<String, Weak<Cron>>, usize);
    static COMPILED: OnceLock<Mutex<Memo>> = OnceLock::new();
    let cache = COMPILED.get_or_init(|| Mutex::new((HashMap::new(), 1_024)));
    // A poisoned lock only means another thread panicked while holding it; the map is still
    // a valid memo.
    let mut guard = cache.lock().unwrap_or_else(|e| e.into_inner());
    let (map, sweep_at) = &mut *guard;
    if let Some(cron) = map.get(pattern).and_then(Weak::upgrade) {
        return Ok(cron);
    }
    let cron = Arc::new(
        CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Optional)
            .alternative_weekdays(true)
            .sloppy_ranges(true)
            .build()
            .parse(pattern)?,
    );
    if map.len() >= *sweep_at {
        map.retain(|_, w| w.strong_count() > 0);
        *sweep_at = (map.len() * 2).max(1_024);
    }
    map.insert(pattern.to_owned(), Arc::downgrade(&cron));
    Ok(cron)
}

impl PartialEq for CronExpr {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CronExpr {}

impl Hash for CronExpr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl FromStr for CronExpr {
    type Err = CronError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronExpr::parse(s)
    }
}

impl TryFrom<String> for CronExpr {
    type Error = CronError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        CronExpr::parse(&s)
    }
}

impl TryFrom<&str> for CronExpr {
    type Error = CronError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        CronExpr::parse(s)
    }
}

impl From<CronExpr> for String {
    fn from(expr: CronExpr) -> String {
        expr.text
    }
}

mod hourly;

#[cfg(test)]
mod tests;
