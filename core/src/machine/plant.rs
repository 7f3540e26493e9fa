//! Planted bugs: switches that each remove one safety measure of the machine, compiled in only
//! with the `plant-bugs` feature. The simulator turns them on one at a time to prove its
//! checkers can fail. Never enable the feature in a build that runs jobs.

use std::fmt;
use std::str::FromStr;

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Plant {
    /// Never cancel running items when the session cannot be confirmed.
    NoSelfFencing,
    /// Trust the session for 1.5 session timeouts instead of less than one.
    LeaseBeyondTimeout,
    /// Fail over every item of a dead owner, finished ones included.
    FailoverFinished,
    /// Start the items of a claim even when the claim transaction failed.
    IgnoreFailedClaim,
    /// Stop for good when the session expires, like ElasticJob.
    ShutdownOnSessionLoss,
    /// Drop fires that came while the item was running, even with misfire on.
    DropMisfires,
    /// Do not record the finished fire when a run ends.
    ForgetCompletion,
    /// Run items an operator disabled.
    RunDisabledItems,
    /// Claim items without checking who owns them, and write the record unconditionally.
    SkipOwnerCheck,
    /// Create `running` markers persistent instead of bound to the session, in any job, without
    /// the clean-up that makes persistent markers safe in a job shared with ElasticJob (the
    /// markers an earlier session of this instance left stay in place, as with
    /// [`Plant::KeepOwnMarkersLeft`]): an instance back from an expired session finds its
    /// items blocked for good by its own markers, whose owner is live again.
    PersistentRunningMarkers,
    /// Keep the next fires worked out from the wall clock as it was before it stepped.
    IgnoreClockSteps,
    /// Leave a removed job at once, while its items still run here.
    LeaveWhileRunning,
    /// Keep no wake for a job decided on a registry event: only another event, or the safety
    /// sweep, decides on it again.
    ForgetWakes,
    /// Ignore the cluster's start: run the fires missed while no instance was registered, as
    /// before the misfire policy on start-up.
    CatchUpAfterDowntime,
    /// Give up every fire from before the cluster's start, ignoring the job's catch-up bound.
    IgnoreCatchUpBound,
    /// Register again when an operator deletes this instance's node, as if the session had
    /// been lost (the behaviour before remote shutdown was told apart).
    IgnoreOperatorShutdown,
    /// Take any deletion of this instance's node for an operator's shutdown, without first
    /// confirming that the session outlived it (a session's expiry then stops the job here).
    ShutdownWithoutProbe,
    /// Adopt the `running` markers of runs that ended here and whose completion is not
    /// recorded yet (a cut-off while the run ended), as if their claim's reply had been lost:
    /// the same fire runs again here, with the same fencing token.
    RerunFinished,
    /// Record a claim given back (a run claimed ahead that does not start: the session in
    /// doubt, an item disabled, the job left) as its fire done: the fire is lost.
    GiveBackAsDone,
    /// Create a new item with the job's latest done fire as a run in progress, as if a removed
    /// item's record were carried over: it is failed over, and an item regrown after a shrink
    /// runs again a fire its number ran.
    RegrowRerunsDone,
    /// Remove items beyond a reduced total at once, running or not: their `running` markers
    /// go with them, and a run of the number grown back may overlap the old one.
    RemoveWhileRunning,
    /// Record the end of an execution split over several transactions with its first part
    /// only: the later parts are dropped, their items left running for the registry.
    SplitCompletionDropsParts,
    /// Ignore the watch's deletions of items' `disabled` nodes: an item enabled again stays
    /// disabled for this instance until its cache is next loaded from scratch.
    StaleCache,
    /// Give up the whole end of an execution recorded in parts when the registry refuses one
    /// part (as when an earlier attempt of it applied and only its reply was lost): the later
    /// parts' `running` markers stay this session's, are adopted as a claim whose reply was
    /// lost, and their fire starts again here with the same fencing token.
    ConflictDropsRest,
    /// Apply every watch event after a reload's snapshot, even one from before the revision
    /// the snapshot was read at: a deletion older than the snapshot hides a node it shows.
    StaleEventAfterReload,
    /// Keep the lease's deadline as a timer while any execution is kept, ended runs waiting
    /// for their completion included: once it passes, the timer stays due and the driver
    /// spins until the completion is recorded.
    LeaseTimerAfterEnd,
    /// When adopting a run whose claim's reply was lost, keep the item's `failover` node for
    /// removal only if the run is recorded as a failover: a failed-over trigger's run (recorded
    /// as a trigger) leaves it behind, and while the session lives the item is never failed
    /// over again.
    AdoptDropsTriggerFailover,
    /// Divide the rolling sweep's count of jobs left by its chunk instead of taking the chunk
    /// off: the count stays at one, the sweep never ends, and the machine wakes every
    /// millisecond to evaluate one job again (right decisions, a thousand wakes a second).
    EndlessSweep,
    /// Withdraw nothing of what was reported of a job's plan when the job stops being hosted:
    /// a job hosted again reports only what changed since its own start, and the last word a
    /// listener heard (a re-shard pending, items owned) stays the one from before it left.
    StalePlanReport,
    /// Leave a `running` marker that no session holds in place when its owner is gone (a
    /// persistent marker of a killed ElasticJob instance, or one written by hand): the item
    /// never runs again while it stays.
    KeepStaleRunning,
    /// Count an `instances/` node that no session holds as a live candidate for items: the
    /// items the plan gives it never run while it stays.
    UnboundCandidates,
    /// Leave what ElasticJob left in a job it no longer shares (a `failovering` node of a
    /// failover never finished, queued `leader/failover/items`) for ever: an ElasticJob
    /// instance that joins later takes a queued failover of a fire long past up and runs it
    /// again (`docs/migration-design.md` 3.8).
    KeepJavaLeftovers,
    /// Remove a stale `running` marker checking only its version, as the leader saw it: a
    /// leader whose view is late (a watch behind, an earlier removal that timed out but was
    /// applied) removes a newer marker of the item created since, at version 0 again, under a
    /// live run.
    StaleRemovalByVersion,
    /// Stand for election, and keep the lead, while an ElasticJob instance that can lead is
    /// registered (a mixed job is led by ElasticJob: see `docs/migration-design.md` 3.3).
    ElectBesideJava,
    /// Hold new runs for the re-shard wait only, as when shardjob leads, while an ElasticJob
    /// instance leads and re-shards: a run started under the old plan is run again by the
    /// item's new owner for the same fire (the fire gate of `docs/migration-design.md` 3.4).
    GateOpenBesideJava,
    /// Claim while this instance's clock is off the registry's by more than the job allows
    /// (a second while it is shared with ElasticJob): a fire run early here is the fire an
    /// ElasticJob instance runs again at its time (`docs/migration-design.md` 5, question 2).
    IgnoreRegistryClock,
    /// Claim a fire ahead of it while the job is shared with ElasticJob: an ElasticJob leader
    /// that sets its re-sharding flag in the moments before the fire, unseen here yet, waits
    /// for this run and has the item's new owner run the fire again (a J reads the flag at the
    /// fire; `docs/migration-design.md` 3.4 point 3).
    ClaimAheadBesideJava,
    /// Remove another instance's `running` marker left behind on a view that may be behind
    /// the registry (no session confirmed just now): its owner, back meanwhile, may have
    /// created it again at the same version and value, and its live run loses its marker.
    ClearMarkersOnStaleView,
    /// Ignore the runs of ElasticJob seen on an item: a fire an ElasticJob instance ran just
    /// before it left runs again here when the item comes over (`docs/migration-design.md`
    /// 3.6).
    RerunJavaFires,
    /// Attribute a run of ElasticJob seen on an item to a fire by this instance's clock when
    /// the event arrived, not by the registry's stamp of the marker's write: with this clock
    /// behind, a fire an ElasticJob instance ran at its time is taken for the one before, and
    /// runs again here when the item comes over (`docs/migration-design.md` 3.6).
    ObserveJavaByOwnClock,
    /// Leave an ElasticJob leader's plan that names owners gone with no flag up as it is:
    /// ElasticJob re-shards only on a change and at a leader's fire, so the items wait, never
    /// run, until the next change (`docs/migration-design.md` 3.7).
    NoNudgeBesideJava,
    /// Leave the garbage instance nodes of a job an ElasticJob instance leads: its every
    /// sharding throws on one, so the job is never re-sharded while it stays, and a flag up
    /// holds every fire, shardjob's too (`docs/migration-design.md` 3.7).
    KeepGarbageBesideJava,
    /// Create `running` markers bound to the session while the job is mixed and `failover` is
    /// on: they are gone with a killed instance's session before ElasticJob's failover looks
    /// for them, and the fire the instance was running is never run again
    /// (`docs/migration-design.md` 3.4, point 5).
    EphemeralMarkersBesideJava,
    /// Fail orphaned runs over with shardjob's own failover while the job is mixed, beside
    /// ElasticJob's: a run ElasticJob fails over runs twice (`docs/migration-design.md` 3.5).
    FailoverBesideJava,
    /// Leave the persistent `running` markers of an earlier session of this instance in place:
    /// their owner is live again, so nothing else removes them, and their items never run
    /// again (`docs/migration-design.md` 3.4, point 5).
    KeepOwnMarkersLeft,
    /// Check an item's owner by its version even at version 0, and never seal the node
    /// (`claim::owner`): ElasticJob's re-shards delete and re-create every `instance` node at
    /// version 0, so a claim made on a view from before such a re-shard passes on an item
    /// ElasticJob gave to another instance, which runs the same fire.
    OwnerCheckByVersionZero,
    /// Keep the fire gate by the view alone, not in the claim's transaction too: an instance
    /// whose watch lags behind ElasticJob's re-sharding flag claims a fire under the old plan,
    /// and the item's new owner runs it again (`docs/migration-design.md` 3.4, point 2).
    GateByViewOnly,
    /// Re-shard without checking that the configuration is still the one the plan was worked
    /// out from: a leader behind the registry removes items by an item count an operator has
    /// changed back since.
    ReshardOnStaleConfig,
    /// Start a run claimed ahead at its fire even when ElasticJob's leader set the re-sharding
    /// flag after the claim: the leader waits for the run, re-shards, and the item's new owner
    /// runs the same fire again (`docs/migration-design.md` 3.4, point 3).
    StartAheadPastTheGate,
    /// Give up the fire an ElasticJob leader's re-sharding flag held, on the items its
    /// re-shard gives this instance (the baseline is when the item came): nobody runs that
    /// fire (`docs/migration-design.md` 3.6, rule (e)).
    SkipHeldFire,
    /// Take a recorded run whose marker is gone for an orphan even when the run names another
    /// live instance: when ElasticJob's failover listener or its reconnection (or an operator)
    /// deletes the marker of a run that goes on, another shardjob instance fails the run over
    /// beside it (`docs/migration-design.md` 3.4).
    FailoverLiveRunner,
    /// Adopt a scheduled fire's `running` marker of this session created before this
    /// instance's node of the job (a claim whose reply was lost before the job was removed
    /// here and added back) and start it: a fire from before the cluster started again runs.
    AdoptEarlierHosting,
    /// Give up the end of a run whose `running` marker another hand deleted under it, as when
    /// the session is lost: the record keeps a run in progress whose runner is live, and this
    /// instance's own failover runs the finished fire again.
    KeepRecordWhenMarkerGone,
    /// While the job is shared with ElasticJob, leave a persistent `running` marker whose
    /// owner is gone in place unless it is a shardjob run's (a dead ElasticJob instance's, or a
    /// foreign hand's): ElasticJob's leader waits for it for ever before it re-shards, and
    /// every instance's fires wait at the gate behind its flag.
    KeepForeignMarkersBesideJava,
    /// Check a run's `running` marker by its version alone when recording its end while the
    /// job is shared with ElasticJob: an ElasticJob instance that deleted the marker by path
    /// and created its own at version 0 loses it under its run.
    EndByMarkerVersionOnly,
    /// Check the marker and the record by their versions alone when an execution's end is sent
    /// again after a lost reply, or by the record alone: once the item was removed and created
    /// again, a new owner's marker and record can be at the same versions, and the old end
    /// deletes the one under its run and writes over the other.
    ResendByVersion,
}

impl Plant {
    /// Every planted bug.
    pub const ALL: [Plant; 56] = [
        Plant::NoSelfFencing,
        Plant::LeaseBeyondTimeout,
        Plant::FailoverFinished,
        Plant::IgnoreFailedClaim,
        Plant::ShutdownOnSessionLoss,
        Plant::DropMisfires,
        Plant::ForgetCompletion,
        Plant::RunDisabledItems,
        Plant::SkipOwnerCheck,
        Plant::PersistentRunningMarkers,
        Plant::IgnoreClockSteps,
        Plant::LeaveWhileRunning,
        Plant::ForgetWakes,
        Plant::CatchUpAfterDowntime,
        Plant::IgnoreCatchUpBound,
        Plant::IgnoreOperatorShutdown,
        Plant::ShutdownWithoutProbe,
        Plant::RerunFinished,
        Plant::GiveBackAsDone,
        Plant::RegrowRerunsDone,
        Plant::RemoveWhileRunning,
        Plant::SplitCompletionDropsParts,
        Plant::StaleCache,
        Plant::ConflictDropsRest,
        Plant::StaleEventAfterReload,
        Plant::LeaseTimerAfterEnd,
        Plant::AdoptDropsTriggerFailover,
        Plant::EndlessSweep,
        Plant::StalePlanReport,
        Plant::KeepStaleRunning,
        Plant::UnboundCandidates,
        Plant::KeepJavaLeftovers,
        Plant::StaleRemovalByVersion,
        Plant::ElectBesideJava,
        Plant::GateOpenBesideJava,
        Plant::IgnoreRegistryClock,
        Plant::ClaimAheadBesideJava,
        Plant::ClearMarkersOnStaleView,
        Plant::RerunJavaFires,
        Plant::ObserveJavaByOwnClock,
        Plant::NoNudgeBesideJava,
        Plant::KeepGarbageBesideJava,
        Plant::EphemeralMarkersBesideJava,
        Plant::FailoverBesideJava,
        Plant::KeepOwnMarkersLeft,
        Plant::OwnerCheckByVersionZero,
        Plant::GateByViewOnly,
        Plant::ReshardOnStaleConfig,
        Plant::StartAheadPastTheGate,
        Plant::SkipHeldFire,
        Plant::FailoverLiveRunner,
        Plant::AdoptEarlierHosting,
        Plant::KeepRecordWhenMarkerGone,
        Plant::KeepForeignMarkersBesideJava,
        Plant::EndByMarkerVersionOnly,
        Plant::ResendByVersion,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Plant::NoSelfFencing => "no-self-fencing",
            Plant::LeaseBeyondTimeout => "lease-beyond-timeout",
            Plant::FailoverFinished => "failover-finished",
            Plant::IgnoreFailedClaim => "ignore-failed-claim",
            Plant::ShutdownOnSessionLoss => "shutdown-on-session-loss",
            Plant::DropMisfires => "drop-misfires",
            Plant::ForgetCompletion => "forget-completion",
            Plant::RunDisabledItems => "run-disabled-items",
            Plant::SkipOwnerCheck => "skip-owner-check",
            Plant::PersistentRunningMarkers => "persistent-running-markers",
            Plant::IgnoreClockSteps => "ignore-clock-steps",
            Plant::LeaveWhileRunning => "leave-while-running",
            Plant::ForgetWakes => "forget-wakes",
            Plant::CatchUpAfterDowntime => "catch-up-after-downtime",
            Plant::IgnoreCatchUpBound => "ignore-catch-up-bound",
            Plant::IgnoreOperatorShutdown => "ignore-operator-shutdown",
            Plant::ShutdownWithoutProbe => "shutdown-without-probe",
            Plant::RerunFinished => "rerun-finished",
            Plant::GiveBackAsDone => "give-back-as-done",
            Plant::RegrowRerunsDone => "regrow-reruns-done",
            Plant::RemoveWhileRunning => "remove-while-running",
            Plant::SplitCompletionDropsParts => "split-completion-drops-parts",
            Plant::StaleCache => "stale-cache",
            Plant::ConflictDropsRest => "conflict-drops-rest",
            Plant::StaleEventAfterReload => "stale-event-after-reload",
            Plant::LeaseTimerAfterEnd => "lease-timer-after-end",
            Plant::AdoptDropsTriggerFailover => "adopt-drops-trigger-failover",
            Plant::EndlessSweep => "endless-sweep",
            Plant::StalePlanReport => "stale-plan-report",
            Plant::KeepStaleRunning => "keep-stale-running",
            Plant::UnboundCandidates => "unbound-candidates",
            Plant::KeepJavaLeftovers => "keep-java-leftovers",
            Plant::StaleRemovalByVersion => "stale-removal-by-version",
            Plant::ElectBesideJava => "elect-beside-java",
            Plant::GateOpenBesideJava => "gate-open-beside-java",
            Plant::IgnoreRegistryClock => "ignore-registry-clock",
            Plant::ClaimAheadBesideJava => "claim-ahead-beside-java",
            Plant::ClearMarkersOnStaleView => "clear-markers-on-stale-view",
            Plant::RerunJavaFires => "rerun-java-fires",
            Plant::ObserveJavaByOwnClock => "observe-java-by-own-clock",
            Plant::NoNudgeBesideJava => "no-nudge-beside-java",
            Plant::KeepGarbageBesideJava => "keep-garbage-beside-java",
            Plant::EphemeralMarkersBesideJava => "ephemeral-markers-beside-java",
            Plant::FailoverBesideJava => "failover-beside-java",
            Plant::KeepOwnMarkersLeft => "keep-own-markers-left",
            Plant::OwnerCheckByVersionZero => "owner-check-by-version-zero",
            Plant::GateByViewOnly => "gate-by-view-only",
            Plant::ReshardOnStaleConfig => "reshard-on-stale-config",
            Plant::StartAheadPastTheGate => "start-ahead-past-the-gate",
            Plant::SkipHeldFire => "skip-held-fire",
            Plant::FailoverLiveRunner => "failover-live-runner",
            Plant::AdoptEarlierHosting => "adopt-earlier-hosting",
            Plant::KeepRecordWhenMarkerGone => "keep-record-when-marker-gone",
            Plant::KeepForeignMarkersBesideJava => "keep-foreign-markers-beside-java",
            Plant::EndByMarkerVersionOnly => "end-by-marker-version-only",
            Plant::ResendByVersion => "resend-by-version",
        }
    }
}

impl fmt::Display for Plant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Plant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Plant::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Plant::ALL.iter().map(|p| p.name()).collect();
                format!("unknown planted bug {s:?}; known: {}", names.join(", "))
            })
    }
}
