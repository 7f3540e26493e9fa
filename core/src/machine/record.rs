//! The per-item execution record, `sharding/{item}/execution`: shardjob's addition to the
//! ElasticJob layout.
//!
//! ElasticJob keeps no durable trace of which fire an item last ran, so a restart either re-runs
//! finished work (#522, #2161) or forgets running work (#2429). shardjob writes one small JSON
//! node per item, in the same transactions that create and remove the `running` marker:
//!
//! ```json
//! {"done":1764050400000,"run":{"fire":1764050460000,"kind":"SCHEDULED","instance":"10.0.0.1@-@42"}}
//! ```
//!
//! `done` is the last scheduled fire (epoch milliseconds, UTC) whose run was recorded as
//! finished; `run` is the run in progress, if any. A `run` whose `running` marker is gone died
//! with its instance's session: failover runs it again, or, with failover off, the fire is
//! given up.
//!
//! Beside the items' records, the `instances` node's data holds when the job's cluster last
//! started ([`StartRecord`]): fires from before it were missed while no instance was
//! registered, and are not due (beyond the job's catch-up bound). The items' records are not
//! changed by that rule, so any owner derives it from the same two numbers.

use serde::{Deserialize, Serialize};

use crate::instance::InstanceId;

/// Why an item runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunKind {
    /// A cron fire, on time.
    Scheduled,
    /// A cron fire run late, after the item's previous run ended or ownership moved, or after
    /// downtime within the job's catch-up bound (ElasticJob's `MISFIRE` source). Several
    /// missed fires collapse into one such run.
    Misfire,
    /// A fire whose run died with its instance, run again elsewhere.
    Failover,
    /// A manual trigger; does not count as a fire.
    Trigger,
}

impl RunKind {
    /// The kind's name as stored in execution records (its serde name: `SCHEDULED`,
    /// `MISFIRE`, `FAILOVER`, `TRIGGER`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Scheduled => "SCHEDULED",
            RunKind::Misfire => "MISFIRE",
            RunKind::Failover => "FAILOVER",
            RunKind::Trigger => "TRIGGER",
        }
    }

    /// ElasticJob's `ExecutionSource` name for this kind (`NORMAL_TRIGGER`, `MISFIRE`,
    /// `FAILOVER`); triggers are `NORMAL_TRIGGER` as in ElasticJob.
    pub fn execution_source(self) -> &'static str {
        match self {
            RunKind::Scheduled | RunKind::Trigger => "NORMAL_TRIGGER",
            RunKind::Misfire => "MISFIRE",
            RunKind::Failover => "FAILOVER",
        }
    }
}

/// A run in progress, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The scheduled fire time (epoch ms, UTC), or the trigger time for a trigger.
    pub fire: i64,
    /// Why it runs.
    pub kind: RunKind,
    /// The instance running it.
    pub instance: InstanceId,
}

/// The content of `sharding/{item}/execution`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ItemRecord {
    /// The last scheduled fire whose run finished and was recorded (epoch ms, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<i64>,
    /// The run in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunRecord>,
}

impl ItemRecord {
    /// Reads a record; `Err` with a message for anything that is not one.
    pub fn parse(data: &[u8]) -> Result<Self, String> {
        // Every instance reads every record it sees: the bytes `to_bytes` writes are read
        // directly, anything else by serde (which reads those bytes to the same record).
        if let Some(record) = parse_canonical(data) {
            return Ok(record);
        }
        serde_json::from_slice(data).map_err(|e| format!("not an execution record: {e}"))
    }

    /// The record as stored: compact JSON, fields in declaration order (what `serde_json`
    /// writes, byte for byte).
    pub fn to_bytes(&self) -> Vec<u8> {
        // Every claim and every completion writes records: they are written directly unless the
        // instance id needs escaping, which serde then does.
        let plain = |id: &InstanceId| {
            !id.as_str()
                .bytes()
                .any(|b| b == b'"' || b == b'\\' || b < 0x20)
        };
        if !self.run.as_ref().is_none_or(|r| plain(&r.instance)) {
            // A struct of integers, an enum and a checked string always serializes.
            return serde_json::to_vec(self).unwrap_or_default();
        }
        let id_len = self.run.as_ref().map_or(0, |r| r.instance.as_str().len());
        let mut out = Vec::with_capacity(96 + id_len);
        out.push(b'{');
        if let Some(done) = self.done {
            out.extend_from_slice(br#""done":"#);
            push_i64(&mut out, done);
        }
        if let Some(run) = &self.run {
            if self.done.is_some() {
                out.push(b',');
            }
            out.extend_from_slice(br#""run":{"fire":"#);
            push_i64(&mut out, run.fire);
            out.extend_from_slice(br#","kind":""#);
            out.extend_from_slice(run.kind.as_str().as_bytes());
            out.extend_from_slice(br#"","instance":""#);
            out.extend_from_slice(run.instance.as_str().as_bytes());
            out.extend_from_slice(br#""}"#);
        }
        out.push(b'}');
        out
    }
}

/// The content of the `instances` directory node: when the job's cluster last started.
///
/// An instance that registers while no instance node of the job exists (none at all, not even
/// one of a dead session that the registry still shows) starts the job's cluster, and writes
/// the time of that start (its wall clock, epoch ms) here, in the transaction that registers
/// it. ElasticJob leaves this node empty and never reads it:
///
/// ```json
/// {"started":1764050400000}
/// ```
///
/// Every instance reads the same number from the registry, so every instance decides the same
/// way which fires were missed while the job had no live instance: those before the start
/// (see the module documentation of [`crate::machine`], "Start-up after downtime").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StartRecord {
    /// When the cluster last started (epoch ms, UTC); `None` if no start was recorded (a
    /// registry written by an older shardjob, or by ElasticJob).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<i64>,
}

impl StartRecord {
    /// Reads the node's data; anything unreadable (an empty node included) is no start.
    pub fn parse(data: &[u8]) -> Self {
        serde_json::from_slice(data).unwrap_or_default()
    }

    /// The record as stored: compact JSON.
    pub fn to_bytes(self) -> Vec<u8> {
        match self.started {
            Some(t) => format!(r#"{{"started":{t}}}"#).into_bytes(),
            None => b"{}".to_vec(),
        }
    }
}

/// Reads a record written exactly as [`ItemRecord::to_bytes`] writes it (fields in order, no
/// space, integers in canonical decimal, an instance id with nothing JSON would escape); `None`
/// for anything else, even a valid record written otherwise.
fn parse_canonical(data: &[u8]) -> Option<ItemRecord> {
    let mut rest = data.strip_prefix(b"{")?;
    let mut record = ItemRecord::default();
    let mut run_follows = false;
    if let Some(r) = rest.strip_prefix(br#""done":"#) {
        let (done, r) = canonical_i64(r)?;
        record.done = Some(done);
        rest = match r.strip_prefix(b",") {
            Some(r) => {
                run_follows = true;
                r
            }
            None => r,
        };
    }
    if let Some(r) = rest.strip_prefix(br#""run":{"fire":"#) {
        let (fire, r) = canonical_i64(r)?;
        let r = r.strip_prefix(br#","kind":""#)?;
        let end = r.iter().position(|b| *b == b'"')?;
        let kind = match &r[..end] {
            b"SCHEDULED" => RunKind::Scheduled,
            b"MISFIRE" => RunKind::Misfire,
            b"FAILOVER" => RunKind::Failover,
            b"TRIGGER" => RunKind::Trigger,
            _ => return None,
        };
        let r = r[end..].strip_prefix(br#"","instance":""#)?;
        let end = r.iter().position(|b| *b == b'"')?;
        let raw = &r[..end];
        if raw.iter().any(|b| *b == b'\\' || *b < 0x20) {
            return None;
        }
        let instance = InstanceId::new(std::str::from_utf8(raw).ok()?).ok()?;
        rest = r[end..].strip_prefix(br#""}"#)?;
        record.run = Some(RunRecord {
            fire,
            kind,
            instance,
        });
    } else if run_follows {
        return None;
    }
    (rest == b"}").then_some(record)
}

/// Appends `value` in decimal, as `Display` writes it.
fn push_i64(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    let mut buf = [0u8; 20];
    out.extend_from_slice(crate::layout::decimal(value.unsigned_abs(), &mut buf).as_bytes());
}

/// Reads an `i64` in canonical decimal (no sign but `-`, no leading zero, no `-0`) at the
/// start of `data`; returns it and the rest.
fn canonical_i64(data: &[u8]) -> Option<(i64, &[u8])> {
    let digits_from = usize::from(data.first() == Some(&b'-'));
    let len = data[digits_from..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    let digits = &data[digits_from..digits_from + len];
    if len == 0 || (digits[0] == b'0' && (len > 1 || digits_from == 1)) {
        return None;
    }
    // Accumulated by hand (every instance reads every record it sees, and `str::parse` costs
    // several times more). Up to 18 digits nothing can overflow (epoch milliseconds have 13):
    // plain arithmetic.
    let negative = digits_from == 1;
    if len <= 18 {
        let mut magnitude: i64 = 0;
        for digit in digits {
            magnitude = magnitude * 10 + i64::from(digit - b'0');
        }
        let value = if negative { -magnitude } else { magnitude };
        return Some((value, &data[digits_from + len..]));
    }
    // Longer: towards the sign, so that `i64::MIN` reads and overflow is `None` as with
    // `parse`.
    let mut value: i64 = 0;
    for digit in digits {
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some((value, &data[digits_from + len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let r = ItemRecord {
            done: Some(5),
            run: Some(RunRecord {
                fire: 7,
                kind: RunKind::Failover,
                instance: InstanceId::new("h@-@1").unwrap(),
            }),
        };
        let bytes = r.to_bytes();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"done":5,"run":{"fire":7,"kind":"FAILOVER","instance":"h@-@1"}}"#
        );
        assert_eq!(ItemRecord::parse(&bytes).unwrap(), r);
        assert_eq!(ItemRecord::parse(b"{}").unwrap(), ItemRecord::default());
        assert!(ItemRecord::parse(b"garbage").is_err());
        for kind in [
            RunKind::Scheduled,
            RunKind::Misfire,
            RunKind::Failover,
            RunKind::Trigger,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
        assert!(ItemRecord::parse(br#"{"run":{"fire":1,"kind":"X","instance":"a"}}"#).is_err());
        assert!(
            ItemRecord::parse(br#"{"run":{"fire":1,"kind":"TRIGGER","instance":"a/b"}}"#).is_err()
        );
    }

    #[test]
    fn start_records_round_trip_and_garbage_is_no_start() {
        let r = StartRecord {
            started: Some(1_764_050_400_000),
        };
        assert_eq!(r.to_bytes(), br#"{"started":1764050400000}"#);
        assert_eq!(serde_json::to_vec(&r).unwrap(), r.to_bytes());
        assert_eq!(StartRecord::parse(&r.to_bytes()), r);
        assert_eq!(StartRecord::parse(b"").started, None);
        assert_eq!(StartRecord::parse(b"10.0.0.1").started, None);
        assert_eq!(StartRecord::parse(br#"{"started":"x"}"#).started, None);
        assert_eq!(StartRecord::default().to_bytes(), b"{}");
    }

    #[test]
    fn the_direct_reading_agrees_with_serde() {
        let serde = |data: &[u8]| {
            serde_json::from_slice::<ItemRecord>(data)
                .map_err(|e| format!("not an execution record: {e}"))
        };
        let cases: &[&[u8]] = &[
            b"{}",
            b"{ }",
            b"",
            b"{",
            br#"{"done":0}"#,
            br#"{"done":-0}"#,
            br#"{"done":07}"#,
            br#"{"done":-12}"#,
            br#"{"done":999999999999999999}"#,
            br#"{"done":-999999999999999999}"#,
            br#"{"done":1000000000000000000}"#,
            br#"{"done":-1000000000000000000}"#,
            br#"{"done":9223372036854775807}"#,
            br#"{"done":9223372036854775808}"#,
            br#"{"done":-9223372036854775808}"#,
            br#"{"done":1,}"#,
            br#"{"done":1,"run":{"fire":2,"kind":"MISFIRE","instance":"h@-@1"}}"#,
            br#"{"run":{"fire":2,"kind":"SCHEDULED","instance":"h@-@1"}}"#,
            br#"{"run":{"fire":2,"kind":"TRIGGER","instance":"h@-@1"},"done":3}"#,
            br#"{"run":{"fire":2,"kind":"BOGUS","instance":"h@-@1"}}"#,
            br#"{"run":{"fire":2,"kind":"FAILOVER","instance":""}}"#,
            br#"{"run":{"fire":2,"kind":"FAILOVER","instance":"a\/b"}}"#,
            br#"{"run":{"fire":2,"kind":"FAILOVER","instance":"a b"}}"#,
            br#"{"run":{"fire":2,"kind":"FAILOVER","instance":"\u0068@-@1"}}"#,
            "{\"run\":{\"fire\":2,\"kind\":\"FAILOVER\",\"instance\":\"\u{e9}@-@1\"}}".as_bytes(),
            br#"{"run":{"fire":2,"kind":"FAILOVER","instance":"h@-@1"}} "#,
            br#"{"done":5}{"#,
            br#"{"done":-9223372036854775809}"#,
        ];
        for data in cases {
            assert_eq!(
                ItemRecord::parse(data),
                serde(data),
                "{}",
                String::from_utf8_lossy(data)
            );
        }
        // What `to_bytes` writes is what serde writes.
        let ids = ["h@-@1", "a\"b@-@2", "a\\b", "\u{e9}t\u{e9}@-@3", "x~y@-@4"];
        for id in ids {
            for done in [None, Some(0), Some(-7), Some(i64::MAX), Some(i64::MIN)] {
                for kind in [RunKind::Scheduled, RunKind::Trigger] {
                    let run = Some(RunRecord {
                        fire: done.unwrap_or(1).wrapping_add(3),
                        kind,
                        instance: InstanceId::new(id).unwrap(),
                    });
                    for run in [None, run] {
                        let record = ItemRecord { done, run };
                        let bytes = record.to_bytes();
                        assert_eq!(bytes, serde_json::to_vec(&record).unwrap());
                        assert_eq!(ItemRecord::parse(&bytes).unwrap(), record);
                    }
                }
            }
        }
        // The records `to_bytes` writes are read directly.
        for k in [0, 4, 7, 8, 9, 10, 11, 12, 14, 16, 17, 24] {
            let record = parse_canonical(cases[k]).expect("a canonical record");
            assert_eq!(record.to_bytes(), cases[k]);
        }
    }
}
