//! The readable timeline of a world (`shardjob-sim --seed N`): times as `+12.345s` from the
//! world's start, and what happened in words rather than `Debug` dumps.
//!
//! Only the text of the log comes from here: the trace hash of a world hashes what happened,
//! never these words, so changing them changes no seed's trace.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use shardjob_core::InstanceId;
use shardjob_core::machine::record::RunKind;
use shardjob_core::machine::{CancelReason, MachineEvent, StaleSettle};
use shardjob_core::registry::SessionEvent;

/// A virtual time, ms from the world's start, as `+12.345s`.
pub fn clock(ms: u64) -> String {
    format!("+{}.{:03}s", ms / 1000, ms % 1000)
}

/// A fire time in epoch ms, as `+12.345s` from the world's start at `origin_ms` (epoch ms);
/// a fire before the start (a clock skewed back) as `-0.250s`.
pub fn fire(epoch_ms: i64, origin_ms: i64) -> String {
    let d = epoch_ms.saturating_sub(origin_ms);
    let sign = if d < 0 { '-' } else { '+' };
    let abs = d.unsigned_abs();
    format!("{sign}{}.{:03}s", abs / 1000, abs % 1000)
}

/// A list of items as `0, 3, 5`.
pub fn items(items: &[u32]) -> String {
    let mut out = String::new();
    for (k, i) in items.iter().enumerate() {
        if k > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{i}");
    }
    out
}

/// What came of a request, in words: `done`, or `refused: ` and why.
pub fn outcome<T, E: std::fmt::Display>(result: &Result<T, E>) -> String {
    match result {
        Ok(_) => "done".to_owned(),
        Err(e) => format!("refused: {e}"),
    }
}

/// An operator's write of `text` at `path`, in words: a job's configuration by the settings
/// the simulator's operators change (cron, item count, failover, misfire), anything else as
/// `path = "text"`.
pub fn written(path: &str, text: &str) -> String {
    if !path.ends_with("/config") {
        // A value of several lines (an instance's YAML) reads as its lines, not escapes.
        if text.contains('\n') {
            let lines: Vec<&str> = text.lines().collect();
            return format!("{path} = \"{}\"", lines.join("; "));
        }
        return format!("{path} = {text:?}");
    }
    let setting = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "{path}: cron {}, {} items, failover {}, misfire {}",
        setting("cron"),
        setting("shardingTotalCount"),
        setting("failover"),
        setting("misfire"),
    )
}

/// Why an item runs, in a word.
pub fn kind(k: RunKind) -> &'static str {
    match k {
        RunKind::Scheduled => "scheduled",
        RunKind::Misfire => "misfired",
        RunKind::Failover => "failed-over",
        RunKind::Trigger => "triggered",
    }
}

/// Why a run is cancelled, in words.
pub fn cancel_reason(r: CancelReason) -> &'static str {
    match r {
        CancelReason::SessionInDoubt => "the session is in doubt",
        CancelReason::SessionLost => "the session is lost",
        CancelReason::Shutdown => "the instance shuts down",
        CancelReason::JobRemoved => "the job is removed",
        CancelReason::OperatorShutdown => "an operator shut the job down here",
    }
}

/// A session event, in words.
pub fn session(s: &SessionEvent) -> String {
    match s {
        SessionEvent::Connected(info) => format!(
            "session {} established (timeout {} ms)",
            info.id,
            info.timeout.as_millis()
        ),
        SessionEvent::Suspended(id) => format!("session {id} suspended (connection lost)"),
        SessionEvent::Reconnected(id) => format!("session {id} reconnected"),
        SessionEvent::Expired(id) => format!("session {id} expired"),
        SessionEvent::Closed => "session closed".to_owned(),
    }
}

/// What a machine reported, in words; fire times as offsets from the world's start at
/// `origin_ms` (epoch ms).
pub fn event(e: &MachineEvent, origin_ms: i64) -> String {
    match e {
        MachineEvent::JobActive { job } => format!("{job} active here"),
        MachineEvent::ConfigInvalid { job, error } => {
            format!("{job}: the registry's configuration is invalid ({error})")
        }
        MachineEvent::RegistryClockOff {
            job,
            off_ms,
            limit_ms,
        } => {
            format!(
                "{job}: runs held: the clock is {off_ms:+} ms off the registry's (limit {limit_ms} ms)"
            )
        }
        MachineEvent::RegistryClockBack { job } => {
            format!("{job}: the clock is within the limit again: runs go on")
        }
        MachineEvent::UnhonouredTimeDiff { job, seconds } => {
            format!("{job}: the registry's maxTimeDiffSeconds {seconds} is not honoured")
        }
        MachineEvent::JobTypeConflict {
            job,
            registry,
            local,
        } => format!("{job}: the registry holds a {registry} job, this instance a {local} job"),
        MachineEvent::BecameLeader { job } => format!("{job}: became the leader"),
        MachineEvent::ItemsOwned { job, items } => format!("{job}: owns items {items:?}"),
        MachineEvent::ReshardingPending { job, pending: true } => {
            format!("{job}: a re-shard is pending")
        }
        MachineEvent::ReshardingPending {
            job,
            pending: false,
        } => format!("{job}: no re-shard pending"),
        MachineEvent::Resharded {
            job,
            owners,
            moved_running,
        } => {
            let mut by_owner: BTreeMap<&InstanceId, Vec<u32>> = BTreeMap::new();
            for (item, owner) in owners {
                by_owner.entry(owner).or_default().push(*item);
            }
            let mut out = format!("{job}: resharded:");
            for (k, (owner, its)) in by_owner.iter().enumerate() {
                let sep = if k == 0 { " " } else { "; " };
                let _ = write!(out, "{sep}{owner} owns {}", items(its));
            }
            if by_owner.is_empty() {
                out.push_str(" no owners");
            }
            if !moved_running.is_empty() {
                let _ = write!(out, " (moved while running: {})", items(moved_running));
            }
            out
        }
        MachineEvent::PlanRefused {
            job,
            strategy,
            problem,
        } => format!("{job}: plan of strategy {strategy} refused: {problem}"),
        MachineEvent::TxnSplit { job, items } => {
            format!("{job}: transactions split to at most {items} items")
        }
        MachineEvent::CorruptNode { path, error } => format!("corrupt node {path}: {error}"),
        MachineEvent::RegistryFailed {
            job,
            purpose,
            error,
        } => match job {
            Some(job) => format!("{job}: registry request ({purpose}) failed: {error}"),
            None => format!("registry request ({purpose}) failed: {error}"),
        },
        MachineEvent::RunRecorded { job, items: its } => {
            format!("{job}: run of items {} recorded", items(its))
        }
        MachineEvent::CompletionLost { job, items: its } => {
            format!(
                "{job}: end of items {} not recorded (session lost)",
                items(its)
            )
        }
        MachineEvent::ClockStepped { by_ms } => {
            let (dir, abs) = if *by_ms < 0 {
                ("back", by_ms.unsigned_abs())
            } else {
                ("forward", by_ms.unsigned_abs())
            };
            format!("wall clock stepped {dir} by {abs} ms")
        }
        MachineEvent::SessionInDoubt => "session in doubt: items cancelled".to_owned(),
        MachineEvent::SessionLost => "session lost: registering again".to_owned(),
        MachineEvent::LeftUnloaded { job, reason } => {
            format!("{job}: leaving without its subtree loaded ({reason})")
        }
        MachineEvent::ReshardProgress {
            job,
            written,
            total,
        } => format!("{job}: re-sharding, {written} of {total} items written"),
        MachineEvent::OperatorShutdown { job } => {
            format!("{job}: shut down by an operator (instance node deleted, session alive)")
        }
        MachineEvent::JobLeft { job } => format!("{job}: left"),
        MachineEvent::JavaLeftOverCleared { job, path, value } => {
            format!("{job}: ElasticJob's left-over {path} ({value:?}) removed")
        }
        MachineEvent::StaleRunningCleared {
            job,
            item,
            value,
            settled,
            ..
        } => {
            let what = match settled {
                StaleSettle::FailedOver { fire: f } => {
                    format!("fire {} failed over", fire(*f, origin_ms))
                }
                StaleSettle::GivenUp { fire: f } => {
                    format!("fire {} given up", fire(*f, origin_ms))
                }
                StaleSettle::Removed => "no fire owed".to_owned(),
            };
            format!(
                "{job}/{item}: stale running marker of {:?} (no session, owner gone) removed, {what}",
                value.trim()
            )
        }
        MachineEvent::LeftMarkerRemoved { job, item, value } => format!(
            "{job}/{item}: running marker of {:?} left behind by its session removed",
            value.trim()
        ),
        MachineEvent::OrphansSettled { job, items } => format!(
            "{job}: orphaned runs of items {} settled (ElasticJob's failover has them)",
            self::items(items)
        ),
        MachineEvent::ReshardStalled {
            job,
            leader,
            waited_ms,
        } => format!(
            "{job}: ElasticJob leader {:?} has not re-sharded for {waited_ms} ms, runs held",
            leader.trim()
        ),
        MachineEvent::GoneOwnersFlagged { job, items } => {
            let items: Vec<String> = items
                .iter()
                .map(|(i, o)| {
                    if o.is_empty() {
                        format!("{i}")
                    } else {
                        format!("{i}→{o}")
                    }
                })
                .collect();
            format!(
                "{job}: the ElasticJob leader's plan names owners gone ({}): sets the re-sharding flag",
                items.join(" ")
            )
        }
        MachineEvent::UnboundInstance {
            job,
            path,
            deleting,
            ..
        } => {
            let then = if *deleting { ", garbage: deleting" } else { "" };
            format!("{job}: instance node {path} held by no session: never a candidate{then}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_and_fires_are_offsets_from_the_start() {
        assert_eq!(clock(0), "+0.000s");
        assert_eq!(clock(12_345), "+12.345s");
        assert_eq!(fire(1_000_250, 1_000_000), "+0.250s");
        assert_eq!(fire(999_750, 1_000_000), "-0.250s");
    }

    #[test]
    fn events_are_words() {
        let id = |s: &str| InstanceId::new(s).unwrap();
        let e = MachineEvent::Resharded {
            job: "job0".into(),
            owners: [
                (0, id("10.0.0.3@-@102")),
                (1, id("10.0.0.1@-@100")),
                (2, id("10.0.0.3@-@102")),
            ]
            .into(),
            moved_running: vec![2],
        };
        assert_eq!(
            event(&e, 0),
            "job0: resharded: 10.0.0.1@-@100 owns 1; 10.0.0.3@-@102 owns 0, 2 (moved while running: 2)"
        );
        let e = MachineEvent::RunRecorded {
            job: "job1".into(),
            items: vec![0, 3],
        };
        assert_eq!(event(&e, 0), "job1: run of items 0, 3 recorded");
        assert!(!event(&MachineEvent::ClockStepped { by_ms: -40 }, 0).contains('{'));
        // A stale marker's fire reads from the world's start, as the runs' fires do.
        let e = MachineEvent::StaleRunningCleared {
            job: "job1".into(),
            item: 2,
            path: "/job1/sharding/2/running".into(),
            value: "10.9.9.8@-@90002\n".into(),
            settled: StaleSettle::GivenUp {
                fire: 1_795_327_225_000,
            },
        };
        assert_eq!(
            event(&e, 1_795_327_200_000),
            "job1/2: stale running marker of \"10.9.9.8@-@90002\" (no session, owner gone) removed, fire +25.000s given up"
        );
    }

    #[test]
    fn operators_writes_are_words() {
        let yaml = "cron: 0/5 * * * * ?\nfailover: true\nmisfire: false\nshardingTotalCount: 3\n";
        assert_eq!(
            written("/job1/config", yaml),
            "/job1/config: cron 0/5 * * * * ?, 3 items, failover true, misfire false"
        );
        assert_eq!(
            written("/job1/servers/10.0.0.1", "DISABLED"),
            "/job1/servers/10.0.0.1 = \"DISABLED\""
        );
        assert_eq!(outcome::<(), String>(&Ok(())), "done");
        assert_eq!(
            outcome::<(), _>(&Err("the registry is down")),
            "refused: the registry is down"
        );
    }
}
