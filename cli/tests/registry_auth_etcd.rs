//! etcd user credentials in the registry URL, against a real etcd (started by the test kit)
//! with authentication turned on through `etcdctl`: `shardjob run` with
//! `etcd://user:pass@…` runs, without them or with a wrong password it is refused at start-up
//! saying why (not retried), and the password is never printed. Needs the `etcd` feature.
#![cfg(feature = "etcd")]

use std::process::{Command, Output};

use shardjob_testkit::Cluster;

fn etcdctl(endpoint: &str, args: &[&str]) {
    let out = Command::new("etcdctl")
        .arg(format!("--endpoints={endpoint}"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("etcdctl: {e}"));
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run(file: &std::path::Path, url: &str) -> (Output, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.to_str().unwrap(), "--registry", url])
        .args(["--exit-after", "2", "--wait-for-registry", "10s"])
        .env_remove("SHARDJOB_REGISTRY_USER")
        .env_remove("SHARDJOB_REGISTRY_PASSWORD")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn etcd_credentials_in_the_url_are_used_and_checked() {
    let cluster = Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}"));
    let endpoint = cluster.endpoints()[0].clone();
    let host = endpoint.trim_start_matches("http://").to_owned();
    etcdctl(&endpoint, &["user", "add", "root:r00t-pw"]);
    etcdctl(&endpoint, &["user", "grant-role", "root", "root"]);
    etcdctl(&endpoint, &["auth", "enable"]);

    let dir = std::env::temp_dir().join(format!("shardjob-auth-etcd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("jobs.yaml");
    std::fs::write(
        &file,
        "- jobName: etcd-auth\n  cron: '* * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
         script.command.line: 'true'\n",
    )
    .unwrap();

    let (out, text) = run(&file, &format!("etcd://root:r00t-pw@{host}/auth-ns"));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("running 1 job(s)") && text.contains("etcd://root:***@"),
        "{text}"
    );
    assert!(!text.contains("r00t-pw"), "{text}");

    for url in [
        format!("etcd://root:wrong@{host}/auth-ns"),
        format!("etcd://{host}/auth-ns"),
    ] {
        let (out, text) = run(&file, &url);
        assert_eq!(out.status.code(), Some(1), "{url}: {text}");
        assert!(
            text.contains("refused access to namespace \"auth-ns\""),
            "{url}: {text}"
        );
        assert!(
            !text.contains("after"),
            "auth failures are not retried: {text}"
        );
        assert!(!text.contains("r00t-pw"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
