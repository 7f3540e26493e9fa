//! What `shardjob run` logs: the items each instance owns, a script's output at INFO with its
//! job and item, no colour codes off a terminal, and JSON lines with `--log-format json`.

use std::process::Command;

fn run(dir: &std::path::Path, extra: &[&str]) -> String {
    let file = dir.join("jobs.yaml");
    std::fs::write(
        &file,
        "- jobName: talk\n  cron: '* * * * * ?'\n  shardingTotalCount: 2\n  props:\n    \
         script.command.line: sh -c 'echo hello from the script; echo oops >&2'\n",
    )
    .unwrap();
    let mut args = vec![
        "run",
        file.to_str().unwrap(),
        "--registry",
        "mem://",
        "--exit-after",
        "4",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(&args)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("shardjob-logs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn text_logs_say_the_items_owned_and_the_script_output_without_colour() {
    let d = dir("text");
    let log = run(&d, &[]);
    let _ = std::fs::remove_dir_all(&d);
    assert!(!log.contains('\u{1b}'), "colour codes in a pipe:\n{log}");
    let owned = log
        .lines()
        .find(|l| l.contains("this instance owns items"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        owned.contains("items 0,1 of the job") && owned.contains("job=talk"),
        "{owned}"
    );
    let said = log
        .lines()
        .find(|l| l.contains("hello from the script"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(said.contains("INFO") && said.contains("job=talk"), "{said}");
    assert!(said.contains("item=0") || said.contains("item=1"), "{said}");
    assert!(
        said.contains("stream=\"stdout\"") || said.contains("stream=stdout"),
        "{said}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("oops") && l.contains("stderr")),
        "{log}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let d = dir("json");
    let log = run(&d, &["--log-format", "json"]);
    let _ = std::fs::remove_dir_all(&d);
    let mut said = false;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
        if v["message"] == "hello from the script" {
            assert_eq!(v["job"], "talk", "{line}");
            assert!(v["item"].is_u64(), "{line}");
            said = true;
        }
    }
    assert!(said, "{log}");
}
