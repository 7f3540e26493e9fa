//! ZooKeeper digest credentials, honoured end to end against a real ZooKeeper (started by the
//! test kit): the nodes `shardjob run` creates with a file's `regCenter.digest` carry
//! ElasticJob's CREATOR_ALL ACL (a client without the credentials can neither read nor write
//! them), a run with the right credentials works on a namespace that has a digest ACL, and a
//! run without them is refused at start-up with a message that says why. Needs the `zk`
//! feature (`cargo test --features zk,etcd`).
#![cfg(feature = "zk")]

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use shardjob::core::registry::{CreateMode, NodePath, Registry, RegistryError};
use shardjob::registry_url::{RegistryUrl, RegistryUrlError};
use shardjob_backend_zk::{ZkAcl, ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;

const USER: &str = "ops";
const PASSWORD: &str = "s3cret";

struct Dir(std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let dir = std::env::temp_dir().join(format!("shardjob-auth-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Dir(dir)
}

fn shardjob(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shardjob"));
    cmd.args(args)
        .env_remove("SHARDJOB_REGISTRY")
        .env_remove("SHARDJOB_REGISTRY_USER")
        .env_remove("SHARDJOB_REGISTRY_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn open(connect: &str, namespace: &str, digest: bool) -> Arc<dyn Registry> {
    let mut config = ZkConfig::new(connect)
        .namespace(namespace)
        .request_timeout(Duration::from_secs(20));
    if digest {
        config = config.digest(USER, PASSWORD).acl(ZkAcl::CreatorAll);
    }
    Arc::new(ZkRegistry::connect(config).await.unwrap())
}

#[test]
fn the_files_digest_protects_the_nodes_run_creates() {
    let cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let connect = cluster.connect_string();
    let dir = dir("file");
    let marker = dir.0.join("ran");
    let file = dir.0.join("application.yml");
    std::fs::write(
        &file,
        format!(
            "elasticjob:\n  reg-center:\n    server-lists: {connect}\n    namespace: digest-ns\n    \
             digest: {USER}:{PASSWORD}\n    max-retries: 3\n  jobs:\n    digest-job:\n      \
             elastic-job-type: SCRIPT\n      cron: '* * * * * ?'\n      sharding-total-count: 1\n      \
             props:\n        script.command.line: sh -c 'echo ran >> {}'\n",
            marker.display()
        ),
    )
    .unwrap();
    let out = shardjob(&["run", file.to_str().unwrap(), "--exit-after", "4"], &[]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("running 1 job(s)"), "{all}");
    assert!(all.contains(&format!("zk://{USER}:***@")), "{all}");
    assert!(!all.contains(PASSWORD), "the password was printed: {all}");
    assert!(
        std::fs::read_to_string(&marker).is_ok_and(|t| t.contains("ran")),
        "{all}"
    );

    let config = NodePath::new("/digest-job/config").unwrap();
    runtime().block_on(async {
        // Without the credentials: no read, no write.
        let stranger = open(&connect, "digest-ns", false).await;
        let read = stranger.get(&config).await;
        assert!(
            matches!(read, Err(RegistryError::NotAuthorized(_))),
            "{read:?}"
        );
        let write = stranger
            .create(
                &NodePath::new("/digest-job/intruder").unwrap(),
                Vec::new(),
                CreateMode::Persistent,
            )
            .await;
        assert!(
            matches!(write, Err(RegistryError::NotAuthorized(_))),
            "{write:?}"
        );
        let _ = stranger.close().await;
        // With them: the job's configuration, as run wrote it.
        let owner = open(&connect, "digest-ns", true).await;
        let node = owner.get(&config).await.unwrap().expect("the config node");
        let yaml = String::from_utf8(node.data).unwrap();
        assert!(yaml.contains("jobName: digest-job"), "{yaml}");
        let _ = owner.close().await;
    });
}

#[test]
fn a_namespace_with_a_digest_acl_needs_its_credentials() {
    let cluster = Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}"));
    let connect = cluster.connect_string();
    // An operator's namespace, created with the digest ACL.
    runtime().block_on(async {
        let owner = open(&connect, "locked", true).await;
        let _ = owner.close().await;
    });
    let dir = dir("locked");
    let file = dir.0.join("jobs.yaml");
    std::fs::write(
        &file,
        "- jobName: locked-job\n  cron: '* * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
         script.command.line: 'true'\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();

    // Without credentials: refused at start-up, saying why (not a loop on "not authorized").
    let url = format!("zk://{connect}/locked");
    let out = shardjob(&["run", path, "--registry", &url, "--exit-after", "2"], &[]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("refused access to namespace \"locked\""),
        "{all}"
    );
    assert!(!all.contains("running 1 job(s)"), "{all}");

    // With them, in the URL or from the environment: it runs.
    let with = format!("zk://{USER}:{PASSWORD}@{connect}/locked");
    for (url, env) in [
        (with.as_str(), vec![]),
        (
            url.as_str(),
            vec![
                ("SHARDJOB_REGISTRY_USER", USER),
                ("SHARDJOB_REGISTRY_PASSWORD", PASSWORD),
            ],
        ),
    ] {
        let out = shardjob(&["run", path, "--registry", url, "--exit-after", "2"], &env);
        let all = text(&out);
        assert!(out.status.success(), "{all}");
        assert!(
            all.contains("running 1 job(s)") && all.contains("left"),
            "{all}"
        );
        assert!(!all.contains(PASSWORD), "{all}");
    }

    // The library says the same.
    runtime().block_on(async {
        let err = RegistryUrl::parse(&url)
            .unwrap()
            .connect(Duration::from_secs(10))
            .await
            .err()
            .unwrap();
        assert!(
            matches!(err, RegistryUrlError::NotAuthorized { .. }),
            "{err:?}"
        );
    });
}
