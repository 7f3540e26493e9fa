//! Script jobs: argv without a shell, the context JSON as the last argument, exit status,
//! timeout, cancellation, bounded output capture; and a Script job run by the real driver.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardjob::core::machine::{CancelReason, ItemOutcome};
use shardjob::core::{InstanceId, JobConfig};
use shardjob::jobs::{CancelSignal, Job, JobError, ScriptJob, ShardingContext};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, Scheduler};

fn ctx(props: &[(&str, &str)]) -> ShardingContext {
    let props: BTreeMap<String, String> = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ShardingContext::new("scripted", 3, 1)
        .with_sharding_parameter("B")
        .with_props(props)
}

#[tokio::test]
async fn arguments_are_argv_and_the_context_comes_last() {
    let ctx = ctx(&[("script.command.line", r#"printf '%s|' 'a b' "$HOME" ; *"#)]);
    let out = ScriptJob.execute_item(&ctx).await.unwrap().unwrap();
    assert_eq!(
        out.stdout,
        format!(r#"a b|$HOME|;|*|{}|"#, ctx.to_json()),
        "no shell: nothing is expanded"
    );
    let json: serde_json::Value = serde_json::from_str(&ctx.to_json()).unwrap();
    assert_eq!(json["jobName"], "scripted");
    assert_eq!(json["shardingItem"], 1);
    assert_eq!(json["shardingParameter"], "B");
}

#[tokio::test]
async fn fire_time_kind_and_fencing_token_come_in_the_environment() {
    let mut ctx = ctx(&[(
        "script.command.line",
        r#"sh -c 'echo "$SHARDJOB_FIRE_TIME $SHARDJOB_RUN_KIND $SHARDJOB_FENCING_TOKEN"'"#,
    )]);
    ctx.fire_time = "2027-01-30T16:00:05Z".parse().unwrap();
    ctx.kind = shardjob::core::machine::record::RunKind::Failover;
    ctx.fencing_token = 4711;
    let out = ScriptJob.execute_item(&ctx).await.unwrap().unwrap();
    assert_eq!(out.stdout, "2027-01-30T16:00:05.000Z FAILOVER 4711\n");
}

#[tokio::test]
async fn stdout_and_stderr_are_captured_and_bounded() {
    let ctx = ctx(&[
        (
            "script.command.line",
            "sh -c 'echo out; echo err >&2; i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done'",
        ),
        ("script.output.limit.bytes", "100"),
    ]);
    let out = ScriptJob.execute_item(&ctx).await.unwrap().unwrap();
    assert_eq!(out.stderr, "err\n");
    assert!(out.stdout.len() <= 100, "{}", out.stdout.len());
    assert!(out.stdout.ends_with("line1999\n"), "{}", out.stdout);
    assert!(out.stdout_truncated > 10_000, "{}", out.stdout_truncated);
}

#[tokio::test]
async fn non_zero_exit_is_a_failure_with_its_output() {
    let ctx = ctx(&[(
        "script.command.line",
        "sh -c 'echo partial; echo broken >&2; exit 3'",
    )]);
    let err = ScriptJob.execute_item(&ctx).await.unwrap_err();
    let JobError::ScriptFailed { status, output } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(status, "exit status 3");
    assert_eq!(output.stdout, "partial\n");
    assert_eq!(output.stderr, "broken\n");
    assert!(err.to_string().contains("broken"), "{err}");
}

#[tokio::test]
async fn timeout_kills_the_script() {
    let ctx = ctx(&[
        ("script.command.line", "sh -c 'echo started; exec sleep 30'"),
        ("script.timeout.milliseconds", "300"),
    ]);
    let t0 = Instant::now();
    let err = ScriptJob.execute_item(&ctx).await.unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let JobError::TimedOut { after, output } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*after, Duration::from_millis(300));
    assert_eq!(output.stdout, "started\n");
}

#[tokio::test]
async fn cancellation_kills_the_script() {
    let (cancel, signal) = CancelSignal::new();
    let ctx = ctx(&[("script.command.line", "sh -c 'exec sleep 30'")]).with_cancel(signal);
    let t0 = Instant::now();
    let run = tokio::spawn(async move { ScriptJob.execute_item(&ctx).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel(CancelReason::Shutdown);
    let err = run.await.unwrap().unwrap_err();
    assert_eq!(err, JobError::Cancelled);
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn bad_configuration_is_reported() {
    let err = ScriptJob.execute_item(&ctx(&[])).await.unwrap_err();
    assert!(matches!(err, JobError::Config(_)), "{err:?}");
    let err = ScriptJob
        .execute_item(&ctx(&[("script.command.line", "echo 'open")]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("unterminated"), "{err}");
    let err = ScriptJob
        .execute_item(&ctx(&[("script.command.line", "/no/such/program")]))
        .await
        .unwrap_err();
    assert!(matches!(err, JobError::Io(_)), "{err:?}");
}

/// Through the driver: items succeed, fail and time out by item; outcomes and output reach
/// subscribers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_runs_a_script_job_and_reports_outcomes() {
    let server = MemServer::default();
    let mut config = JobConfig::new("script-job", 3);
    // Item 0 succeeds, item 1 fails, item 2 runs past its timeout.
    config.sharding_item_parameters = [
        (0, "ok".to_owned()),
        (1, "fail".to_owned()),
        (2, "slow".to_owned()),
    ]
    .into();
    let script = r#"case "$0" in *'"ok"'*) echo fine ;; *'"fail"'*) echo nope >&2; exit 7 ;; *) sleep 10 ;; esac"#;
    config.props = [
        (
            "script.command.line".to_owned(),
            format!("sh -c '{}'", script.replace('\'', r"'\''")),
        ),
        ("script.timeout.milliseconds".to_owned(), "500".to_owned()),
    ]
    .into();
    let handle = Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(InstanceId::new("127.0.0.1@-@7").unwrap())
        .job(config, ScriptJob)
        .build()
        .await
        .unwrap();
    let mut events = handle.subscribe();
    handle.trigger("script-job", None).await.unwrap();
    let mut finished = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while finished.len() < 3 {
        let ev = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("three items finish")
            .unwrap();
        if let RunEvent::ItemFinished {
            run,
            outcome,
            error,
            output,
            ..
        } = ev
        {
            finished.insert(run.item, (outcome, error, output));
        }
    }
    handle.shutdown().await.unwrap();

    let (outcome, _, output) = &finished[&0];
    assert_eq!(*outcome, ItemOutcome::Succeeded);
    assert_eq!(output.as_ref().unwrap().stdout, "fine\n");
    let (outcome, error, output) = &finished[&1];
    assert!(
        matches!(outcome, ItemOutcome::Failed(m) if m.contains("exit status 7")),
        "{outcome:?}"
    );
    assert!(matches!(error, Some(JobError::ScriptFailed { .. })));
    assert_eq!(output.as_ref().unwrap().stderr, "nope\n");
    let (outcome, error, _) = &finished[&2];
    assert!(matches!(outcome, ItemOutcome::Failed(_)), "{outcome:?}");
    assert!(
        matches!(error, Some(JobError::TimedOut { .. })),
        "{error:?}"
    );
}
