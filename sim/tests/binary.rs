//! The `shardjob-sim` binary: its summary line, and clear refusals of flags out of range.

use std::process::Command;

fn sim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob-sim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_run_ends_with_the_summary_line() {
    let (code, out, _) = sim(&[
        "--seeds",
        "3",
        "--instances",
        "2",
        "--jobs",
        "2",
        "--hours",
        "0.01",
    ]);
    assert_eq!(code, 0, "{out}");
    let summary = out.lines().find(|l| l.starts_with("seeds=")).unwrap_or("");
    // Each world runs at least until its checks have had their time after the heal.
    let fields: Vec<&str> = summary.split(' ').collect();
    assert_eq!(fields.len(), 5, "{out}");
    assert_eq!(&fields[..2], ["seeds=3", "violations=0"], "{out}");
    let hours: f64 = fields[2]
        .strip_prefix("sim_hours=")
        .and_then(|h| h.parse().ok())
        .unwrap_or(0.0);
    assert!((0.03..0.2).contains(&hours), "{out}");
    assert!(fields[3].starts_with("wall_s="), "{out}");
    assert!(
        fields[4].starts_with("compression=") && fields[4].ends_with('x'),
        "{out}"
    );
}

#[test]
fn flags_out_of_range_are_refused_with_the_range() {
    for (flag, value, says) in [
        (
            "--instances",
            "300",
            "--instances must be 1 to 250, not 300",
        ),
        ("--instances", "0", "--instances must be 1 to 250, not 0"),
        ("--jobs", "20000", "--jobs must be 1 to 10000, not 20000"),
        ("--max-items", "0", "--max-items must be 1 to 10000, not 0"),
        (
            "--hours",
            "0",
            "--hours must be a millisecond to 1000 hours, not 0",
        ),
        (
            "--hours",
            "1e-9",
            "--hours must be a millisecond to 1000 hours, not 0.000000001",
        ),
        (
            "--session-timeout-ms",
            "50",
            "--session-timeout-ms must be 100 to 600000, not 50",
        ),
    ] {
        let (code, out, err) = sim(&["--seeds", "1", flag, value]);
        assert_eq!(code, 2, "{flag} {value}: {out}{err}");
        assert!(err.contains(says), "{flag} {value}: {err}");
        assert!(!out.contains("seeds="), "{flag} {value} ran: {out}");
    }
}

/// `--rolling`: refused without instances of the kind it replaces; with them, every seed rolls
/// and the summary says what happened once the old kind had gone.
#[test]
fn a_roll_is_asked_for_by_its_flag() {
    for (args, says) in [
        (
            &["--rolling", "j2s"][..],
            "--rolling j2s replaces ElasticJob instances: give --elasticjob N",
        ),
        (
            &["--rolling", "s2j", "--instances", "0", "--elasticjob", "2"][..],
            "--rolling s2j replaces shardjob instances",
        ),
    ] {
        let mut all = vec!["--seeds", "1"];
        all.extend_from_slice(args);
        let (code, out, err) = sim(&all);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (_, out, _) = sim(&[
        "--seeds",
        "2",
        "--instances",
        "2",
        "--jobs",
        "2",
        "--hours",
        "0.03",
        "--elasticjob",
        "1",
        "--rolling",
        "j2s",
    ]);
    assert!(
        out.lines()
            .any(|l| l
                .starts_with("(rolling: j2s in 2 seeds, the old kind gone before the heal in 2, ")),
        "{out}"
    );
}

/// `--seed` replays a world: a header saying what the world is, then its events in words at
/// `+s.mmm` from the world's start (no `Debug` dumps, no epoch milliseconds).
#[test]
fn a_replay_says_what_the_world_is_and_what_happened_in_words() {
    let (code, out, err) = sim(&[
        "--seed",
        "3",
        "--instances",
        "3",
        "--jobs",
        "4",
        "--hours",
        "0.03",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("world: seed 3, 3 instances"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("session timeout") && lines[1].contains("faults drawn:"));
    assert!(lines[1].contains("safety sweep "), "{}", lines[1]);
    for k in 0..4 {
        let job = format!("world:   job job{k}: cron '");
        assert!(lines.iter().any(|l| l.starts_with(&job)), "no {job:?}");
    }
    let events: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("world:") && !l.starts_with("seeds=") && !l.starts_with('('))
        .collect();
    assert!(events.len() > 100, "{}", events.len());
    for line in &events {
        let time = line.split_whitespace().next().unwrap_or("");
        assert!(
            time.starts_with('+') && time.ends_with('s'),
            "not a +s.mmm time: {line}"
        );
        assert!(
            !line.contains('{') && !line.contains("ExecutionId"),
            "{line}"
        );
        // No epoch milliseconds (13 digits in a row).
        let longest = line
            .split(|c: char| !c.is_ascii_digit())
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest < 13, "{line}");
    }
    assert!(
        events.iter().any(|l| l.contains(": start job0/")),
        "no start"
    );
}

/// A reader that stops early (`shardjob-sim ... | head`) ends the simulator quietly: status
/// 0, no panic.
#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob-sim"))
        .args([
            "--seed",
            "3",
            "--instances",
            "3",
            "--jobs",
            "4",
            "--hours",
            "0.03",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    {
        // The replay prints far more than a pipe holds: it writes after the reader is gone.
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        reader.read_line(&mut first).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(first.starts_with("world:"), "{first}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
