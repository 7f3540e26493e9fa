//! Per-job time zones: IANA names and ElasticJob's (Java's) `GMT±hh:mm` custom ids.
//!
//! ElasticJob passes a job's `timeZone` to `java.util.TimeZone.getTimeZone`, which accepts IANA
//! names (`Asia/Shanghai`, `UTC`) and the custom ids `GMT`, `GMT+8`, `GMT-05`, `GMT+0530` and
//! `GMT+08:00`. [`JobTimeZone::parse`] accepts the same. Where Java silently falls back to GMT for
//! an id it does not know, shardjob refuses it with a [`TimeZoneError`]. IANA zones follow
//! daylight saving time; custom ids are fixed offsets.
//!
//! The zone only converts instants: the core never reads a clock.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// The forms [`JobTimeZone::parse`] accepts, quoted in every error message.
const ACCEPTED_FORMS: &str = "expected an IANA time zone name such as `Asia/Shanghai`, `Europe/Berlin` \
     or `UTC` (case-sensitive), or a GMT offset `GMT`, `GMT+H`, `GMT+HH`, `GMT+HHMM` or `GMT+HH:MM` \
     (sign `+` or `-`, hours 0-23, minutes 00-59)";

/// How many characters of a rejected input an error message quotes.
const QUOTE_LIMIT: usize = 64;

/// The time zone a job's cron expression is evaluated in.
///
/// Parse it with [`JobTimeZone::parse`] (or [`str::parse`]); [`Display`](fmt::Display) gives a
/// canonical name that `parse` accepts again, and serde reads and writes that same string. The
/// default is UTC.
///
/// ```
/// use shardjob_core::JobTimeZone;
///
/// let berlin = JobTimeZone::parse("Europe/Berlin").unwrap();
/// assert_eq!(berlin.to_string(), "Europe/Berlin");
/// let china = JobTimeZone::parse("GMT+8").unwrap();
/// assert_eq!(china.to_string(), "GMT+08:00");
/// assert_eq!(JobTimeZone::default(), JobTimeZone::utc());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum JobTimeZone {
    /// A zone of the IANA time zone database; it follows daylight saving time.
    Named(Tz),
    /// A fixed offset from UTC, written as a Java custom id.
    Fixed {
        /// The offset from UTC, east positive.
        offset: FixedOffset,
        /// The id [`Display`](fmt::Display) prints: `GMT`, or `GMT+hh:mm` / `GMT-hh:mm` as
        /// [`JobTimeZone::parse`] and [`JobTimeZone::fixed`] write it. Build the variant with
        /// one of those two so that the name and the offset agree.
        name: String,
    },
}

/// A time zone string that [`JobTimeZone::parse`] does not accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeZoneError {
    /// The input was empty or only whitespace.
    #[error("time zone is empty: {ACCEPTED_FORMS}")]
    Empty,
    /// The input starts with `GMT+` or `GMT-` but is not a valid Java custom id.
    #[error("time zone `{input}` is not a valid GMT offset ({reason}): {ACCEPTED_FORMS}")]
    InvalidOffset {
        /// The rejected input (trimmed, shortened if very long).
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The input is neither a GMT offset nor a name in the IANA time zone database.
    #[error(
        "unknown time zone `{input}`{}: {ACCEPTED_FORMS}",
        suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
    )]
    Unknown {
        /// The rejected input (trimmed, shortened if very long).
        input: String,
        /// An IANA name that differs from the input only in letter case, if there is one.
        suggestion: Option<String>,
    },
    /// [`JobTimeZone::fixed`] was given an offset that no Java custom id can express.
    #[error(
        "offset of {seconds} seconds cannot be a job time zone: a GMT offset must be a whole \
         number of minutes below 24 hours"
    )]
    UnrepresentableOffset {
        /// The offset from UTC in seconds, east positive.
        seconds: i32,
    },
}

impl JobTimeZone {
    /// UTC, the default zone.
    pub fn utc() -> JobTimeZone {
        JobTimeZone::Named(Tz::UTC)
    }

    /// A fixed offset written as a Java custom id `GMT±hh:mm`.
    ///
    /// # Errors
    ///
    /// [`TimeZoneError::UnrepresentableOffset`] when the offset has a seconds part (Java custom
    /// ids have minutes only).
    pub fn fixed(offset: FixedOffset) -> Result<JobTimeZone, TimeZoneError> {
        let seconds = offset.local_minus_utc();
        if seconds % 60 != 0 {
            return Err(TimeZoneError::UnrepresentableOffset { seconds });
        }
        let sign = if seconds < 0 { '-' } else { '+' };
        let minutes = seconds.unsigned_abs() / 60;
        Ok(JobTimeZone::Fixed {
            offset,
            name: format!("GMT{sign}{:02}:{:02}", minutes / 60, minutes % 60),
        })
    }

    /// Parses a time zone as ElasticJob's `timeZone` setting spells it.
    ///
    /// Accepted, after trimming leading and trailing whitespace:
    /// - Java custom ids: `GMT`, `GMT` Sign Hours, `GMT` Sign Hours Minutes (3 or 4 digits, as
    ///   in `GMT+0530`), `GMT` Sign Hours `:` Minutes (as in `GMT+08:00`); hours are one or two
    ///   digits 0-23, minutes two digits 00-59. These are tried first, so `GMT+08:00` never
    ///   reaches the IANA database.
    /// - IANA names, spelled exactly as the database does (`Asia/Shanghai`, `UTC`,
    ///   `America/New_York`).
    ///
    /// # Errors
    ///
    /// A [`TimeZoneError`] that quotes the input and lists the accepted forms.
    pub fn parse(s: &str) -> Result<JobTimeZone, TimeZoneError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(TimeZoneError::Empty);
        }
        if s == "GMT" {
            return Ok(JobTimeZone::Fixed {
                offset: Utc.fix(),
                name: "GMT".to_owned(),
            });
        }
        if let Some(rest) = s
            .strip_prefix("GMT")
            .filter(|rest| rest.starts_with('+') || rest.starts_with('-'))
        {
            let seconds =
                parse_custom_offset(rest).map_err(|reason| TimeZoneError::InvalidOffset {
                    input: quote(s),
                    reason,
                })?;
            let offset = FixedOffset::east_opt(seconds).ok_or(TimeZoneError::InvalidOffset {
                input: quote(s),
                reason: "offset out of range",
            })?;
            return JobTimeZone::fixed(offset);
        }
        match Tz::from_str(s) {
            Ok(tz) => Ok(JobTimeZone::Named(tz)),
            Err(_) => Err(TimeZoneError::Unknown {
                input: quote(s),
                suggestion: chrono_tz::TZ_VARIANTS
                    .iter()
                    .find(|tz| tz.name().eq_ignore_ascii_case(s))
                    .map(|tz| tz.name().to_owned()),
            }),
        }
    }

    /// The offset from UTC in force at `instant` in this zone.
    pub fn offset_at(&self, instant: DateTime<Utc>) -> FixedOffset {
        match self {
            JobTimeZone::Named(tz) => tz.offset_from_utc_datetime(&instant.naive_utc()).fix(),
            JobTimeZone::Fixed { offset, .. } => *offset,
        }
    }

    /// The wall-clock (local) date and time of `instant` in this zone.
    pub fn to_local(&self, instant: DateTime<Utc>) -> NaiveDateTime {
        match self {
            JobTimeZone::Named(tz) => instant.with_timezone(tz).naive_local(),
            JobTimeZone::Fixed { offset, .. } => instant.with_timezone(offset).naive_local(),
        }
    }

    /// The instants that show the wall-clock time `local` in this zone: one, two when the clock
    /// is set back and `local` is repeated (earlier first), none when the clock jumps forward
    /// over `local`.
    pub fn from_local(&self, local: NaiveDateTime) -> LocalResult<DateTime<Utc>> {
        match self {
            JobTimeZone::Named(tz) => tz
                .from_local_datetime(&local)
                .map(|t| t.with_timezone(&Utc)),
            JobTimeZone::Fixed { offset, .. } => offset
                .from_local_datetime(&local)
                .map(|t| t.with_timezone(&Utc)),
        }
    }
}

/// Parses what follows `GMT` in a Java custom id (sign included) into seconds east of UTC,
/// with the rules of `java.util.TimeZone.parseCustomTimeZone`.
fn parse_custom_offset(rest: &str) -> Result<i32, &'static str> {
    let mut chars = rest.chars();
    let negative = match chars.next() {
        Some('+') => false,
        Some('-') => true,
        _ => return Err("a sign `+` or `-` must follow `GMT`"),
    };
    let body = chars.as_str();
    if body.is_empty() {
        return Err("hours must follow the sign");
    }
    let (hours, minutes) = match body.split_once(':') {
        Some((h, m)) => {
            if h.is_empty() || h.len() > 2 || !h.bytes().all(|b| b.is_ascii_digit()) {
                return Err("hours before `:` must be one or two digits");
            }
            if m.len() != 2 || !m.bytes().all(|b| b.is_ascii_digit()) {
                return Err("minutes after `:` must be exactly two digits");
            }
            (digits(h), digits(m))
        }
        None => {
            if !body.bytes().all(|b| b.is_ascii_digit()) {
                return Err("only digits may follow the sign");
            }
            match body.len() {
                1 | 2 => (digits(body), 0),
                3 | 4 => {
                    let n = digits(body);
                    (n / 100, n % 100)
                }
                _ => return Err("too many digits: use H, HH, HHMM or HH:MM"),
            }
        }
    };
    if hours > 23 {
        return Err("hours must be between 0 and 23");
    }
    if minutes > 59 {
        return Err("minutes must be between 00 and 59");
    }
    let seconds = (hours * 3600 + minutes * 60) as i32;
    Ok(if negative { -seconds } else { seconds })
}

/// The value of a string of at most four ASCII digits (checked by the caller).
fn digits(s: &str) -> u32 {
    s.bytes()
        .fold(0, |n, b| n * 10 + u32::from(b.wrapping_sub(b'0')))
}

/// The input as an error message quotes it: shortened when very long.
fn quote(s: &str) -> String {
    if s.chars().count() <= QUOTE_LIMIT {
        s.to_owned()
    } else {
        let mut short: String = s.chars().take(QUOTE_LIMIT).collect();
        short.push('…');
        short
    }
}

impl Default for JobTimeZone {
    fn default() -> Self {
        JobTimeZone::utc()
    }
}

impl fmt::Display for JobTimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobTimeZone::Named(tz) => f.write_str(tz.name()),
            JobTimeZone::Fixed { name, .. } => f.write_str(name),
        }
    }
}

impl FromStr for JobTimeZone {
    type Err = TimeZoneError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobTimeZone::parse(s)
    }
}

impl TryFrom<String> for JobTimeZone {
    type Error = TimeZoneError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        JobTimeZone::parse(&s)
    }
}

impl TryFrom<&str> for JobTimeZone {
    type Error = TimeZoneError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        JobTimeZone::parse(s)
    }
}

impl From<JobTimeZone> for String {
    fn from(tz: JobTimeZone) -> String {
        tz.to_string()
    }
}

impl From<Tz> for JobTimeZone {
    fn from(tz: Tz) -> Self {
        JobTimeZone::Named(tz)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn offset_of(s: &str) -> i32 {
        match JobTimeZone::parse(s).unwrap() {
            JobTimeZone::Fixed { offset, .. } => offset.local_minus_utc(),
            other => panic!("{s} parsed as {other:?}, expected a fixed offset"),
        }
    }

    #[test]
    fn parses_iana_names() {
        for name in [
            "Asia/Shanghai",
            "UTC",
            "Europe/Berlin",
            "America/New_York",
            "Etc/GMT+8",
        ] {
            let tz = JobTimeZone::parse(name).unwrap();
            assert!(matches!(tz, JobTimeZone::Named(_)), "{name}");
            assert_eq!(tz.to_string(), name);
        }
        assert_eq!(
            JobTimeZone::parse("Asia/Shanghai").unwrap(),
            JobTimeZone::Named(chrono_tz::Asia::Shanghai)
        );
    }

    #[test]
    fn parses_java_custom_ids() {
        assert_eq!(offset_of("GMT+08:00"), 8 * 3600);
        assert_eq!(offset_of("GMT+8:00"), 8 * 3600);
        assert_eq!(offset_of("GMT-5"), -5 * 3600);
        assert_eq!(offset_of("GMT-05"), -5 * 3600);
        assert_eq!(offset_of("GMT+0530"), 5 * 3600 + 30 * 60);
        assert_eq!(offset_of("GMT+530"), 5 * 3600 + 30 * 60);
        assert_eq!(offset_of("GMT+8"), 8 * 3600);
        assert_eq!(offset_of("GMT"), 0);
        assert_eq!(offset_of("GMT+0"), 0);
        assert_eq!(offset_of("GMT-23:59"), -(23 * 3600 + 59 * 60));
        assert_eq!(offset_of("  GMT+08:00\t"), 8 * 3600);
    }

    #[test]
    fn displays_canonical_names() {
        let cases = [
            ("GMT+8", "GMT+08:00"),
            ("GMT+08:00", "GMT+08:00"),
            ("GMT-5", "GMT-05:00"),
            ("GMT+0530", "GMT+05:30"),
            ("GMT", "GMT"),
            ("GMT-0", "GMT+00:00"),
            (" Asia/Shanghai ", "Asia/Shanghai"),
        ];
        for (input, shown) in cases {
            assert_eq!(JobTimeZone::parse(input).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn display_round_trips() {
        for input in [
            "GMT+8",
            "GMT-0930",
            "GMT",
            "GMT+00:00",
            "UTC",
            "Asia/Kolkata",
            "America/New_York",
            "Europe/Berlin",
            "GMT0",
            "Etc/GMT-14",
        ] {
            let tz = JobTimeZone::parse(input).unwrap();
            let again = JobTimeZone::parse(&tz.to_string()).unwrap();
            assert_eq!(again, tz, "{input}");
            assert_eq!(again.to_string(), tz.to_string(), "{input}");
        }
    }

    #[test]
    fn rejects_bad_input() {
        let cases = [
            "",
            "   ",
            "Asia/Nowhere",
            "asia/shanghai",
            "GMT+24",
            "GMT+08:60",
            "GMT+8:0",
            "GMT+08:000",
            "GMT+12345",
            "GMT+",
            "GMT-",
            "GMT+8h",
            "GMT++8",
            "GMT+:30",
            "UTC+8",
            "gmt+8",
            "+08:00",
            "CST6CDT7",
        ];
        for input in cases {
            let err = JobTimeZone::parse(input).unwrap_err();
            let message = err.to_string();
            assert!(
                message.contains("IANA") && message.contains("GMT+HH:MM"),
                "{input}: {message}"
            );
            if !input.trim().is_empty() {
                assert!(message.contains(input.trim()), "{input}: {message}");
            }
        }
    }

    #[test]
    fn error_suggests_the_right_case() {
        let err = JobTimeZone::parse("asia/shanghai").unwrap_err();
        assert_eq!(
            err,
            TimeZoneError::Unknown {
                input: "asia/shanghai".into(),
                suggestion: Some("Asia/Shanghai".into())
            }
        );
        assert!(err.to_string().contains("did you mean `Asia/Shanghai`?"));
    }

    #[test]
    fn very_long_input_is_quoted_short() {
        let long = "X".repeat(10_000);
        let message = JobTimeZone::parse(&long).unwrap_err().to_string();
        assert!(message.len() < 600, "{}", message.len());
    }

    #[test]
    fn default_is_utc() {
        assert_eq!(JobTimeZone::default(), JobTimeZone::utc());
        assert_eq!(JobTimeZone::utc().to_string(), "UTC");
        assert_eq!("UTC".parse::<JobTimeZone>().unwrap(), JobTimeZone::utc());
    }

    #[test]
    fn fixed_constructor() {
        let tz = JobTimeZone::fixed(FixedOffset::west_opt(3 * 3600 + 1800).unwrap()).unwrap();
        assert_eq!(tz.to_string(), "GMT-03:30");
        assert_eq!(JobTimeZone::parse("GMT-03:30").unwrap(), tz);
        assert_eq!(
            JobTimeZone::fixed(FixedOffset::east_opt(61).unwrap()),
            Err(TimeZoneError::UnrepresentableOffset { seconds: 61 })
        );
    }

    #[test]
    fn serde_uses_the_display_string() {
        let tz = JobTimeZone::parse("GMT+8").unwrap();
        assert_eq!(serde_yaml_ng::to_string(&tz).unwrap().trim(), "GMT+08:00");
        let back: JobTimeZone = serde_yaml_ng::from_str("Asia/Shanghai").unwrap();
        assert_eq!(back, JobTimeZone::Named(chrono_tz::Asia::Shanghai));
        let err = serde_yaml_ng::from_str::<JobTimeZone>("Mars/Olympus").unwrap_err();
        assert!(err.to_string().contains("Mars/Olympus"), "{err}");
    }

    #[test]
    fn converts_between_utc_and_local() {
        let instant = Utc.with_ymd_and_hms(2026, 7, 1, 1, 0, 0).unwrap();
        let shanghai = JobTimeZone::parse("Asia/Shanghai").unwrap();
        let local = NaiveDate::from_ymd_opt(2026, 7, 1)
            .unwrap()
            .and_hms_opt(9, 0, 0)
            .unwrap();
        assert_eq!(shanghai.to_local(instant), local);
        assert_eq!(shanghai.offset_at(instant).local_minus_utc(), 8 * 3600);
        assert_eq!(shanghai.from_local(local), LocalResult::Single(instant));
        let fixed = JobTimeZone::parse("GMT+08:00").unwrap();
        assert_eq!(fixed.to_local(instant), local);
        assert_eq!(fixed.from_local(local), LocalResult::Single(instant));

        // New York springs forward on 2026-03-08 at 02:00 and falls back on 2026-11-01.
        let new_york = JobTimeZone::parse("America/New_York").unwrap();
        let gap = NaiveDate::from_ymd_opt(2026, 3, 8)
            .unwrap()
            .and_hms_opt(2, 30, 0)
            .unwrap();
        assert_eq!(new_york.from_local(gap), LocalResult::None);
        let repeated = NaiveDate::from_ymd_opt(2026, 11, 1)
            .unwrap()
            .and_hms_opt(1, 30, 0)
            .unwrap();
        assert_eq!(
            new_york.from_local(repeated),
            LocalResult::Ambiguous(
                Utc.with_ymd_and_hms(2026, 11, 1, 5, 30, 0).unwrap(),
                Utc.with_ymd_and_hms(2026, 11, 1, 6, 30, 0).unwrap()
            )
        );
    }
}
