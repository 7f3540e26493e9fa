//! The `shardjob` preview commands, run in process through `shardjob_cli::cli::run` and, for the
//! exit codes, as the real binary.

use std::process::{Command, ExitCode};

use chrono::{TimeZone, Utc};
use clap::Parser;
use shardjob_cli::cli::{Cli, run};

fn run_cli(args: &[&str]) -> (ExitCode, String) {
    let cli = Cli::try_parse_from(std::iter::once("shardjob").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 6, 0, 0).unwrap();
    let mut out = Vec::new();
    let code = run(cli, now, &mut out).unwrap();
    (code, String::from_utf8(out).unwrap())
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out) = run_cli(args);
    assert_eq!(code, ExitCode::SUCCESS, "{args:?}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{out}: {e}"))
}

fn binary(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_orders_instances_as_the_registry_does() {
    // Reference §3.3: the registry lists ids in reverse string order, not numeric IP order.
    let got = json(&[
        "plan",
        "--strategy",
        "AVG_ALLOCATION",
        "--job-name",
        "j",
        "--total",
        "4",
        "--instances",
        "192.168.1.10@-@150,192.168.1.9@-@100,192.168.1.10@-@200",
        "--json",
    ]);
    let want: serde_json::Value = serde_json::from_str(
        r#"{"192.168.1.9@-@100":[0,3],"192.168.1.10@-@200":[1],"192.168.1.10@-@150":[2]}"#,
    )
    .unwrap();
    assert_eq!(got, want);
}

#[test]
fn plan_given_order_and_empty_instances() {
    let args = [
        "plan",
        "--strategy",
        "ROUND_ROBIN",
        "--job-name",
        "1",
        "--total",
        "2",
    ];
    let got = json(
        &[
            &args[..],
            &[
                "--instances",
                "host0,host1,host2",
                "--order",
                "given",
                "--json",
            ],
        ]
        .concat(),
    );
    let want: serde_json::Value =
        serde_json::from_str(r#"{"host1":[0],"host2":[1],"host0":[]}"#).unwrap();
    assert_eq!(got, want);
    // Keys keep the strategy's order in the printed JSON.
    let (_, out) = run_cli(
        &[
            &args[..],
            &[
                "--instances",
                "host0,host1,host2",
                "--order",
                "given",
                "--json",
            ],
        ]
        .concat(),
    );
    assert_eq!(out.trim(), r#"{"host1":[0],"host2":[1],"host0":[]}"#);
}

#[test]
fn plan_odevity_and_text_output() {
    let got = json(&[
        "plan",
        "--strategy",
        "ODEVITY",
        "--job-name",
        "0",
        "--total",
        "2",
        "--instances",
        "host0,host1,host2",
        "--order",
        "given",
        "--json",
    ]);
    let want: serde_json::Value =
        serde_json::from_str(r#"{"host2":[0],"host1":[1],"host0":[]}"#).unwrap();
    assert_eq!(got, want);
    let (code, out) = run_cli(&[
        "plan",
        "--job-name",
        "j",
        "--total",
        "10",
        "--instances",
        "c,b,a",
    ]);
    assert_eq!(code, ExitCode::SUCCESS);
    assert!(out.contains("c  0,1,2,9"), "{out}");
    assert!(out.contains("a  6,7,8"), "{out}");
}

#[test]
fn plan_rejects_bad_input() {
    for args in [
        &[
            "plan",
            "--strategy",
            "RANDOM",
            "--job-name",
            "j",
            "--total",
            "1",
            "--instances",
            "a",
        ][..],
        &[
            "plan",
            "--job-name",
            "j",
            "--total",
            "0",
            "--instances",
            "a",
        ],
        &[
            "plan",
            "--job-name",
            "j",
            "--total",
            "2",
            "--instances",
            "a,a",
        ],
        &[
            "plan",
            "--job-name",
            "j",
            "--total",
            "2",
            "--instances",
            "a/b",
        ],
    ] {
        let (code, _) = run_cli(args);
        assert_eq!(code, ExitCode::from(1), "{args:?}");
    }
}

#[test]
fn cron_next_in_a_zone() {
    let got = json(&[
        "cron",
        "next",
        "0 0 9 * * ?",
        "--tz",
        "Asia/Shanghai",
        "--after",
        "2027-01-30T00:00:00Z",
        "--count",
        "2",
        "--json",
    ]);
    assert_eq!(
        got,
        serde_json::json!(["2027-01-30T01:00:00Z", "2027-01-31T01:00:00Z"])
    );
    // Default start is "now" as given to run().
    let got = json(&["cron", "next", "0/5 * * * * ?", "--count", "3", "--json"]);
    assert_eq!(
        got,
        serde_json::json!([
            "2026-11-22T06:00:05Z",
            "2026-11-22T06:00:10Z",
            "2026-11-22T06:00:15Z"
        ])
    );
}

#[test]
fn cron_next_follows_dst() {
    // 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer (change on 2027-03-28).
    let got = json(&[
        "cron",
        "next",
        "0 0 9 * * ?",
        "--tz",
        "Europe/Berlin",
        "--after",
        "2027-03-27T00:00:00Z",
        "--count",
        "2",
        "--json",
    ]);
    assert_eq!(
        got,
        serde_json::json!(["2027-03-27T08:00:00Z", "2027-03-28T07:00:00Z"])
    );
}

#[test]
fn invalid_cron_or_zone_exits_non_zero_with_one_line() {
    for args in [
        &["cron", "next", "0 0 12 * * *"][..],
        &["cron", "next", "* * * * *"],
        &["cron", "next", "0 0 12 * * ?", "--tz", "Mars/Base"],
        &["cron", "next", "0 0 12 * * ?", "--after", "yesterday"],
    ] {
        let out = binary(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn config_check_prints_effective_config_or_every_problem() {
    let dir = std::env::temp_dir().join(format!("shardjob-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/jobs.yaml");
    let out = binary(&["config", "check", good]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("---").count(), 2);
    assert!(text.contains("# runs: settle-payments (SCRIPT)"), "{text}");
    assert!(text.contains("# registry: none in the file"), "{text}");
    // Its IANA zones are shardjob's: ElasticJob's scheduler takes only GMT offsets.
    assert!(
        text.contains("# not for ElasticJob: settle-payments: timeZone:"),
        "{text}"
    );
    assert!(
        text.contains("monitorExecution: true"),
        "defaults are filled in: {text}"
    );
    assert!(text.contains("jobName: settle-payments"));

    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "- jobName: 'a b'\n  shardingTotalCount: 0\n  cron: nope\n",
    )
    .unwrap();
    let out = binary(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 3, "{err}");
    for key in ["jobName", "shardingTotalCount", "cron"] {
        assert!(err.contains(key), "{key}: {err}");
    }

    // What `run` reads, `config check` reads: a typo'd key has its place and a suggestion.
    let typo = dir.join("typo.yaml");
    std::fs::write(
        &typo,
        "elasticjob:\n  regcenter:\n    server-lists: 127.0.0.1:2181\n    namespace: ns\n  \
         jobs:\n    a:\n      elastic-job-type: SCRIPT\n      sharding-total-count: 1\n      \
         props:\n        script.command.line: 'true'\n        script.timeout.miliseconds: 10\n",
    )
    .unwrap();
    let out = binary(&["config", "check", typo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let file = typo.display();
    assert!(
        err.contains(&format!(
            "{file}:2:3: error: elasticjob: unknown key `regcenter` (did you mean `regCenter`?)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:11:9: error: job \"a\": props script.timeout.miliseconds: unknown prop"
        )) && err.contains("did you mean `script.timeout.milliseconds`?"),
        "{err}"
    );
    // The same file, fixed and with a digest: the check says what run would do.
    std::fs::write(
        &typo,
        "elasticjob:\n  reg-center:\n    server-lists: 127.0.0.1:2181\n    namespace: ns\n    \
         digest: ops:hunter2\n  tracing:\n    type: RDB\n  jobs:\n    a:\n      elastic-job-type: SCRIPT\n      \
         sharding-total-count: 1\n      props:\n        script.command.line: 'true'\n",
    )
    .unwrap();
    let out = binary(&["config", "check", typo.to_str().unwrap()]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(":6:3: error: elasticjob.tracing: type RDB needs a database"),
        "{err}"
    );
    let text = std::fs::read_to_string(&typo)
        .unwrap()
        .replace("  tracing:\n    type: RDB\n", "");
    std::fs::write(&typo, text).unwrap();
    let out = binary(&["config", "check", typo.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("# registry: zk://ops:***@127.0.0.1:2181/ns"),
        "{text}"
    );
    assert!(
        text.contains("# runs: a (SCRIPT)") && !text.contains("hunter2"),
        "{text}"
    );

    // Names the registries refuse, and ZooKeeper's own namespace.
    for name in ["a\u{200B}b", "a\u{202E}b", "a\u{E000}b"] {
        std::fs::write(
            &typo,
            format!("- jobName: \"{name}\"\n  shardingTotalCount: 1\n  props:\n    script.command.line: x\n"),
        )
        .unwrap();
        let out = binary(&["config", "check", typo.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(":1:3: error: ") && err.contains("jobName: must not contain"),
            "{err}"
        );
    }
    std::fs::write(
        &typo,
        "elasticjob:\n  regCenter:\n    serverLists: 127.0.0.1:2181\n    namespace: zookeeper\n  \
         jobs:\n    a:\n      elasticJobType: SCRIPT\n      shardingTotalCount: 1\n      \
         props:\n        script.command.line: x\n",
    )
    .unwrap();
    let out = binary(&["config", "check", typo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("ZooKeeper's own node"), "{err}");

    let missing = dir.join("missing.yaml");
    let out = binary(&["config", "check", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn durations_of_wait_for_registry() {
    use shardjob_cli::cli::parse_duration;
    use std::time::Duration;
    assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    for bad in ["30", "s", "3d", "-1s", "99999999999999999999h", ""] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
}

/// Runs the binary with its stdout read by a reader that takes the first line and goes away
/// (as `| head -1` does); returns that line and how the binary ended.
fn through_closed_pipe(args: &[&str]) -> (String, std::process::Output) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        reader.read_line(&mut first).unwrap();
    }
    (first, child.wait_with_output().unwrap())
}

#[test]
fn a_closed_pipe_ends_quietly_with_status_0() {
    // 10,000 fire times are far more than a pipe holds: the binary writes after the reader
    // is gone.
    let (first, out) = through_closed_pipe(&[
        "cron",
        "next",
        "0/1 * * * * ?",
        "--after",
        "2027-01-30T16:00:00Z",
        "--count",
        "10000",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with("2027-01-30"), "{first}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "nothing said on stderr: {err}");
}

/// `demo --seconds 4` runs the minimum demo (and says so), in which C crashes while it runs
/// items: those runs show as cancelled (`C✗`), not as completed, and its items fail over
/// (`A*`/`B*`, with the time they ran) before the demo ends.
#[test]
fn the_shortest_demo_shows_a_cancelled_run_and_its_failover_before_it_ends() {
    let (code, out) = run_cli(&["demo", "--seconds", "4"]);
    assert_eq!(code, ExitCode::SUCCESS, "{out}");
    assert!(
        out.contains("--seconds 4 is below the minimum of 10"),
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let at = |what: &str| lines.iter().position(|l| l.contains(what));
    let crash = at("C crashes").unwrap_or_else(|| panic!("no crash in:\n{out}"));
    let end = at("time is up: A leaves too").unwrap_or_else(|| panic!("no end in:\n{out}"));
    assert!(
        !lines[crash].contains("running item(s) none"),
        "C crashed while running nothing:\n{out}"
    );
    // The runs the crash cut short show as cancelled, in their row or in a line below it.
    assert!(
        lines[crash..].iter().any(|l| l.contains("C✗")
            || (l.contains("on C was cancelled at") && l.contains("before it ended"))),
        "no cancelled run of C:\n{out}"
    );
    // A failover ran before the end, and its line says when it ran.
    let failover = lines[crash..end]
        .iter()
        .any(|l| l.contains("(failover, ran at ") || (l.starts_with("    ") && l.contains('*')));
    assert!(failover, "no failover before the end:\n{out}");
    let summary = lines
        .iter()
        .find(|l| l.starts_with("summary:"))
        .unwrap_or_else(|| panic!("no summary in:\n{out}"));
    assert!(!summary.contains("(0 failover"), "{summary}");
    // Not the summary's count of cancelled runs: on a loaded machine a body cut short by the
    // crash may still have ended before the crash reached it (the table's C✗ is checked above).
    assert!(out.contains("no item completed twice"), "{out}");
    // It ends with `shardjob status` of its job, after the summary: the job's line and one row
    // per item, each with the fire it last did.
    let status = at("job demo-job: CRASHED, 6 items, 0 instance(s)")
        .unwrap_or_else(|| panic!("no status of the job in:\n{out}"));
    let summary_at = at("summary:").unwrap_or_default();
    assert!(
        status > summary_at,
        "the status comes after the summary:\n{out}"
    );
    let header = at("ITEM  STATUS").unwrap_or_else(|| panic!("no item table in:\n{out}"));
    assert!(header > status, "{out}");
    for item in 0..6 {
        let row = lines
            .get(header + 1 + item)
            .unwrap_or_else(|| panic!("no row of item {item}:\n{out}"));
        assert!(
            row.starts_with(&format!("{item} ")) && row.contains("Z"),
            "item {item}'s row has no last fire done: {row}\n{out}"
        );
    }
}
