//! The console over a real etcd (started by the test kit) with authentication on: a registry
//! with the right user and password is read (a job written there is listed), one with a wrong
//! password or none is shown unreachable, saying why, and nothing of the namespace is shown.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{ADMIN, Console, until};
use shardjob::registry_url::RegistryUrl;
use shardjob_core::JobConfig;
use shardjob_core::registry::{CreateMode, NodePath};
use shardjob_testkit::Cluster;

const PASSWORD: &str = "r00t-etcd-pw";

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_registry_with_user_and_password() {
    let cluster =
        tokio::task::block_in_place(|| Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}")));
    let endpoint = cluster.endpoints()[0].clone();
    let host = endpoint.trim_start_matches("http://").to_owned();
    tokio::task::block_in_place(|| {
        etcdctl(&endpoint, &["user", "add", &format!("root:{PASSWORD}")]);
        etcdctl(&endpoint, &["user", "grant-role", "root", "root"]);
        etcdctl(&endpoint, &["auth", "enable"]);
    });
    // A job's configuration, written with the credentials.
    let writer = RegistryUrl::parse(&format!("etcd://root:{PASSWORD}@{host}/auth-ns"))
        .expect("a URL")
        .connect(Duration::from_secs(15))
        .await
        .expect("etcd, with the credentials");
    let config = NodePath::new("/etcd-job/config").expect("a path");
    writer
        .ensure_path(&NodePath::new("/etcd-job").expect("a path"))
        .await
        .expect("the job's node");
    writer
        .create(
            &config,
            JobConfig::new("etcd-job", 2).to_yaml().into_bytes(),
            CreateMode::Persistent,
        )
        .await
        .expect("the job's configuration");

    let console = Console::start().await;
    let admin = console.client(ADMIN).await;
    let url = format!("etcd://{host}/auth-ns");
    let (status, text) = admin.add_registry("etcd", &url, "root", PASSWORD).await;
    assert_eq!(status, 303, "{text}");
    let r = admin.registry_in("etcd", "live").await;
    assert!(!r.to_string().contains(PASSWORD), "{r}");
    until("etcd-job listed", || async {
        let jobs = admin.json("/api/r/etcd/jobs").await;
        if jobs.to_string().contains("\"name\":\"etcd-job\"") {
            Ok(())
        } else {
            Err(jobs.to_string())
        }
    })
    .await;
    let file = console.file();
    assert!(file.contains("user: root") && file.contains(&url), "{file}");

    for (name, user, password) in [("etcd-wrong", "root", "not-it"), ("etcd-bare", "", "")] {
        let (status, text) = admin.add_registry(name, &url, user, password).await;
        assert_eq!(status, 303, "{text}");
        let r = admin.registry_in(name, "unreachable").await;
        let problem = r["problem"].as_str().unwrap_or_default();
        assert!(problem.contains("refused access"), "{name}: {r}");
        let (status, text) = admin.get(&format!("/api/r/{name}/jobs")).await;
        assert_eq!(status, 503, "{name}: {text}");
        assert!(!text.contains("etcd-job"), "{text}");
    }
    console.stop().await;
    let _ = writer.close().await;
}
