//! `shardjob run` records the job history its job file names, and `shardjob history` reads it
//! back. (The library's history after a real run: the root crate's `tests/history.rs`.)

fn run_cli(args: &[&str]) -> (std::process::ExitCode, String) {
    use clap::Parser;
    let cli = shardjob_cli::cli::Cli::try_parse_from(
        std::iter::once("shardjob").chain(args.iter().copied()),
    )
    .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let mut out = Vec::new();
    let code = shardjob_cli::cli::run(cli, chrono::Utc::now(), &mut out).expect("output written");
    (code, String::from_utf8(out).expect("UTF-8 output"))
}

/// `shardjob run` records the history its job file's Spring Boot keys name (a JDBC URL of
/// SQLite), and `shardjob history` reads it back through the same file.
#[test]
fn the_cli_records_and_shows_the_history() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let db = dir.path().join("history.db");
    let file = dir.path().join("jobs.yaml");
    std::fs::write(
        &file,
        format!(
            "spring:\n  datasource:\n    url: jdbc:sqlite:{}\n\
             elasticjob:\n  tracing:\n    type: RDB\n  jobs:\n    always-fails:\n      \
             elasticJobType: SCRIPT\n      cron: \"* * * * * ?\"\n      shardingTotalCount: 2\n      \
             props:\n        script.command.line: \"sh -c 'exit 3'\"\n\
             tracing:\n  retention: 7d\n",
            db.display()
        ),
    )
    .expect("the job file written");
    let file = file.display().to_string();
    let (code, out) = run_cli(&["config", "check", &file]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");
    assert!(out.contains("# history: jdbc:sqlite:"), "{out}");
    let (code, out) = run_cli(&["run", &file, "--registry", "mem://", "--exit-after", "6"]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{out}");

    let (code, json) = run_cli(&[
        "history",
        "always-fails",
        "--failed",
        "--json",
        "--file",
        &file,
    ]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{json}");
    let page: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let total = page["total"].as_u64().expect("a total");
    // Six seconds of a job firing every second: its first fire at least.
    assert!(total >= 1, "{json}");
    let rows = page["rows"].as_array().expect("rows");
    assert!(
        rows.iter().all(|r| r["success"] == false
            && r["failure_cause"]
                .as_str()
                .is_some_and(|c| c.contains("exit status 3"))),
        "{json}"
    );
    let url = format!("sqlite://{}", db.display());
    let (code, text) = run_cli(&["history", "always-fails", "--since", "1h", "--url", &url]);
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{text}");
    assert!(text.starts_with("START (UTC)"), "{text}");
    assert!(
        text.contains("FAILED") && text.contains("exit status 3"),
        "{text}"
    );
    let (code, _) = run_cli(&["history", "always-fails", "--url", "oracle://x/y"]);
    assert_eq!(code, std::process::ExitCode::from(1));
}
