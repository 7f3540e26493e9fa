//! Stale and foreign nodes: `running` markers that no session holds and whose owner is gone,
//! and `instances/` nodes that no session holds.
//!
//! shardjob's own `running` markers are bound to the session that claimed the item: they go
//! with it, and an item is never blocked for longer than a session timeout. A marker no
//! session holds is someone else's: an ElasticJob instance with `failover` on writes its
//! markers persistent, and leaves them behind when it is killed mid-run; a tool or a hand may
//! write one. Such a marker blocks its item only while its owner (the marker's value) is a
//! live instance. Once the leader has seen it without a live owner for a session timeout (an
//! ElasticJob instance whose session was lost has that long to come back and remove its
//! markers itself, and ElasticJob's own failover acts at once on the instance's deletion), the
//! leader removes it in a transaction that checks the marker's version, and settles the fire
//! the marker stood for (its *attributed* fire: the latest fire at or before the moment the
//! leader first saw the marker, within the misfire tolerance):
//!
//! - `failover` (with `monitorExecution`) on: the item's execution record names that fire as
//!   a run in progress, so the marker's removal makes it an orphan that failover runs once
//!   (if the record already names a run, that run is the orphan);
//! - `failover` off: the fire is given up (recorded as done), as ElasticJob gives up the fire
//!   of a dead instance without failover;
//! - a fire the record shows done already, or no fire at all: the marker is only removed.
//!
//! An `instances/` node no session holds (a persistent node: `ephemeralOwner` 0 on ZooKeeper,
//! no lease on etcd) is never a candidate for items ([`JobView::eligible`]); the leader warns
//! about it once, and deletes it (checking its version) when it is plainly garbage: its id is
//! not `{ip}@-@{pid}` or its value is not an instance's YAML.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::instance::DELIMITER;
use crate::registry::Revision;

use super::leftovers;

#[allow(clippy::wildcard_imports)]
use crate::machine::*;

/// The longest span before the first sight of a marker searched for its attributed fire.
const ATTRIBUTION_WINDOW_MS: i64 = 86_400_000;

/// What the leader remembers of a `running` marker no session holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeenMarker {
    /// The marker's creation revision: a new marker of the item is seen afresh.
    pub(crate) created: Revision,
    /// When the leader first saw it (epoch ms): its fire is attributed from this.
    pub(crate) seen_wall: i64,
    /// Since when (monotonic ms) its owner has been seen gone, if it is.
    pub(crate) stale_since: Option<Mono>,
}

/// What the leader does about the markers no session holds now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct StalePlan {
    /// What it remembers of each such marker after this decision.
    pub(crate) seen: BTreeMap<u32, SeenMarker>,
    /// The items whose marker it removes now, ascending.
    pub(crate) clear: Vec<u32>,
    /// When the next marker's grace runs out (monotonic ms), if one waits.
    pub(crate) wake: Option<Mono>,
}

/// Which markers no session holds are stale now. A marker's owner lives while `live` says so
/// of its value; once the leader has seen it gone for `grace_ms`, the marker is cleared.
/// `first_sight` tells when this instance first saw a marker (by item and creation revision),
/// if it watched it appear (else it is first seen now).
/// `seen` is what the leader remembered from earlier decisions; `now_mono`/`now_wall` the
/// time.
pub(crate) fn stale_markers<'a>(
    markers: impl IntoIterator<Item = (u32, &'a str, Revision)>,
    live: impl Fn(&str) -> bool,
    first_sight: impl Fn(u32, Revision) -> Option<i64>,
    seen: &BTreeMap<u32, SeenMarker>,
    grace_ms: u64,
    now_mono: Mono,
    now_wall: i64,
) -> StalePlan {
    let mut plan = StalePlan::default();
    for (item, owner, created) in markers {
        let mut m = seen
            .get(&item)
            .filter(|m| m.created == created)
            .copied()
            .unwrap_or(SeenMarker {
                created,
                seen_wall: first_sight(item, created).unwrap_or(now_wall),
                stale_since: None,
            });
        if live(owner) {
            m.stale_since = None;
        } else {
            let since = *m.stale_since.get_or_insert(now_mono);
            let due = since.after(grace_ms);
            if now_mono >= due {
                plan.clear.push(item);
            } else {
                plan.wake = Some(plan.wake.map_or(due, |w| w.min(due)));
            }
        }
        plan.seen.insert(item, m);
    }
    plan
}

/// The fire a marker first seen at `seen_wall` (epoch ms) stands for: the latest fire of the
/// job's cron at or before it, within `tolerance_ms` (the owner starts its runs at the fire
/// by its own clock), later than `done` (the item's last fire done) and at most a day before.
/// `None` when there is none.
pub(crate) fn attributed_fire(
    memo: &mut FireMemo,
    config: &Arc<JobConfig>,
    done: Option<i64>,
    seen_wall: i64,
    tolerance_ms: i64,
) -> Option<i64> {
    let until = seen_wall.saturating_add(tolerance_ms);
    let floor = seen_wall.saturating_sub(ATTRIBUTION_WINDOW_MS);
    let mut after = done.map_or(floor, |d| d.max(floor));
    let mut last = None;
    for _ in 0..claim::fires::MAX_CATCH_UP_STEPS {
        match memo.next_after(config, after) {
            Some(t) if t <= until => {
                last = Some(t);
                after = t;
            }
            _ => break,
        }
    }
    last
}

/// What the removal of a stale marker does to its item's execution record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// The record is left as it is: it names a run already (which becomes an orphan that
    /// failover takes, if on), or the marker's fire is done or unknown.
    Keep,
    /// The record names the fire as a run in progress: failover runs it.
    FailOver(i64),
    /// The record counts the fire as done: it is given up.
    GiveUp(i64),
}

/// How the removal of a stale marker settles the fire it stood for (see the module
/// documentation): `record` is the item's execution record, `fire` the marker's attributed
/// fire, `failover` whether failover (with execution monitoring) is on.
pub(crate) fn settle(record: Option<&ItemRecord>, fire: Option<i64>, failover: bool) -> Settle {
    let done = record.and_then(|r| r.done);
    let Some(fire) = fire.filter(|f| done.is_none_or(|d| *f > d)) else {
        return Settle::Keep;
    };
    match (failover, record.and_then(|r| r.run.as_ref())) {
        (true, Some(_)) => Settle::Keep,
        (true, None) => Settle::FailOver(fire),
        (false, _) => Settle::GiveUp(fire),
    }
}

/// Whether an instance id is of ElasticJob's form `{ip}@-@{pid}` (shardjob's loopback form
/// `{ip}@-@{pid}-{random}` too).
pub(crate) fn well_formed_id(id: &str) -> bool {
    let Some((ip, rest)) = id.split_once(DELIMITER) else {
        return false;
    };
    let (pid, suffix) = rest.split_once('-').unwrap_or((rest, ""));
    ip.parse::<IpAddr>().is_ok()
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && suffix.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Whether `value` reads as the instance YAML of `id` (`jobInstanceId: {id}` on a line of its
/// own, as both ElasticJob and shardjob write it).
pub(crate) fn instance_yaml(id: &str, value: &str) -> bool {
    value.lines().any(|line| {
        line.trim()
            .strip_prefix("jobInstanceId:")
            .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\''))
            == Some(id)
    })
}

/// One stale marker removed by a transaction, for its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cleared {
    pub(crate) item: u32,
    pub(crate) path: NodePath,
    pub(crate) value: String,
    pub(crate) settle: Settle,
}

/// The leader's care of foreign nodes: warns once about each instance node no session holds,
/// and removes stale markers and garbage instance nodes, at most `limit` of them per
/// transaction. Updates `lead`'s memory of the markers; wake times go to `wake`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn foreign_nodes(
    lead: &mut LeaderState,
    j: &mut Job,
    view: &JobView,
    config: &Arc<JobConfig>,
    cx: &Ctx<'_>,
    grace_ms: u64,
    events: &mut Vec<MachineEvent>,
    wake: &mut Vec<Mono>,
) -> Option<Action> {
    let (me, opts, now) = (cx.me, cx.opts, cx.now);
    let p = &j.paths;
    // Instance nodes no session holds: warned about once each.
    let mut garbage: Vec<(InstanceId, Version)> = Vec::new();
    let mut known: BTreeSet<NodePath> = BTreeSet::new();
    for (id, u) in &view.unbound {
        let path = p.instance(id);
        let junk = !well_formed_id(id.as_str()) || !instance_yaml(id.as_str(), &u.value);
        if !lead.foreign_reported.contains(&path) {
            events.push(MachineEvent::UnboundInstance {
                job: j.name().to_owned(),
                path: path.to_string(),
                value: u.value.clone(),
                deleting: junk,
            });
        }
        known.insert(path);
        if junk {
            garbage.push((id.clone(), u.version));
        }
    }
    lead.foreign_reported = known;

    // Markers no session holds.
    let markers = view.persistent_running.iter().filter_map(|i| {
        let (value, stat) = view.items.get(i)?.running.as_ref()?;
        Some((*i, value.as_str(), stat.created))
    });
    let sights = &j.markers_seen;
    let plan = stale_markers(
        markers,
        |owner| view.is_live(owner),
        |i, created| {
            sights
                .get(&i)
                .filter(|(c, _)| *c == created)
                .map(|(_, at)| *at)
        },
        &lead.stale_seen,
        grace_ms,
        now.mono,
        now.wall_ms(),
    );
    lead.stale_seen = plan.seen.clone();
    wake.extend(plan.wake);
    let clear = if planted!(opts, KeepStaleRunning) {
        Vec::new()
    } else {
        plan.clear
    };

    // What ElasticJob left once it no longer shares the job.
    let found = leftovers::found(view, !view.java.is_empty());
    let left = leftovers::plan(&found, &lead.leftovers_seen, grace_ms, now.mono);
    lead.leftovers_seen = left.seen;
    wake.extend(left.wake);
    let left_clear: Vec<&leftovers::Found> = if planted!(opts, KeepJavaLeftovers) {
        Vec::new()
    } else {
        found
            .iter()
            .filter(|f| left.clear.contains(&f.what))
            .collect()
    };
    if clear.is_empty() && garbage.is_empty() && left_clear.is_empty() {
        return None;
    }
    let limit = j.txn_limit(opts).unwrap_or(usize::MAX).max(1);
    let mut ops = vec![
        TxnOp::Check(Check::Session(cx.sid)),
        TxnOp::Check(Check::Value(p.leader_instance(), me.as_str().into())),
    ];
    let failover = config.failover && config.monitor_execution;
    let tolerance = i64::try_from(opts.misfire_tolerance.as_millis()).unwrap_or(i64::MAX);
    let mut cleared = Vec::new();
    for i in clear.into_iter().take(limit) {
        let (Some(v), Some(seen)) = (view.items.get(&i), plan.seen.get(&i)) else {
            continue;
        };
        let Some((value, stat)) = &v.running else {
            continue;
        };
        let record = v.record.as_ref().map(|(r, _)| r);
        let done = record.and_then(|r| r.done);
        let fire = attributed_fire(&mut j.fires, config, done, seen.seen_wall, tolerance);
        let settle = settle(record, fire, failover);
        let path = p.item_running(i);
        // The version alone does not tell this marker from a newer one: a node created again
        // starts again at version 0 on ZooKeeper, and a leader whose watch is late (or whose
        // earlier removal timed out but was applied) still sees the old one. So the removal
        // also checks what a newer marker would change: its value (who owns it), and the
        // item's execution record, which every claim of a shardjob instance rewrites.
        let guard = !planted!(opts, StaleRemovalByVersion);
        if guard && !value.contains(char::REPLACEMENT_CHARACTER) {
            ops.push(TxnOp::Check(Check::Value(
                path.clone(),
                value.as_bytes().to_vec(),
            )));
        }
        ops.push(TxnOp::Delete {
            path: path.clone(),
            expected: Some(stat.version),
        });
        let prior = record.cloned().unwrap_or_default();
        let written = match settle {
            Settle::Keep => None,
            Settle::FailOver(fire) => Some(ItemRecord {
                done: prior.done,
                run: Some(RunRecord {
                    fire,
                    kind: RunKind::Scheduled,
                    instance: InstanceId::new(value.trim()).unwrap_or_else(|_| me.clone()),
                }),
            }),
            Settle::GiveUp(fire) => Some(ItemRecord {
                done: Some(prior.done.map_or(fire, |d| d.max(fire))),
                run: prior.run,
            }),
        };
        let version = v.record.as_ref().map(|(_, ver)| *ver);
        match (written, version) {
            (Some(rec), version) => ops.push(record_write(p.item_execution(i), &rec, version)),
            (None, _) if !guard => {}
            (None, Some(version)) => {
                ops.push(TxnOp::Check(Check::Version(p.item_execution(i), version)));
            }
            (None, None) => ops.push(TxnOp::Check(Check::Absent(p.item_execution(i)))),
        }
        cleared.push(Cleared {
            item: i,
            path,
            value: value.clone(),
            settle,
        });
    }
    let room = limit.saturating_sub(cleared.len());
    let mut units = cleared.len();
    for (id, version) in garbage.into_iter().take(room) {
        ops.push(TxnOp::Delete {
            path: p.instance(&id),
            expected: Some(version),
        });
        units += 1;
    }
    let mut removed_leftovers = Vec::new();
    for f in left_clear.into_iter().take(limit.saturating_sub(units)) {
        let path = leftovers::path(p, f.what);
        ops.push(TxnOp::Delete {
            path: path.clone(),
            expected: Some(f.version),
        });
        removed_leftovers.push((path, f.value.clone()));
        units += 1;
    }
    if units == 0 {
        return None;
    }
    Some(Action::Txn(
        Purpose::Foreign {
            cleared,
            leftovers: removed_leftovers,
            units,
        },
        ops,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::CronExpr;

    /// A marker whose owner lives is kept, however long; one whose owner is gone is cleared
    /// once it has been seen gone for the grace; a new marker of the item starts afresh; an
    /// owner that comes back resets the grace.
    #[test]
    fn stale_markers_wait_a_grace_then_go() {
        let live = |o: &str| o == "10.0.0.1@-@1";
        let m = |item, owner, rev| (item, owner, Revision(rev));
        let empty = BTreeMap::new();
        let first = stale_markers(
            [m(0, "10.0.0.1@-@1", 5), m(1, "10.9.9.9@-@9", 6)],
            live,
            |_, _| None,
            &empty,
            10_000,
            Mono(1_000),
            50_000,
        );
        assert!(first.clear.is_empty(), "nothing before the grace");
        assert_eq!(first.wake, Some(Mono(11_000)));
        assert_eq!(
            first.seen[&0].stale_since, None,
            "a live owner is no stale one"
        );
        assert_eq!(first.seen[&1].stale_since, Some(Mono(1_000)));
        assert_eq!(first.seen[&1].seen_wall, 50_000);

        let later = stale_markers(
            [m(0, "10.0.0.1@-@1", 5), m(1, "10.9.9.9@-@9", 6)],
            live,
            |_, _| None,
            &first.seen,
            10_000,
            Mono(11_000),
            60_000,
        );
        assert_eq!(later.clear, vec![1], "the grace is over");
        assert_eq!(later.seen[&1].seen_wall, 50_000, "the first sight stays");
        assert_eq!(later.wake, None);

        let renewed = stale_markers(
            [m(1, "10.9.9.9@-@9", 7)],
            live,
            |_, _| None,
            &first.seen,
            10_000,
            Mono(11_000),
            60_000,
        );
        assert!(
            renewed.clear.is_empty(),
            "a new marker starts its own grace"
        );
        assert_eq!(renewed.seen[&1].seen_wall, 60_000);
        assert!(!renewed.seen.contains_key(&0), "a marker gone is forgotten");

        let watched = stale_markers(
            [m(1, "10.9.9.9@-@9", 6)],
            live,
            |i, rev| (i == 1 && rev == Revision(6)).then_some(40_000),
            &empty,
            10_000,
            Mono(1_000),
            50_000,
        );
        assert_eq!(
            watched.seen[&1].seen_wall, 40_000,
            "a marker watched as it appeared is first seen then, not when this instance leads"
        );

        let back = stale_markers(
            [m(1, "10.0.0.1@-@1", 6)],
            live,
            |_, _| None,
            &first.seen,
            10_000,
            Mono(11_000),
            60_000,
        );
        assert!(back.clear.is_empty() && back.seen[&1].stale_since.is_none());
    }

    /// The attributed fire is the latest at or before the first sight (within the
    /// tolerance), later than the item's last fire done.
    #[test]
    fn attributed_fire_is_the_latest_before_the_first_sight() {
        let mut c = JobConfig::new("j", 1);
        c.cron = CronExpr::parse("0/5 * * * * ?").ok();
        let c = Arc::new(c);
        let mut memo = FireMemo::default();
        let t0 = 1_700_000_000_000; // a multiple of 5 s
        assert_eq!(t0 % 5_000, 0);
        let cases = [
            ("just after a fire", None, t0 + 300, Some(t0)),
            (
                "just before one, within the tolerance",
                None,
                t0 - 400,
                Some(t0),
            ),
            (
                "before one, beyond the tolerance",
                None,
                t0 - 1_500,
                Some(t0 - 5_000),
            ),
            ("that fire is done", Some(t0), t0 + 300, None),
            ("an older one is done", Some(t0 - 5_000), t0 + 300, Some(t0)),
        ];
        for (what, done, seen, want) in cases {
            assert_eq!(
                attributed_fire(&mut memo, &c, done, seen, 1_000),
                want,
                "{what}"
            );
        }
        let mut none = JobConfig::new("k", 1);
        none.cron = None;
        assert_eq!(
            attributed_fire(&mut memo, &Arc::new(none), None, t0, 1_000),
            None,
            "no cron, no fire"
        );
    }

    /// With failover the fire becomes a run in progress (failover runs it), unless the record
    /// names a run already or the fire is done; without, it is given up.
    #[test]
    fn settle_follows_failover() {
        let me = InstanceId::new("10.0.0.1@-@1").unwrap();
        let done = ItemRecord {
            done: Some(10),
            run: None,
        };
        let running = ItemRecord {
            done: Some(10),
            run: Some(RunRecord {
                fire: 15,
                kind: RunKind::Scheduled,
                instance: me,
            }),
        };
        let cases = [
            (
                "no record, failover",
                None,
                Some(20),
                true,
                Settle::FailOver(20),
            ),
            (
                "no record, no failover",
                None,
                Some(20),
                false,
                Settle::GiveUp(20),
            ),
            (
                "a later fire",
                Some(&done),
                Some(20),
                true,
                Settle::FailOver(20),
            ),
            (
                "the fire is done",
                Some(&done),
                Some(10),
                true,
                Settle::Keep,
            ),
            ("an older fire", Some(&done), Some(5), false, Settle::Keep),
            ("no fire", Some(&done), None, true, Settle::Keep),
            (
                "a run named already",
                Some(&running),
                Some(20),
                true,
                Settle::Keep,
            ),
            (
                "a run named, no failover",
                Some(&running),
                Some(20),
                false,
                Settle::GiveUp(20),
            ),
        ];
        for (what, record, fire, failover, want) in cases {
            assert_eq!(settle(record, fire, failover), want, "{what}");
        }
    }

    /// ElasticJob's id form (and shardjob's on loopback) is well formed, anything else is not;
    /// an instance's YAML names its id.
    #[test]
    fn garbage_ids_and_values() {
        for id in ["10.9.9.9@-@99999", "127.0.0.1@-@42-0a1b2c3d4e5f", "::1@-@7"] {
            assert!(well_formed_id(id), "{id}");
        }
        for id in [
            "garbage",
            "10.9.9.9",
            "10.9.9.9@-@",
            "host@-@1",
            "10.0.0.1@-@x1",
            "1.2.3.4@-@1-x/y",
        ] {
            assert!(!well_formed_id(id), "{id}");
        }
        let id = "10.9.9.9@-@99999";
        assert!(instance_yaml(
            id,
            "jobInstanceId: 10.9.9.9@-@99999\nserverIp: 10.9.9.9\n"
        ));
        assert!(instance_yaml(
            id,
            "labels: x\njobInstanceId: '10.9.9.9@-@99999'\n"
        ));
        assert!(
            !instance_yaml(id, "jobInstanceId: 10.9.9.9@-@1\n"),
            "another id"
        );
        assert!(!instance_yaml(id, ""));
        assert!(!instance_yaml(id, "hello"));
    }
}
