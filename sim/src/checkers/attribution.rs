//! Which violations are ElasticJob's own: in a world that mixes ElasticJob 3.0.4 instances
//! ("J", [`crate::elasticjob`]) with shardjob's ("S"), ElasticJob loses and repeats fires in
//! ways it documents (`docs/migration-design.md`, sections 1 and 3.9). A violation that only
//! ElasticJob's own semantics made is counted apart, by checker and by the behaviour it stands
//! for ([`Behaviour`]), and does not fail the seed; one that involves a shardjob run, or that a
//! shardjob-only cluster would never allow, still fails.
//!
//! The rules are strict, and each names the behaviour it stands for:
//!
//! - two runs of an item (overlap, once): both are J's; for a fire started twice, every run of
//!   that fire up to the later one is J's (a J run after an S run of the same fire fails,
//!   unless J ran it as ElasticJob would after a J run: under a plan a J made after the
//!   earlier run started, from a cache behind the plan, or as the failover of an owner that
//!   was registered when J queued it, J acting on an earlier registration's DELETED); an S
//!   run after a J run of the same fire fails unless J started it from a cache behind the
//!   plan that gave S the item, or J started it more than [`JAVA_EARLY_MS`] before the fire in
//!   true time (its clock ahead) and S ran it at its time, no S run of the fire before;
//! - one run that ran as it should not (downtime, fresh, misfire): it is J's, and for the
//!   misfire checker the first run of the item after it is J's too (or there is none);
//! - a fire that did not run, or not in time (lost, late, liveness, catch-up): every run of the
//!   item from the last attempt of an earlier fire up to the first run that covers the fire (a
//!   run of it or of a later fire; the end of the world if none) is J's, and there is at least
//!   one: the item was in J's hands across the fire, as far as its runs tell (the plan's
//!   history is not recorded; a run is the registry's and the executor's trace of who had an
//!   item). A fire no run covered by the end (lost, liveness) needs the plan at the end to be
//!   J's too ([`plans`]). With no run there at all (lost, liveness, catch-up), the plan at the
//!   end must be J's and give the item to a J or to nobody. A fire from the moment every
//!   shardjob process had gone for good (the end of a rollback, [`crate::world::RollReport`])
//!   was in J's hands whoever ran the item before: it is judged as one the runs show J had;
//!   a fire lost on an item S had before it and a J after, when a J's flag was up at the fire
//!   and J's sharding after it moved the item ([`Behaviour::MovedAtTheGate`]), is J's too;
//!   and a fire that fell while a J's re-sharding flag was up, which no J sharding consumed to
//!   the end, under a plan that is J's at the end, is J's wait (every instance, S at its gate
//!   as J's non-leaders, waits for a J leader that never re-shards), if no S run of the job
//!   started from the flag on and no `running` node at the end names an S (which the leader
//!   could be waiting for);
//! - the plan at the end (convergence): J's ([`plans`]: a J holds the leader node, or there is
//!   no leader and a J that can lead is registered, or no shardjob process is registered and
//!   a J shut the job down); and a J process that lost its own registration (J shuts a job
//!   down for good when its instance node goes). What an S node reports of its plan always
//!   fails.
//!
//! Anything else fails, as before. A world without J processes is judged exactly as before:
//! [`split`] leaves every violation failing (no run, plan or process of J to name).

use std::collections::BTreeMap;

use shardjob_core::machine::record::RunKind;

use super::{RunRef, Subject, Violation};
use crate::cluster::{JavaSharding, RunRecord};

/// An ElasticJob 3.0.4 behaviour that breaks one of shardjob's invariants, as documented in
/// `docs/migration-design.md` (sections 1, 3.9 and 5). Each exemption of [`judge`] names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Behaviour {
    /// J has no fencing (3.9): a J paused, cut off or reconnecting goes on running the run it
    /// started (Quartz is paused on a lost connection, a run in progress goes on, 1.8), and its
    /// failover listener fails over the items of an instance it sees DELETED while their run
    /// goes on (1.7): two Js run one item at once.
    NoFencing,
    /// J starts a run without a claim (5, question 1): it reads its items from its cache, which
    /// may hold a plan another J has just re-sharded away (1.5 step 2), and writes `running`
    /// blindly (`fillJobNode` overwrites, 1.5 step 5): two Js start the same fire.
    StartWithoutClaim,
    /// J's misfire flags and loop (1.5 step 6, 1.6): a flag names the item, not the fire, and is
    /// consumed by whichever J runs the item next, which replays its whole context with the
    /// same task id: a fire already run is run again.
    MisfireReplay,
    /// J's failover (1.7): an item of a DELETED instance with a `running` node is failed over
    /// whether or not its run had finished its fire (the node may be a left-over, or the
    /// instance may have registered again), and the failover run replays it.
    FailoverReplay,
    /// J gives fires up (1.4, 1.5 step 2, 3.9): a J killed between fires keeps its items until a
    /// re-sharding, which happens only at a J leader's fire; a fire of an item with a
    /// `running` node is not run and leaves no misfire flag; the next owner runs later fires
    /// only.
    GivesUpFires,
    /// J shards lazily, at a fire, and waits without a bound (1.4 steps 3 and 4): non-leaders
    /// block while `necessary` exists, the leader while any item has a `running` node; an item
    /// of a dead J stays its until then: its fires come late, or never until the wait ends.
    UnboundedWait,
    /// J replays a missed fire only after its next run (1.6, 3.9): a fire that comes while its
    /// run lasts is flagged, and the flag is consumed by the misfire loop after the item's next
    /// fire's run, not at the end of the run it came in.
    LateMisfireReplay,
    /// J's misfire flags outlive a cluster start (1.6): a flag left by a J before every
    /// instance went away is consumed after the cluster starts again, replaying a fire from
    /// before that start (J has no catch-up bound); a flag of an item removed and created again
    /// (a shrunk and grown total: sharding leaves `misfire` alone, 1.4 step 6) replays a fire
    /// from before the item's creation.
    StaleMisfireFlags,
    /// J has no catch-up after downtime (3.9: `shardjob.misfire.catchup.seconds` is shardjob's):
    /// fires missed while no instance was registered are never run by a J.
    NoCatchUp,
    /// J leads whenever it can and shards only at a fire (1.2, 1.4, 3.3): until a J leader's
    /// next fire, the plan keeps owners that are gone, items without owners, surplus items;
    /// a J elects only on events and at a fire.
    ShardsOnlyAtFire,
    /// J skips an item with a `running` node at every fire (1.5 step 2) and in its failover
    /// runs, its leader waits for it before sharding (1.4 step 4), and nothing of J deletes a
    /// persistent `running` node of a J that died running a failover (1.7: that branch only
    /// queues the item again; ElasticJob issue 2429) or a foreign one: the item never runs
    /// again while it stays.
    LeftRunningNode,
    /// J reads every instance node as a `JobInstance` (1.1 step 5): one it cannot bind (a
    /// scalar, an unknown key: a foreign hand's garbage) makes every sharding and failover
    /// throw, so a J-led job is never sharded again while it stays (shardjob's leader deletes
    /// it, 3.7; a J never does).
    UnreadableInstance,
    /// J shards at a fire, and a J blocked at that fire runs it under the new plan (1.4 steps
    /// 3 and 4, 1.5 step 2): the item's owner under the old plan, which started the fire
    /// before the re-sharding flag was set, ran it too. A J in that owner's place starts at
    /// the same fire with the flag as absent, so an all-ElasticJob cluster runs it twice the
    /// same way; an S owner that claimed ahead and started after the flag is not exempted
    /// (it gives such a claim back: `docs/migration-design.md` 3.4, point 3).
    RunsUnderNewPlan,
    /// J's registration (1.8): a J whose instance node is deleted under it (by its own
    /// delete-then-create on RECONNECTED racing a session expiry, or anyone) shuts the job down
    /// for good, and stays unregistered.
    InstanceNodeLost,
    /// J fires by its own clock and, with the default `LOG` error handler, only logs a clock
    /// past `maxTimeDiffSeconds` (`ElasticJobExecutor.execute`; the simulator's J checks no
    /// clock at all): a J whose clock is ahead runs a fire early, and the item's next owner
    /// runs it again at its time, a J as an S. S cannot tell which fire such a run stood for
    /// (J writes no time of its own anywhere; S attributes a J run to a fire by the moment it
    /// sees it, within a second: `docs/migration-design.md` 3.6), so only a J run that started
    /// more than [`JAVA_EARLY_MS`] before its fire in true time is exempted this way.
    ClockAhead,
    /// J's re-shard at a fire moves an item to an instance that had started that fire before
    /// the flag (1.4, 1.5 step 2): only the instances blocked at the fire run it under the new
    /// plan, so the moved item loses it; its old owner, blocked at the flag (S at its gate, 3.4
    /// point 2, as a J), does not run it either. The item's new J owner runs the later fires.
    MovedAtTheGate,
}

/// How far before its fire (true time) a J run must start for a later S run of that fire to
/// be J's clock ([`Behaviour::ClockAhead`]): the most by which S attributes a J run seen to
/// the next fire (`JAVA_AHEAD_MS`, `docs/migration-design.md` 3.6).
pub const JAVA_EARLY_MS: i64 = 1_000;

impl Behaviour {
    /// The behaviour in words, for the binary's summary: `no-fencing`.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoFencing => "no-fencing",
            Self::StartWithoutClaim => "start-without-claim",
            Self::MisfireReplay => "misfire-replay",
            Self::FailoverReplay => "failover-replay",
            Self::GivesUpFires => "gives-up-fires",
            Self::UnboundedWait => "unbounded-wait",
            Self::LateMisfireReplay => "late-misfire-replay",
            Self::StaleMisfireFlags => "stale-misfire-flags",
            Self::NoCatchUp => "no-catch-up",
            Self::ShardsOnlyAtFire => "shards-only-at-fire",
            Self::LeftRunningNode => "left-running-node",
            Self::UnreadableInstance => "unreadable-instance",
            Self::InstanceNodeLost => "instance-node-lost",
            Self::RunsUnderNewPlan => "runs-under-new-plan",
            Self::ClockAhead => "clock-ahead",
            Self::MovedAtTheGate => "moved-at-the-gate",
        }
    }
}

/// Who ran the runs a violation names, in their order, for a summary: `J then S` for two runs
/// of an item (overlap, once), or for a fire the last attempt of an earlier fire then the first
/// run that covers it (`S then none`: no run covered it; `none then J`: no earlier attempt);
/// `J` or `S` for one run; `None` for the rest. `by_item`: the world's runs of each (job,
/// item), in the order they started.
pub fn kinds(v: &Violation, by_item: &BTreeMap<(&str, u32), Vec<&RunRecord>>) -> Option<String> {
    let word = |java: Option<bool>| match java {
        Some(true) => "J",
        Some(false) => "S",
        None => "none",
    };
    match &v.subject {
        Subject::Runs { earlier, later, .. } => Some(format!(
            "{} then {}",
            word(Some(earlier.java)),
            word(Some(later.java))
        )),
        Subject::Run { run, .. } => Some(word(Some(run.java)).to_owned()),
        Subject::Fire { job, item, fire } => {
            let mine = by_item
                .get(&(job.as_str(), *item))
                .map_or(&[][..], |v| &v[..]);
            let (from, to) = around(mine, *fire);
            Some(format!(
                "{} then {}",
                word(from.map(|r| r.java)),
                word(to.map(|r| r.java))
            ))
        }
        _ => None,
    }
}

/// For fire `fire` of an item (`mine`: its runs, in the order they started): the first run
/// that covers it (of it or a later fire), and the last attempt of an earlier fire started
/// before that one, triggers left out.
fn around<'r>(mine: &[&'r RunRecord], fire: i64) -> (Option<&'r RunRecord>, Option<&'r RunRecord>) {
    let scheduled = |r: &&&RunRecord| r.kind != RunKind::Trigger;
    let to = mine
        .iter()
        .filter(scheduled)
        .filter(|r| r.fire >= fire)
        .min_by_key(|r| r.start)
        .copied();
    let until = to.map_or(u64::MAX, |r| r.start);
    let from = mine
        .iter()
        .filter(scheduled)
        .filter(|r| r.fire < fire && r.start <= until)
        .max_by_key(|r| r.start)
        .copied();
    (from, to)
}

/// A world's violations, split.
#[derive(Debug, Default)]
pub struct Split {
    /// The violations that fail the seed.
    pub failing: Vec<Violation>,
    /// ElasticJob's own, with the behaviour each stands for.
    pub elasticjob: Vec<(Violation, Behaviour)>,
}

/// What the plan of a job says of ElasticJob's part in it at the end ([`plans`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JavaPlan {
    /// The ElasticJob behaviour the plan's state stands for, if the plan is ElasticJob's: a J
    /// holds the leader node, or none does and a J that can lead (registered, its server
    /// enabled) is there ([`Behaviour::ShardsOnlyAtFire`], or
    /// [`Behaviour::UnreadableInstance`] while an instance node J cannot read is registered);
    /// or none does, no shardjob process is registered, and a J shut the job down
    /// ([`Behaviour::InstanceNodeLost`]). `None`: the plan is shardjob's.
    pub behaviour: Option<Behaviour>,
    /// The items an ElasticJob process owns at the end.
    pub java_items: std::collections::BTreeSet<u32>,
    /// The items anyone owns at the end.
    pub owned: std::collections::BTreeSet<u32>,
    /// The items with a `running` node at the end whose value is no registered instance of
    /// the job.
    pub blocked: std::collections::BTreeSet<u32>,
    /// Whether a `running` node at the end names a shardjob process: a J leader that waits
    /// for running items may wait for that one.
    pub shardjob_markers: bool,
}

/// The plans of `jobs` at the end, as the store shows them, for [`judge`].
pub fn plans(c: &crate::cluster::Cluster, jobs: &[(String, u32)]) -> BTreeMap<String, JavaPlan> {
    let java_ids: std::collections::BTreeSet<String> =
        c.java.iter().map(|n| n.id.to_string()).collect();
    let mut out = BTreeMap::new();
    for (job, total) in jobs {
        let registered = |id: &str| c.exists(&format!("/{job}/instances/{id}"));
        let can_lead = c.java.iter().any(|n| {
            n.up()
                && !n.job_shut_down(job)
                && registered(n.id.as_str())
                && c.read(&format!("/{job}/servers/{}", n.id.server_ip()))
                    .as_deref()
                    == Some("ENABLED")
        });
        let instances = shardjob_core::registry::NodePath::new(format!("/{job}/instances"));
        let unreadable = instances.is_ok_and(|dir| {
            c.store
                .tree(&dir)
                .iter()
                .filter(|n| n.path != dir)
                .any(|n| {
                    crate::elasticjob::view::read_instance(&String::from_utf8_lossy(&n.data))
                        .is_err()
                })
        });
        let java_behaviour = if unreadable {
            Behaviour::UnreadableInstance
        } else {
            Behaviour::ShardsOnlyAtFire
        };
        let shardjob_registered = c.nodes.iter().any(|n| registered(n.id.as_str()));
        let behaviour = match c.read(&format!("/{job}/leader/election/instance")) {
            Some(l) if java_ids.contains(&l) => Some(java_behaviour),
            Some(_) => None,
            None if can_lead => Some(java_behaviour),
            None if !shardjob_registered && c.java.iter().any(|n| n.job_shut_down(job)) => {
                Some(Behaviour::InstanceNodeLost)
            }
            None => None,
        };
        let blocked = (0..*total)
            .filter(|i| {
                c.read(&format!("/{job}/sharding/{i}/running"))
                    .is_some_and(|v| !registered(&v))
            })
            .collect();
        let shardjob_markers = (0..*total).any(|i| {
            c.read(&format!("/{job}/sharding/{i}/running"))
                .is_some_and(|v| c.nodes.iter().any(|n| n.id.as_str() == v.trim()))
        });
        let owners = c.owners(job);
        let java_items = owners
            .iter()
            .filter(|(_, o)| java_ids.contains(*o))
            .map(|(i, _)| *i)
            .collect();
        out.insert(
            job.clone(),
            JavaPlan {
                behaviour,
                java_items,
                owned: owners.into_keys().collect(),
                blocked,
                shardjob_markers,
            },
        );
    }
    out
}

/// Splits a world's violations ([`judge`] on each). `java` is whether the world ran ElasticJob
/// processes: without any, every violation fails, as before attribution existed. `plans`: the
/// jobs' plans at the end ([`plans`]); `shardjob_gone`: since when (epoch ms) no shardjob
/// process has been there, if every one went for good (a rollback's end).
pub fn split(
    violations: Vec<Violation>,
    runs: &[RunRecord],
    java: bool,
    plans: &BTreeMap<String, JavaPlan>,
    shardjob_gone: Option<i64>,
    trace: &JavaTrace,
) -> Split {
    let mut out = Split::default();
    if !java {
        out.failing = violations;
        return out;
    }
    let by_item = super::runs_by_item(runs);
    for v in violations {
        match judge(&v, &by_item, plans, shardjob_gone, trace) {
            Some(b) => out.elasticjob.push((v, b)),
            None => out.failing.push(v),
        }
    }
    out
}

/// The ElasticJob behaviour a violation stands for, if it is ElasticJob's own; `None`: it
/// fails. `by_item`: the world's runs of each (job, item), in the order they started; `plans`:
/// the jobs' plans at the end; `shardjob_gone`: since when (epoch ms) no shardjob process has
/// been there, if every one went for good (a rollback's end): a fire from then on was in
/// ElasticJob's hands alone, whoever ran the item before.
pub fn judge(
    v: &Violation,
    by_item: &BTreeMap<(&str, u32), Vec<&RunRecord>>,
    plans: &BTreeMap<String, JavaPlan>,
    shardjob_gone: Option<i64>,
    java: &JavaTrace,
) -> Option<Behaviour> {
    fn runs_of<'m, 'r: 'm>(
        by_item: &'m BTreeMap<(&'m str, u32), Vec<&'r RunRecord>>,
        job: &'m str,
        item: u32,
    ) -> &'m [&'r RunRecord] {
        by_item.get(&(job, item)).map_or(&[][..], |v| &v[..])
    }
    match &v.subject {
        Subject::Other => None,
        Subject::Runs {
            job,
            item,
            earlier,
            later,
        } => {
            // The attempts of the fire up to the later run, and a run named by its record.
            let attempts = || {
                runs_of(by_item, job, *item)
                    .iter()
                    .filter(|r| r.fire == later.fire && r.kind != RunKind::Trigger)
                    .filter(|r| r.start <= later.start)
            };
            let record = |r: &RunRef| {
                runs_of(by_item, job, *item)
                    .iter()
                    .find(|x| x.java == r.java && x.node == r.node && x.start == r.start)
                    .copied()
            };
            if !later.java {
                // No S run of the fire came before the later one.
                let none_of_s_before = attempts().filter(|r| r.start < later.start).all(|r| r.java);
                // A J that started the fire from a cache behind the registry's plan, on an item
                // the plan gave to S: S, its owner, ran it by right (as a J owner would).
                let stray = v.checker == "once"
                    && earlier.java
                    && earlier.kind == RunKind::Scheduled
                    && java.stale_starts.contains(&(
                        job.clone(),
                        *item,
                        earlier.node,
                        earlier.start,
                    ));
                if stray {
                    return Some(Behaviour::StartWithoutClaim);
                }
                // A J whose clock is ahead ran the fire early, and S, no earlier than a second
                // before the fire, ran it at its time; no S run of the fire came before.
                let true_start = |start: u64| java.origin_ms.saturating_add_unsigned(start);
                let clock_ahead = v.checker == "once"
                    && earlier.java
                    && later.fire.saturating_sub(true_start(earlier.start)) > JAVA_EARLY_MS
                    && later.fire.saturating_sub(true_start(later.start)) <= JAVA_EARLY_MS
                    && none_of_s_before;
                if clock_ahead {
                    return Some(Behaviour::ClockAhead);
                }
                // A J ran the fire at its time with no flag up, then a flag held S at the
                // fire by S's clock (behind the J's) and S ran it under the plan of the
                // sharding that ended the hold: what a J on S's clock, blocked at its fire,
                // does beside the old owner. No S run of the fire came before.
                let held_behind = v.checker == "once"
                    && earlier.java
                    && earlier.kind == RunKind::Scheduled
                    && matches!(later.kind, RunKind::Scheduled | RunKind::Misfire)
                    && none_of_s_before
                    && record(earlier)
                        .zip(record(later))
                        .is_some_and(|(j, s)| java.held_behind_old_owner(job, j, s));
                if held_behind {
                    return Some(Behaviour::RunsUnderNewPlan);
                }
                // A J run whose session ended before S started the item: S took it over by
                // right (a J's failover does the same), and the J ran on with no fencing.
                let zombie = v.checker == "overlap"
                    && earlier.java
                    && record(earlier)
                        .and_then(|r| r.session_end)
                        .is_some_and(|end| end <= later.start);
                return zombie.then_some(Behaviour::NoFencing);
            }
            if !earlier.java {
                // An S run first: J's own as a J failover of a live owner's run (J failed
                // over the items of a registration that had gone, by its id, after the owner
                // registered again: an all-ElasticJob cluster fails a J's run over the same
                // way),
                // or over its run still going (J has no fencing),
                let live_failover = later.kind == RunKind::Failover
                    && java
                        .live_failovers
                        .contains(&(job.clone(), *item, later.node, later.start));
                match v.checker {
                    "once" if live_failover => return Some(Behaviour::FailoverReplay),
                    "overlap" if live_failover => return Some(Behaviour::NoFencing),
                    _ => {}
                }
                // or as a J that started a scheduled run from a cache behind the registry's
                // plan, which gave the item to S: S, the owner, runs it by right, and the J
                // beside it is J's stray start (an all-ElasticJob cluster overlaps the same
                // way with the J owner's run),
                let stray = later.kind != RunKind::Failover
                    && java
                        .stale_starts
                        .contains(&(job.clone(), *item, later.node, later.start));
                if v.checker == "overlap" && stray {
                    return Some(Behaviour::StartWithoutClaim);
                }
                // or as a J's misfire loop replaying the fire it ran itself under a new plan
                // just before (a J in S's place would have run it first as well: the J's
                // first run is the duplicate ElasticJob alone has, and its replay follows),
                // or as a J's misfire loop replaying a fire its Quartz flagged on an item after
                // S had run it there (the J's cache gave it the item later: the loop replays
                // the fire over the items it has then, as it does after a J owner's run),
                if v.checker == "once"
                    && later.kind == RunKind::Misfire
                    && java
                        .flagged_after_run
                        .contains(&(job.clone(), *item, later.fire))
                {
                    return Some(Behaviour::MisfireReplay);
                }
                if v.checker == "once" && later.kind == RunKind::Misfire {
                    let replays_own = attempts()
                        .filter(|r| r.java && r.node == later.node && r.kind == RunKind::Scheduled)
                        .filter(|r| r.start > earlier.start && r.start < later.start)
                        .any(|first| {
                            let first = RunRef::of(first);
                            attempts()
                                .filter(|r| !r.java && r.start < first.start)
                                .all(|r| java.old_owner_then_new_plan(job, r, &first))
                        });
                    if replays_own {
                        return Some(Behaviour::MisfireReplay);
                    }
                }
                // or as a J blocked at the fire, running it under the plan a J re-shard made
                // after every S attempt had started at the fire.
                if v.checker != "once" || later.kind != RunKind::Scheduled {
                    return None;
                }
                // Or a J that started its fire from a cache behind the registry's plan, which
                // gave the item to another: that owner, S or J, ran it by right.
                if java
                    .stale_starts
                    .contains(&(job.clone(), *item, later.node, later.start))
                {
                    return Some(Behaviour::StartWithoutClaim);
                }
                let new_plan = attempts()
                    .filter(|r| !r.java)
                    .all(|r| java.old_owner_then_new_plan(job, r, later));
                return new_plan.then_some(Behaviour::RunsUnderNewPlan);
            }
            match v.checker {
                // Each overlapping pair is a violation of its own: this one is J's.
                "overlap" => Some(Behaviour::NoFencing),
                "once" => {
                    // Every attempt of the fire up to the later one is J's: a J start after
                    // an S run of the fire is not J's alone. An S attempt that died (crashed,
                    // cut short, its session gone before its end was committed) counts for
                    // nothing: a J in its place dies the same, and its failover is J's.
                    let all_java = attempts().all(|r| r.java || super::once::died(r));
                    all_java.then_some(match later.kind {
                        RunKind::Misfire => Behaviour::MisfireReplay,
                        RunKind::Failover => Behaviour::FailoverReplay,
                        _ => Behaviour::StartWithoutClaim,
                    })
                }
                _ => None,
            }
        }
        Subject::Run { job, item, run } => {
            if !run.java {
                return None;
            }
            match v.checker {
                "downtime" | "fresh" => Some(match run.kind {
                    RunKind::Misfire => Behaviour::StaleMisfireFlags,
                    RunKind::Failover => Behaviour::FailoverReplay,
                    // A scheduled run of an old fire: a J that waited at the fire (1.4) and
                    // ran it once the wait ended.
                    _ => Behaviour::UnboundedWait,
                }),
                "misfire" => {
                    // The item's next run, which owed the replay, is J's too (or none came).
                    let next_java = runs_of(by_item, job, *item)
                        .iter()
                        .find(|r| r.start > run.start)
                        .is_none_or(|r| r.java);
                    next_java.then_some(Behaviour::LateMisfireReplay)
                }
                _ => None,
            }
        }
        Subject::Fire { job, item, fire } => {
            let mine = runs_of(by_item, job, *item);
            // A fire that fell while a J's re-sharding flag was up, which no J sharding
            // consumed by the end, under a plan that is J's at the end: every instance waits
            // at that fire, J's non-leaders as S (the gate, 3.4 point 2), for a J leader that
            // never re-shards. Only if S obeyed the gate (no S run of the job started from the
            // flag on) and left no `running` node the leader could be waiting for.
            if matches!(v.checker, "lost" | "liveness") {
                let plan = plans.get(job.as_str());
                let stuck_since = java.flag_stuck_across(job, *fire);
                if let (Some(plan), Some(since)) = (plan, stuck_since) {
                    let s_ran_past_flag = by_item
                        .iter()
                        .filter(|((j, _), _)| j == job)
                        .flat_map(|(_, runs)| runs.iter())
                        .any(|r| !r.java && r.start >= since);
                    if plan.behaviour.is_some() && !plan.shardjob_markers && !s_ran_past_flag {
                        return Some(Behaviour::UnboundedWait);
                    }
                }
            }
            // From the moment every shardjob process had gone for good, no shardjob run could
            // run the fire or cover it: it was J's to run.
            let hands = if shardjob_gone.is_some_and(|gone| *fire >= gone) {
                Hands::Java
            } else {
                java_hands(mine, *fire)
            };
            match hands {
                Hands::Java => {}
                Hands::Shardjob if v.checker == "lost" => {
                    return java
                        .moved_at_the_gate(job, *fire, mine)
                        .then_some(Behaviour::MovedAtTheGate);
                }
                Hands::Shardjob => return None,
                // No run of the item across the fire: the plan at the end tells whose it was,
                // if it is ElasticJob's and gives the item to a J or to nobody.
                Hands::Nobody => {
                    let plan = plans.get(job.as_str())?;
                    let owner_java = plan.java_items.contains(item) || !plan.owned.contains(item);
                    return match v.checker {
                        "lost" | "liveness" | "catch-up" if owner_java => plan.behaviour,
                        _ => None,
                    };
                }
            }
            // A fire no run covered by the end: the item blocked by a left-over `running`
            // node, or waiting; only while the plan is J's (a shardjob leader would have
            // given the item to a live owner).
            let stuck = || {
                let plan = plans.get(job.as_str())?;
                plan.behaviour?;
                Some(if plan.blocked.contains(item) {
                    Behaviour::LeftRunningNode
                } else {
                    Behaviour::UnboundedWait
                })
            };
            match v.checker {
                "lost" => {
                    let later = mine
                        .iter()
                        .any(|r| r.fire > *fire && r.kind != RunKind::Trigger);
                    if later {
                        Some(Behaviour::GivesUpFires)
                    } else {
                        stuck()
                    }
                }
                "late" => Some(later_cover_kind(mine, *fire)),
                "liveness" => stuck(),
                "catch-up" => Some(Behaviour::NoCatchUp),
                _ => None,
            }
        }
        Subject::Plan { job } => {
            if v.checker != "convergence" {
                return None;
            }
            plans.get(job.as_str())?.behaviour
        }
        Subject::JavaShutDown { .. } => {
            (v.checker == "convergence").then_some(Behaviour::InstanceNodeLost)
        }
    }
}

/// What the registry saw of ElasticJob's processes, for [`judge`]: when a J set each job's
/// re-sharding flag and when a J leader's sharding applied ([`Cluster::java_sharding`]), and
/// which J runs started on an item the registry's plan gave to another
/// ([`Cluster::java_stale_starts`]).
///
/// [`Cluster::java_sharding`]: crate::cluster::Cluster::java_sharding
/// [`Cluster::java_stale_starts`]: crate::cluster::Cluster::java_stale_starts
#[derive(Debug, Clone, Default)]
pub struct JavaTrace {
    /// Each job's re-sharding steps, in order.
    pub sharding: BTreeMap<String, Vec<JavaSharding>>,
    /// The J runs started from J's items against the plan (scheduled, triggered, misfire
    /// replays), by (job, item, J node, start ms).
    pub stale_starts: std::collections::BTreeSet<(String, u32, usize, u64)>,
    /// The fires a J flagged as missed on an item after an S run of the fire had started
    /// there, by (job, item, fire) ([`Cluster::java_flagged_after_run`]).
    ///
    /// [`Cluster::java_flagged_after_run`]: crate::cluster::Cluster::java_flagged_after_run
    pub flagged_after_run: std::collections::BTreeSet<(String, u32, i64)>,
    /// The J failover runs of an item whose owner was registered when a J queued it (a
    /// DELETED handled after the owner registered again under the same id), by (job, item,
    /// J node, start ms).
    pub live_failovers: std::collections::BTreeSet<(String, u32, usize, u64)>,
    /// When the registry committed each S claim (virtual ms), by (job, item, fencing
    /// token) ([`Cluster::claim_commits`]).
    ///
    /// [`Cluster::claim_commits`]: crate::cluster::Cluster::claim_commits
    pub claims: BTreeMap<(String, u32, u64), u64>,
    /// The same steps as [`JavaTrace::sharding`] taken by S leaders
    /// ([`Cluster::shardjob_sharding`]).
    ///
    /// [`Cluster::shardjob_sharding`]: crate::cluster::Cluster::shardjob_sharding
    pub shardjob_sharding: BTreeMap<String, Vec<JavaSharding>>,
    /// The world's wall-clock origin (epoch ms): virtual ms + this = true epoch ms.
    pub origin_ms: i64,
}

/// The last of a job's re-sharding `steps` at or before `t` (virtual ms).
fn last_step(steps: &[JavaSharding], t: u64) -> Option<JavaSharding> {
    steps.iter().rev().copied().find(|s| match *s {
        JavaSharding::Flagged(at) | JavaSharding::Sharded(at) => at <= t,
    })
}

impl JavaTrace {
    /// When S's run `run` last checked the registry's state before it started: its claim's
    /// commit if the claim was made at the fire or after it (by the node's clock), as a J
    /// reads the flag at its fire; its start otherwise (a claim made ahead checks nothing
    /// at the fire), and where no commit is recorded (a run of a J, or of a test).
    fn checked_at(&self, run: &RunRecord) -> u64 {
        let fire = self.virtual_ms(run.fire - self.skew_of(run));
        self.claims
            .get(&(run.job.clone(), run.item, run.token))
            .copied()
            .filter(|at| !run.java && fire.is_some_and(|fire| *at >= fire))
            .unwrap_or(run.start)
    }

    /// How far `run`'s node's clock was ahead of true time when it started, ms (its skew,
    /// taken as constant over the run's life).
    fn skew_of(&self, run: &RunRecord) -> i64 {
        run.wall_start - self.origin_ms.saturating_add_unsigned(run.start)
    }

    /// The flag's whole history for `job`: the J steps and the S steps, in time order (J
    /// first at the same ms).
    fn flag_history(&self, job: &str) -> Vec<JavaSharding> {
        let at = |s: &JavaSharding| match *s {
            JavaSharding::Flagged(t) | JavaSharding::Sharded(t) => t,
        };
        let mut all: Vec<JavaSharding> = self
            .sharding
            .get(job)
            .into_iter()
            .chain(self.shardjob_sharding.get(job))
            .flatten()
            .copied()
            .collect();
        all.sort_by_key(at);
        all
    }

    /// The virtual ms of `epoch` (epoch ms, true time), if it is not before the world began.
    fn virtual_ms(&self, epoch: i64) -> Option<u64> {
        u64::try_from(epoch.checked_sub(self.origin_ms)?).ok()
    }

    /// Whether fire `fire` (epoch ms) of an item whose runs are `mine` was lost as J's re-shard
    /// at that fire loses it ([`Behaviour::MovedAtTheGate`]): a J's flag was up at the fire and
    /// a J's sharding consumed it after; the item's last run before the fire is S's, and the
    /// first run after it (of a later fire) is a J's, started after that sharding; no run of
    /// the item started between the fire and that one.
    fn moved_at_the_gate(&self, job: &str, fire: i64, mine: &[&RunRecord]) -> bool {
        let (Some(steps), Some(at)) = (self.sharding.get(job), self.virtual_ms(fire)) else {
            return false;
        };
        if !matches!(last_step(steps, at), Some(JavaSharding::Flagged(_))) {
            return false;
        }
        let Some(consumed) = steps.iter().find_map(|s| match *s {
            JavaSharding::Sharded(t) if t > at => Some(t),
            _ => None,
        }) else {
            return false;
        };
        let before = mine
            .iter()
            .filter(|r| r.start <= at)
            .max_by_key(|r| r.start);
        let cover = mine.iter().filter(|r| r.start > at).min_by_key(|r| r.start);
        before.is_some_and(|r| !r.java)
            && cover.is_some_and(|r| r.java && r.fire > fire && r.start >= consumed)
    }

    /// When the J flag up at `fire` (epoch ms, true time) was set, if one was and no J
    /// sharding consumed it after the fire, to the end of the world.
    fn flag_stuck_across(&self, job: &str, fire: i64) -> Option<u64> {
        let steps = self.sharding.get(job)?;
        let at = self.virtual_ms(fire)?;
        let JavaSharding::Flagged(since) = last_step(steps, at)? else {
            return None;
        };
        let consumed = steps
            .iter()
            .any(|s| matches!(*s, JavaSharding::Sharded(t) if t > at));
        (!consumed).then_some(since)
    }

    /// Whether `s`, an S run of `j`'s fire after `j` (a J's scheduled run of it), ran as a J
    /// blocked at its fire runs it under a new plan: `j` started with the flag absent; the
    /// fire came by `s`'s node's clock after that start, with a flag up that was set after
    /// it; a sharding consumed that flag before `s`'s claim checked the registry, which it
    /// did with the flag absent.
    fn held_behind_old_owner(&self, job: &str, j: &RunRecord, s: &RunRecord) -> bool {
        let steps = &self.flag_history(job)[..];
        let Some(fire) = self.virtual_ms(s.fire - self.skew_of(s)) else {
            return false;
        };
        let checked = self.checked_at(s);
        if fire <= j.start || matches!(last_step(steps, j.start), Some(JavaSharding::Flagged(_))) {
            return false;
        }
        let Some(JavaSharding::Flagged(set)) = last_step(steps, fire) else {
            return false;
        };
        set > j.start
            && matches!(last_step(steps, checked), Some(JavaSharding::Sharded(t)) if t >= fire)
    }

    /// Whether `first`, an S run of `later`'s fire, ran as a J owner under the plan of the
    /// fire would have, and `later` (a J's scheduled run of that fire) under a plan a J made
    /// after it: `first` is a scheduled run that started at its fire by its own clock (a J
    /// on that clock starts then too: a clock ahead widens ElasticJob's own window as much)
    /// while the flag was absent, a J set it
    /// after that start, and a J's sharding consumed it before `later` started. Or `first`
    /// is the fire a J's flag held (up at the fire), run as a misfire under the plan of the J
    /// sharding that ended the hold, after the fire: what a J blocked at the fire does (the
    /// held fire, `docs/migration-design.md` 3.6 rule (e)). Or `first` is a misfire run of
    /// the fire, started after it by its node's clock, claimed with the flag absent from the
    /// fire (by that clock) to the claim: a J there would have read the flag absent at its
    /// fire and run it (at once, or as its misfire replay after a run that overlapped the
    /// fire, `misfireIfRunning`).
    fn old_owner_then_new_plan(&self, job: &str, first: &RunRecord, later: &RunRef) -> bool {
        if later.start <= first.start {
            return false;
        }
        // The flag's true state matters here, whoever wrote it: S's claim checks it in the
        // registry, and a J blocked at the fire waits for any leader's sharding.
        let steps = &self.flag_history(job)[..];
        // The flag was absent when `first`'s claim checked it (a J reads it at its fire, and
        // S's claim checks it in the registry): the last step before is no flag set.
        let checked = self.checked_at(first);
        let before = last_step(steps, checked);
        let on_time = first.kind == RunKind::Scheduled && first.wall_start >= first.fire;
        let held = first.kind == RunKind::Misfire
            && self.virtual_ms(first.fire).is_some_and(|fire| {
                matches!(last_step(steps, fire), Some(JavaSharding::Flagged(_)))
                    && matches!(before, Some(JavaSharding::Sharded(t)) if t >= fire)
            });
        // From the fire as `first`'s node saw it come, by its own clock.
        let absent_since_fire = self
            .virtual_ms(first.fire - self.skew_of(first))
            .is_some_and(|fire| {
                !matches!(last_step(steps, fire), Some(JavaSharding::Flagged(_)))
                    && !steps
                        .iter()
                        .any(|s| matches!(*s, JavaSharding::Flagged(t) if t > fire && t <= checked))
            });
        let caught_up =
            first.kind == RunKind::Misfire && first.wall_start >= first.fire && absent_since_fire;
        if !(on_time || held || caught_up) || matches!(before, Some(JavaSharding::Flagged(_))) {
            return false;
        }
        let mut flagged = false;
        for step in steps {
            match *step {
                JavaSharding::Flagged(at) if at > checked && at <= later.start => {
                    flagged = true;
                }
                JavaSharding::Sharded(at) if flagged && at <= later.start => return true,
                _ => {}
            }
        }
        false
    }
}

/// Whose hands an item was in across a fire, as its runs tell.
enum Hands {
    /// Every run from the last attempt of an earlier fire (started before the cover) up to
    /// the first run that covers the fire (of it or a later fire; none: up to the end) is
    /// J's, and there is one.
    Java,
    /// One of those runs is shardjob's.
    Shardjob,
    /// There is none.
    Nobody,
}

/// Whose hands an item was in across fire `fire` ([`Hands`]); `mine`: its runs, in the order
/// they started.
fn java_hands(mine: &[&RunRecord], fire: i64) -> Hands {
    let (from, to) = around(mine, fire);
    let from = from.map_or(0, |r| r.start);
    let to = to.map_or(u64::MAX, |r| r.start);
    let mut window = mine
        .iter()
        .filter(|r| (from..=to).contains(&r.start))
        .peekable();
    if window.peek().is_none() {
        Hands::Nobody
    } else if window.all(|r| r.java) {
        Hands::Java
    } else {
        Hands::Shardjob
    }
}

/// The behaviour that made the run covering fire `fire` late: a J's misfire run, replayed
/// after its next run, or any other J run that waited.
fn later_cover_kind(mine: &[&RunRecord], fire: i64) -> Behaviour {
    let cover = mine
        .iter()
        .filter(|r| r.fire >= fire && r.kind != RunKind::Trigger)
        .min_by_key(|r| r.start);
    match cover.map(|r| r.kind) {
        Some(RunKind::Misfire) => Behaviour::LateMisfireReplay,
        Some(RunKind::Failover) => Behaviour::GivesUpFires,
        _ => Behaviour::UnboundedWait,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use shardjob_core::machine::record::RunKind;

    use super::{Behaviour, JavaPlan, JavaTrace, judge, split};
    use crate::checkers::{Subject, Violation, runs_by_item, test_run};
    use crate::cluster::{JavaSharding, RunRecord};

    /// A run of item 0 of job `j` for the fire at `fire` ms (epoch), started at `start`.
    fn run(java: bool, node: usize, fire: i64, start: u64, kind: RunKind) -> RunRecord {
        RunRecord {
            java,
            node,
            fire,
            kind,
            token: start,
            ..test_run(start)
        }
    }

    /// A trace of job `j`'s re-sharding steps, the world's origin at 0.
    fn trace(steps: Vec<JavaSharding>) -> JavaTrace {
        trace_at(0, steps)
    }

    /// A trace of job `j`'s re-sharding steps, the world's origin at `origin` (epoch ms).
    fn trace_at(origin: i64, steps: Vec<JavaSharding>) -> JavaTrace {
        JavaTrace {
            sharding: BTreeMap::from([("j".to_owned(), steps)]),
            origin_ms: origin,
            ..JavaTrace::default()
        }
    }

    fn about(checker: &'static str, subject: Subject) -> Violation {
        Violation {
            checker,
            time: 0,
            message: String::new(),
            subject,
        }
    }

    fn judged(
        v: &Violation,
        runs: &[RunRecord],
        plans: &BTreeMap<String, JavaPlan>,
    ) -> Option<Behaviour> {
        judge(v, &runs_by_item(runs), plans, None, &JavaTrace::default())
    }

    #[test]
    fn two_runs_are_elasticjobs_own_only_if_both_are_and_no_shardjob_run_of_the_fire_came_first() {
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let s = run(false, 0, 1_000, 10, Scheduled);
        let j1 = run(true, 0, 1_000, 20, Scheduled);
        let j2 = run(true, 1, 1_000, 30, Scheduled);
        let runs = [j1.clone(), j2.clone()];
        let v = about("once", Subject::runs(&j1, &j2));
        assert_eq!(judged(&v, &runs, &none), Some(Behaviour::StartWithoutClaim));
        let replay = run(true, 1, 1_000, 30, Misfire);
        let v = about("once", Subject::runs(&j1, &replay));
        assert_eq!(
            judged(&v, &[j1.clone(), replay.clone()], &none),
            Some(Behaviour::MisfireReplay)
        );
        // An S run of the same fire before them: the J pair is not J's alone.
        let runs = [s.clone(), j1.clone(), j2.clone()];
        let v = about("once", Subject::runs(&j1, &j2));
        assert_eq!(judged(&v, &runs, &none), None);
        // Unless that S run died (a J in its place dies the same, and what follows is J's).
        let crashed = RunRecord {
            crashed: true,
            ..s.clone()
        };
        let v = about("once", Subject::runs(&j1, &j2));
        assert_eq!(
            judged(&v, &[crashed, j1.clone(), j2.clone()], &none),
            Some(Behaviour::StartWithoutClaim)
        );
        // S then J, J then S, S then S: never.
        for (a, b) in [(&s, &j1), (&j1, &s), (&s, &s)] {
            let v = about("once", Subject::runs(a, b));
            assert_eq!(judged(&v, &runs, &none), None);
            let v = about("overlap", Subject::runs(a, b));
            assert_eq!(judged(&v, &runs, &none), None);
        }
        let v = about("overlap", Subject::runs(&j1, &j2));
        assert_eq!(judged(&v, &runs, &none), Some(Behaviour::NoFencing));
        // Another checker naming two J runs: not exempted.
        let v = about("late", Subject::runs(&j1, &j2));
        assert_eq!(judged(&v, &runs, &none), None);
    }

    /// An S run of a fire, then a J run of it: J's own only when the J ran against the plan
    /// (a stale cache), or was blocked at the fire and ran it under a plan a J re-shard made
    /// after the S run had started at its fire with no flag set.
    #[test]
    fn a_held_fire_s_ran_under_one_java_plan_then_a_java_under_the_next_is_elasticjobs() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let origin = test_run(0).fire;
        let fire = origin + 5_000;
        // The flag holds the fire of +5 s; a J's sharding ends the hold at +6 s and S runs the
        // held fire at +6.5 s; a J sets the flag again, shards, and a J blocked at the fire
        // since +5 s runs it at +9 s under that plan.
        let s = run(false, 0, fire, 6_500, Misfire);
        let j = run(true, 1, fire, 9_000, Scheduled);
        let runs = [s.clone(), j.clone()];
        let by_item = runs_by_item(&runs);
        let once = about("once", Subject::runs(&s, &j));
        let trace = |steps| trace_at(origin, steps);
        #[rustfmt::skip]
        let cases = [
            ("held at the fire, run after the hold, flagged and sharded again", vec![Flagged(4_000), Sharded(6_000), Flagged(7_000), Sharded(8_000)], Some(Behaviour::RunsUnderNewPlan)),
            ("no flag at the fire", vec![Flagged(5_500), Sharded(6_000), Flagged(7_000), Sharded(8_000)], None),
            ("flag set between the fire and S's claim", vec![Flagged(5_200), Sharded(6_000), Flagged(7_000), Sharded(8_000)], None),
            // No hold, but no flag from the fire to S's claim: a J owner would have read it
            // absent and run the fire (caught up).
            ("the hold ended before the fire", vec![Flagged(4_000), Sharded(4_500), Flagged(7_000), Sharded(8_000)], Some(Behaviour::RunsUnderNewPlan)),
            ("the hold ended before the fire, no re-shard after S's run", vec![Flagged(4_000), Sharded(4_500)], None),
            ("no re-shard after S's run", vec![Flagged(4_000), Sharded(6_000)], None),
        ];
        for (what, steps, want) in cases {
            assert_eq!(
                judge(&once, &by_item, &none, None, &trace(steps)),
                want,
                "{what}"
            );
        }
    }

    /// S's claim checks the flag when the registry commits it, a reply before its start: a
    /// flag set between the two came after the check, as a flag set after a J read it at its
    /// fire. A claim made ahead of the fire checks nothing at the fire: its start counts.
    /// The steps of S leaders count as a J leader's.
    #[test]
    fn an_s_claim_checks_the_flag_when_it_commits_and_s_leaders_steps_count() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let origin = test_run(0).fire;
        let fire = origin + 5_000;
        let s = RunRecord {
            wall_start: origin + 5_100,
            ..run(false, 0, fire, 5_100, Scheduled)
        };
        let j = run(true, 1, fire, 9_000, Scheduled);
        let runs = [s.clone(), j.clone()];
        let by_item = runs_by_item(&runs);
        let once = about("once", Subject::runs(&s, &j));
        let steps = vec![Flagged(5_050), Sharded(8_000)];
        let with = |claimed: Option<u64>, steps: Vec<JavaSharding>| JavaTrace {
            claims: claimed
                .map(|at| (("j".to_owned(), 0, s.token), at))
                .into_iter()
                .collect(),
            ..trace_at(origin, steps)
        };
        #[rustfmt::skip]
        let cases = [
            ("committed at the fire, flagged before the start", Some(5_020), Some(Behaviour::RunsUnderNewPlan)),
            ("no commit recorded: the start counts", None, None),
            ("claimed ahead of the fire: the start counts", Some(4_750), None),
            ("committed after the flag", Some(5_060), None),
        ];
        for (what, claimed, want) in cases {
            assert_eq!(
                judge(&once, &by_item, &none, None, &with(claimed, steps.clone())),
                want,
                "{what}"
            );
        }
        // The flag up since before the fire, consumed by an S leader before S's claim: the
        // S step counts.
        let consumed_by_s = JavaTrace {
            shardjob_sharding: BTreeMap::from([("j".to_owned(), vec![Sharded(5_010)])]),
            ..with(
                Some(5_020),
                vec![Flagged(4_000), Flagged(6_000), Sharded(8_000)],
            )
        };
        assert_eq!(
            judge(&once, &by_item, &none, None, &consumed_by_s),
            Some(Behaviour::RunsUnderNewPlan)
        );
        let not_consumed = with(Some(5_020), vec![Flagged(4_000), Sharded(8_000)]);
        assert_eq!(judge(&once, &by_item, &none, None, &not_consumed), None);
        // A misfire of a node whose clock is a second ahead, started after the fire by that
        // clock (true +4.6 s), with no flag from its fire (true +4 s) to its claim.
        let ahead = RunRecord {
            wall_start: origin + 5_600,
            ..run(false, 0, fire, 4_600, Misfire)
        };
        let runs = [ahead.clone(), j.clone()];
        let v = about("once", Subject::runs(&ahead, &j));
        #[rustfmt::skip]
        let cases = [
            ("no flag from its fire on", vec![Flagged(4_800), Sharded(8_000)], Some(Behaviour::RunsUnderNewPlan)),
            ("a flag set after its fire by its clock", vec![Flagged(4_200), Sharded(4_400), Flagged(4_800), Sharded(8_000)], None),
        ];
        for (what, steps, want) in cases {
            let t = trace_at(origin, steps);
            assert_eq!(
                judge(&v, &runs_by_item(&runs), &none, None, &t),
                want,
                "{what}"
            );
        }
    }

    /// J ran F at its time; S, its clock 800 ms behind, came to F (true +5.8 s) behind a flag
    /// set after J's start, and ran F under the plan of the sharding that ended the hold: a J
    /// on S's clock does the same.
    #[test]
    fn a_j_run_then_an_s_run_held_at_its_own_fire_behind_a_later_flag_is_elasticjobs() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let origin = test_run(0).fire;
        let fire = origin + 5_000;
        let j = RunRecord {
            wall_start: origin + 5_010,
            ..run(true, 1, fire, 5_010, Scheduled)
        };
        let s_at = |kind| RunRecord {
            wall_start: origin + 6_000 - 800,
            ..run(false, 0, fire, 6_000, kind)
        };
        let trace = |steps| trace_at(origin, steps);
        #[rustfmt::skip]
        let cases = [
            ("flag after J's start, up at S's fire, consumed before S's claim", Scheduled, vec![Flagged(5_400), Sharded(5_950)], Some(Behaviour::RunsUnderNewPlan)),
            ("the same, S's run a misfire", Misfire, vec![Flagged(5_400), Sharded(5_950)], Some(Behaviour::RunsUnderNewPlan)),
            ("no flag at S's fire", Scheduled, vec![Flagged(5_400), Sharded(5_600)], None),
            ("the flag up at J's start", Scheduled, vec![Flagged(4_000), Sharded(5_950)], None),
            ("the flag never consumed", Scheduled, vec![Flagged(5_400)], None),
            ("no flag at all", Scheduled, vec![], None),
        ];
        for (what, kind, steps, want) in cases {
            let s = s_at(kind);
            let runs = [j.clone(), s.clone()];
            let v = about("once", Subject::runs(&j, &s));
            assert_eq!(
                judge(&v, &runs_by_item(&runs), &none, None, &trace(steps)),
                want,
                "{what}"
            );
        }
        // An S run of F before: S's own duplicate.
        let s = s_at(Scheduled);
        let s_first = run(false, 2, fire, 5_020, Scheduled);
        let runs = [j.clone(), s_first, s.clone()];
        let v = about("once", Subject::runs(&j, &s));
        let steps = vec![Flagged(5_400), Sharded(5_950)];
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &trace(steps)),
            None
        );
    }

    #[test]
    fn an_s_run_then_a_j_run_of_one_fire_is_elasticjobs_own_only_as_elasticjob_would_run_it() {
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let fire = test_run(0).fire + 5_000;
        let at = |start: u64| test_run(0).fire + start as i64;
        // S starts at its fire (+5 s), J at +9 s, after the re-shard.
        let s = RunRecord {
            wall_start: at(5_000),
            ..run(false, 0, fire, 5_000, Scheduled)
        };
        let j = run(true, 1, fire, 9_000, Scheduled);
        let runs = [s.clone(), j.clone()];
        let by_item = runs_by_item(&runs);
        let once = about("once", Subject::runs(&s, &j));
        use JavaSharding::{Flagged, Sharded};
        #[rustfmt::skip]
        let cases = [
            ("flag after S's start, sharded before J's", vec![Flagged(6_000), Sharded(8_000)], Some(Behaviour::RunsUnderNewPlan)),
            ("no re-shard", vec![], None),
            ("flagged but not sharded before J's start", vec![Flagged(6_000), Sharded(9_500)], None),
            ("the flag was there at S's start", vec![Flagged(4_000), Sharded(8_000)], None),
            ("an older flag consumed, then one after S's start", vec![Flagged(1_000), Sharded(2_000), Flagged(6_000), Sharded(8_000)], Some(Behaviour::RunsUnderNewPlan)),
            ("the flag there at S's start, consumed, then another", vec![Flagged(4_000), Sharded(5_500), Flagged(6_000), Sharded(8_000)], None),
        ];
        for (what, steps, want) in cases {
            assert_eq!(
                judge(&once, &by_item, &none, None, &trace(steps)),
                want,
                "{what}"
            );
        }
        let after = trace(vec![Flagged(6_000), Sharded(8_000)]);
        // S claimed ahead and started before its fire by its own clock: its own doing.
        let early = RunRecord {
            wall_start: fire - 250,
            ..s.clone()
        };
        let runs = [early.clone(), j.clone()];
        let v = about("once", Subject::runs(&early, &j));
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &after),
            None,
            "claimed ahead"
        );
        // A later J run that is a misfire replay, or another checker: not this rule.
        let replay = run(true, 1, fire, 9_000, Misfire);
        let runs = [s.clone(), replay.clone()];
        let v = about("once", Subject::runs(&s, &replay));
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &after),
            None,
            "misfire"
        );
        let v = about("overlap", Subject::runs(&s, &j));
        assert_eq!(judge(&v, &by_item, &none, None, &after), None, "overlap");
        // J started against the plan: S, the owner, ran it by right, whichever came first.
        let stray = JavaTrace {
            stale_starts: [("j".to_owned(), 0, 1, 9_000)].into(),
            ..JavaTrace::default()
        };
        assert_eq!(
            judge(&once, &by_item, &none, None, &stray),
            Some(Behaviour::StartWithoutClaim)
        );
        // The same stray J start beside S's run still going: J's overlap, of any run of
        // J's own items (a trigger's, a misfire replay's), never of a failover run.
        let v = about("overlap", Subject::runs(&s, &j));
        assert_eq!(
            judge(&v, &by_item, &none, None, &stray),
            Some(Behaviour::StartWithoutClaim)
        );
        assert_eq!(
            judge(&v, &by_item, &none, None, &JavaTrace::default()),
            None
        );
        for (kind, want) in [
            (RunKind::Trigger, Some(Behaviour::StartWithoutClaim)),
            (Misfire, Some(Behaviour::StartWithoutClaim)),
            (RunKind::Failover, None),
        ] {
            let other = run(true, 1, fire, 9_000, kind);
            let runs = [s.clone(), other.clone()];
            let v = about("overlap", Subject::runs(&s, &other));
            assert_eq!(
                judge(&v, &runs_by_item(&runs), &none, None, &stray),
                want,
                "{kind:?}"
            );
        }
        // A J run whose session had ended when S started the item, overlapped by S: the J ran
        // on with no fencing; not while its session lived.
        let zombie = |session_end| RunRecord {
            session_end,
            ..run(true, 1, fire, 4_000, Scheduled)
        };
        for (session_end, want) in [
            (Some(4_500), Some(Behaviour::NoFencing)),
            (Some(5_500), None),
            (None, None),
        ] {
            let j = zombie(session_end);
            let runs = [j.clone(), s.clone()];
            let v = about("overlap", Subject::runs(&j, &s));
            let got = judge(&v, &runs_by_item(&runs), &none, None, &JavaTrace::default());
            assert_eq!(got, want, "session ended at {session_end:?}");
        }
        let j_first = run(true, 1, fire, 4_000, Scheduled);
        let runs = [j_first.clone(), s.clone()];
        let v = about("once", Subject::runs(&j_first, &s));
        let stray_first = JavaTrace {
            stale_starts: [("j".to_owned(), 0, 1, 4_000)].into(),
            ..JavaTrace::default()
        };
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &stray_first),
            Some(Behaviour::StartWithoutClaim)
        );
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &JavaTrace::default()),
            None,
            "a J run by the plan, then S: S's duplicate"
        );
        // A J failover run after the S run: J's own only when J queued it while the owner
        // was registered (a DELETED of its earlier registration handled late).
        let failover = run(true, 1, fire, 9_000, RunKind::Failover);
        let runs = [s.clone(), failover.clone()];
        let v = about("once", Subject::runs(&s, &failover));
        let live = JavaTrace {
            live_failovers: [("j".to_owned(), 0, 1, 9_000)].into(),
            ..JavaTrace::default()
        };
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &live),
            Some(Behaviour::FailoverReplay)
        );
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &JavaTrace::default()),
            None,
            "a failover of a dead owner's finished run"
        );
        let v = about("overlap", Subject::runs(&s, &failover));
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &live),
            Some(Behaviour::NoFencing)
        );
        assert_eq!(
            judge(&v, &runs_by_item(&runs), &none, None, &JavaTrace::default()),
            None,
            "an overlap with a failover of a dead owner's run"
        );
    }

    #[test]
    fn a_lost_fire_is_elasticjobs_own_only_if_the_item_stayed_in_elasticjob_hands() {
        use RunKind::{Scheduled, Trigger};
        let none = BTreeMap::new();
        let lost = about("lost", Subject::fire("j", 0, 2_000));
        // J ran the fire before and the one after.
        let before = run(true, 0, 1_000, 1_000, Scheduled);
        let after = run(true, 1, 3_000, 3_000, Scheduled);
        assert_eq!(
            judged(&lost, &[before.clone(), after.clone()], &none),
            Some(Behaviour::GivesUpFires)
        );
        // S ran the fire before, or the one after, or a trigger in between: S had the item.
        let s_before = run(false, 0, 1_000, 1_000, Scheduled);
        let s_after = run(false, 0, 3_000, 3_000, Scheduled);
        let s_trigger = run(false, 0, 2_500, 2_500, Trigger);
        assert_eq!(judged(&lost, &[s_before, after.clone()], &none), None);
        assert_eq!(judged(&lost, &[before.clone(), s_after], &none), None);
        assert_eq!(
            judged(&lost, &[before.clone(), s_trigger, after.clone()], &none),
            None
        );
        // J ran the fire before, nothing after: the item waits, if the plan is J's (a
        // shardjob leader would have given it to a live owner).
        assert_eq!(judged(&lost, std::slice::from_ref(&before), &none), None);
        let java_plan = BTreeMap::from([(
            "j".to_owned(),
            JavaPlan {
                behaviour: Some(Behaviour::ShardsOnlyAtFire),
                ..JavaPlan::default()
            },
        )]);
        assert_eq!(
            judged(&lost, std::slice::from_ref(&before), &java_plan),
            Some(Behaviour::UnboundedWait)
        );
        // Nothing ran around it: only a plan of ElasticJob's that gives the item to a J or to
        // nobody tells.
        assert_eq!(judged(&lost, &[], &none), None);
        let mut plans = BTreeMap::from([(
            "j".to_owned(),
            JavaPlan {
                behaviour: Some(Behaviour::ShardsOnlyAtFire),
                ..JavaPlan::default()
            },
        )]);
        assert_eq!(
            judged(&lost, &[], &plans),
            Some(Behaviour::ShardsOnlyAtFire)
        );
        if let Some(p) = plans.get_mut("j") {
            p.owned.insert(0);
        }
        assert_eq!(judged(&lost, &[], &plans), None, "owned by a shardjob node");
        if let Some(p) = plans.get_mut("j") {
            p.behaviour = None;
        }
        assert_eq!(judged(&lost, &[], &plans), None);
    }

    #[test]
    fn a_java_misfire_replaying_its_own_run_under_a_new_plan_is_elasticjobs() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let fire = 5_000;
        // S ran the fire at its time; a J set the flag after, sharded, and the J blocked at
        // the fire ran it under the new plan (runs-under-new-plan), then replayed it.
        let s = RunRecord {
            wall_start: fire,
            ..run(false, 0, fire, 5_000, Scheduled)
        };
        let j_first = run(true, 1, fire, 9_000, Scheduled);
        let j_replay = run(true, 1, fire, 9_500, Misfire);
        let other_j_first = run(true, 2, fire, 9_000, Scheduled);
        let after = trace(vec![Flagged(6_000), Sharded(8_000)]);
        let v = about("once", Subject::runs(&s, &j_replay));
        let judged =
            |runs: &[RunRecord], t: &JavaTrace| judge(&v, &runs_by_item(runs), &none, None, t);
        let runs = [s.clone(), j_first.clone(), j_replay.clone()];
        assert_eq!(judged(&runs, &after), Some(Behaviour::MisfireReplay));
        // Not when the J's first run is not ElasticJob's own (the flag came before S's start),
        assert_eq!(
            judged(&runs, &trace(vec![Flagged(4_000), Sharded(8_000)])),
            None
        );
        // nor when another J ran it first: the replay is not of its own run,
        assert_eq!(
            judged(&[s.clone(), other_j_first, j_replay.clone()], &after),
            None
        );
        // nor with no J run of it before the replay,
        assert_eq!(judged(&[s.clone(), j_replay.clone()], &after), None);
        // unless the J flagged the fire on the item after S's run of it had started (its
        // cache gave it the item later), whatever the flag's steps.
        let flagged_late = JavaTrace {
            flagged_after_run: [("j".to_owned(), 0, fire)].into(),
            ..trace(vec![])
        };
        assert_eq!(
            judged(&[s.clone(), j_replay.clone()], &flagged_late),
            Some(Behaviour::MisfireReplay)
        );
        let other_fire = JavaTrace {
            flagged_after_run: [("j".to_owned(), 0, fire + 1_000)].into(),
            ..trace(vec![])
        };
        assert_eq!(judged(&[s, j_replay], &other_fire), None);
    }

    #[test]
    fn a_fire_a_java_clock_ahead_ran_early_is_elasticjobs_when_shardjob_runs_it_at_its_time() {
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let fire = 10_000;
        #[rustfmt::skip]
        let cases = [
            ("J 2 s early, S at the fire", 8_000, 10_005, None, Some(Behaviour::ClockAhead)),
            ("J half a second early", 9_500, 10_005, None, None),
            ("S early too", 8_000, 8_500, None, None),
            ("an S run of the fire before J's", 8_000, 10_005, Some(7_000), None),
        ];
        for (what, j_start, s_start, s_before, want) in cases {
            let j = run(true, 1, fire, j_start, Scheduled);
            let s = run(false, 0, fire, s_start, Misfire);
            let mut runs = vec![j.clone(), s.clone()];
            runs.extend(s_before.map(|at| run(false, 2, fire, at, Scheduled)));
            let v = about("once", Subject::runs(&j, &s));
            assert_eq!(judged(&v, &runs, &none), want, "{what}");
        }
    }

    #[test]
    fn a_fire_lost_on_an_item_elasticjob_s_re_shard_moved_at_that_fire_is_elasticjobs() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::Scheduled;
        let none = BTreeMap::new();
        let lost = about("lost", Subject::fire("j", 0, 2_000));
        let s_before = run(false, 0, 1_000, 1_000, Scheduled);
        let j_after = run(true, 1, 3_000, 3_000, Scheduled);
        let j_early = run(true, 1, 3_000, 2_300, Scheduled);
        let s_after = run(false, 0, 3_000, 3_000, Scheduled);
        let moved = Some(Behaviour::MovedAtTheGate);
        #[rustfmt::skip]
        let cases = [
            ("flag up at the fire, J's sharding after it, J runs the next", vec![Flagged(1_500), Sharded(2_600)], &j_after, moved),
            ("no flag", vec![], &j_after, None),
            ("the flag consumed before the fire", vec![Flagged(1_500), Sharded(1_800)], &j_after, None),
            ("the flag set after the fire", vec![Flagged(2_100), Sharded(2_600)], &j_after, None),
            ("never consumed", vec![Flagged(1_500)], &j_after, None),
            ("J's next run before the sharding", vec![Flagged(1_500), Sharded(2_600)], &j_early, None),
            ("S runs the next", vec![Flagged(1_500), Sharded(2_600)], &s_after, None),
        ];
        for (what, steps, next, want) in cases {
            let runs = [s_before.clone(), next.clone()];
            let got = judge(&lost, &runs_by_item(&runs), &none, None, &trace(steps));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_fire_behind_a_flag_no_elasticjob_leader_ever_consumed_is_elasticjobs_wait() {
        use JavaSharding::{Flagged, Sharded};
        use RunKind::Scheduled;
        let java_plan = |markers: bool| {
            BTreeMap::from([(
                "j".to_owned(),
                JavaPlan {
                    behaviour: Some(Behaviour::ShardsOnlyAtFire),
                    owned: [0].into(),
                    shardjob_markers: markers,
                    ..JavaPlan::default()
                },
            )])
        };
        // S owned the item and ran the fire before the flag (1,500), then waited at the gate.
        let s_before = run(false, 0, 1_000, 1_000, Scheduled);
        let s_past_flag = run(false, 0, 1_600, 1_600, Scheduled);
        let lost = about("lost", Subject::fire("j", 0, 2_000));
        let judged = |runs: &[RunRecord], plan: &BTreeMap<String, JavaPlan>, t: &JavaTrace| {
            judge(&lost, &runs_by_item(runs), plan, None, t)
        };
        let up = trace(vec![Flagged(1_500)]);
        let before_only = vec![s_before.clone()];
        let and_past_flag = vec![s_before.clone(), s_past_flag];
        // (what, the item's runs, an S marker at the end, the J sharding steps, the verdict)
        type Case<'a> = (
            &'a str,
            &'a [RunRecord],
            bool,
            Vec<JavaSharding>,
            Option<Behaviour>,
        );
        #[rustfmt::skip]
        let cases: [Case<'_>; 6] = [
            ("flag up from before the fire to the end", &before_only, false, vec![Flagged(1_500)], Some(Behaviour::UnboundedWait)),
            ("consumed after the fire", &before_only, false, vec![Flagged(1_500), Sharded(2_500)], None),
            ("set after the fire", &before_only, false, vec![Flagged(2_500)], None),
            ("consumed before the fire", &before_only, false, vec![Flagged(1_500), Sharded(1_800)], None),
            ("an S run started past the flag", &and_past_flag, false, vec![Flagged(1_500)], None),
            ("an S marker the leader may wait for", &before_only, true, vec![Flagged(1_500)], None),
        ];
        for (what, runs, markers, steps, want) in cases {
            assert_eq!(
                judged(runs, &java_plan(markers), &trace(steps)),
                want,
                "{what}"
            );
        }
        // Not under a plan that is shardjob's at the end.
        assert_eq!(judged(&[s_before], &BTreeMap::new(), &up), None);
    }

    #[test]
    fn a_fire_after_every_shardjob_process_had_gone_is_elasticjobs_to_run() {
        use RunKind::Scheduled;
        let java_plan = BTreeMap::from([(
            "j".to_owned(),
            JavaPlan {
                behaviour: Some(Behaviour::ShardsOnlyAtFire),
                owned: [0].into(),
                ..JavaPlan::default()
            },
        )]);
        // S ran the item last, then every S went (a rollback), and the item (given to the S
        // that left) never ran again: before S had gone, the fire fails; from then on it was
        // J's to run, while the plan at the end is J's.
        let s_before = run(false, 0, 1_000, 1_000, Scheduled);
        let runs = [s_before];
        let by_item = runs_by_item(&runs);
        let lost = about("lost", Subject::fire("j", 0, 2_000));
        assert_eq!(
            judge(&lost, &by_item, &java_plan, None, &JavaTrace::default()),
            None
        );
        assert_eq!(
            judge(
                &lost,
                &by_item,
                &java_plan,
                Some(2_500),
                &JavaTrace::default()
            ),
            None
        );
        assert_eq!(
            judge(
                &lost,
                &by_item,
                &java_plan,
                Some(1_500),
                &JavaTrace::default()
            ),
            Some(Behaviour::UnboundedWait)
        );
        // Not while a shardjob leader's plan is the end's.
        assert_eq!(
            judge(
                &lost,
                &by_item,
                &BTreeMap::new(),
                Some(1_500),
                &JavaTrace::default()
            ),
            None
        );
        // Two runs are judged as before.
        let j = run(true, 1, 1_000, 3_000, Scheduled);
        let twice = about("once", Subject::runs(&runs[0], &j));
        assert_eq!(
            judge(
                &twice,
                &by_item,
                &java_plan,
                Some(1_500),
                &JavaTrace::default()
            ),
            None
        );
    }

    #[test]
    fn one_run_and_the_plan_are_elasticjobs_own_only_when_they_are_elasticjobs() {
        use RunKind::{Misfire, Scheduled};
        let none = BTreeMap::new();
        let j = run(true, 0, 1_000, 1_000, Misfire);
        let s = run(false, 0, 1_000, 1_000, Misfire);
        for checker in ["downtime", "fresh"] {
            let v = about(checker, Subject::run(&j));
            assert_eq!(judged(&v, &[], &none), Some(Behaviour::StaleMisfireFlags));
            let v = about(checker, Subject::run(&s));
            assert_eq!(judged(&v, &[], &none), None);
        }
        // A fire that came during a J run: J's, unless an S run of the item followed.
        let during = run(true, 0, 1_000, 1_000, Scheduled);
        let v = about("misfire", Subject::run(&during));
        let next_j = run(true, 1, 3_000, 3_000, Scheduled);
        let next_s = run(false, 0, 3_000, 3_000, Scheduled);
        assert_eq!(
            judged(&v, &[during.clone(), next_j], &none),
            Some(Behaviour::LateMisfireReplay)
        );
        assert_eq!(judged(&v, &[during.clone(), next_s], &none), None);
        // The plan: as [`super::plans`] found it.
        let plan = about("convergence", Subject::Plan { job: "j".into() });
        assert_eq!(judged(&plan, &[], &none), None);
        let plans = BTreeMap::from([(
            "j".to_owned(),
            JavaPlan {
                behaviour: Some(Behaviour::ShardsOnlyAtFire),
                ..JavaPlan::default()
            },
        )]);
        assert_eq!(
            judged(&plan, &[], &plans),
            Some(Behaviour::ShardsOnlyAtFire)
        );
        let other = about("convergence", Subject::Other);
        assert_eq!(judged(&other, &[], &plans), None);
    }

    #[test]
    fn a_world_without_elasticjob_processes_fails_every_violation() {
        let j1 = run(true, 0, 1_000, 20, RunKind::Scheduled);
        let j2 = run(true, 1, 1_000, 30, RunKind::Scheduled);
        let v = about("overlap", Subject::runs(&j1, &j2));
        let found = split(
            vec![v.clone()],
            &[j1.clone(), j2.clone()],
            false,
            &BTreeMap::new(),
            None,
            &JavaTrace::default(),
        );
        assert_eq!(found.failing, std::slice::from_ref(&v));
        assert!(found.elasticjob.is_empty());
        let found = split(
            vec![v],
            &[j1, j2],
            true,
            &BTreeMap::new(),
            None,
            &JavaTrace::default(),
        );
        assert!(found.failing.is_empty());
        assert_eq!(found.elasticjob.len(), 1);
    }
}
