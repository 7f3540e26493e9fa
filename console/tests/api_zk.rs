//! The console over a real ZooKeeper (started by the test kit) whose namespace is protected by
//! a digest ACL, with two shardjob instances running in this process: registries added with
//! the right, wrong and no credentials, switched between and removed (the file rewritten, the
//! watch stopped); a job that never fired shows "never"; a configuration saved in the page's
//! form reaches the registry and the instances; re-shard, shut down and remove from the job
//! page's forms. Every write is refused to the viewer (403) and leaves its audit line.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{ADMIN, Client, Console, VIEWER, audit, until};
use serde_json::{Value, json};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::runtime::{Scheduler, SchedulerHandle};
use shardjob_backend_zk::{ZkAcl, ZkConfig, ZkRegistry};
use shardjob_console::actions::ConfigForm;
use shardjob_core::machine::record::ItemRecord;
use shardjob_core::registry::{NodePath, Registry, Version};
use shardjob_core::{CronExpr, InstanceId, JobConfig};
use shardjob_testkit::Cluster;

const USER: &str = "ops";
const PASSWORD: &str = "s3cret-digest";
const NS: &str = "locked";

/// Counts its runs.
struct Counting(Arc<AtomicUsize>);

#[async_trait]
impl SimpleJob for Counting {
    async fn execute(&self, _ctx: &ShardingContext) -> Result<(), JobError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

async fn owner(connect: &str) -> ZkRegistry {
    ZkRegistry::connect(
        ZkConfig::new(connect.to_owned())
            .namespace(NS)
            .session_timeout(Duration::from_secs(30))
            .request_timeout(Duration::from_secs(30))
            .digest(USER, PASSWORD)
            .acl(ZkAcl::CreatorAll),
    )
    .await
    .expect("ZooKeeper, with the digest")
}

fn job(name: &str, cron: &str, items: u32) -> JobConfig {
    JobConfig::new(name, items).with_cron(CronExpr::parse(cron).expect("a cron"))
}

/// An instance running `cfg` (every 2 s), `gone` (every 2 s) and `yearly` (once a year).
async fn instance(connect: &str, n: u32, yearly: &Arc<AtomicUsize>) -> SchedulerHandle {
    let id = InstanceId::new(format!("127.0.0.{n}@-@{n}")).expect("an id");
    let runs = Arc::new(AtomicUsize::new(0));
    Scheduler::builder()
        .registry(Arc::new(owner(connect).await))
        .instance_id(id)
        .job(job("cfg", "0/2 * * * * ?", 2), Counting(Arc::clone(&runs)))
        .job(job("gone", "0/2 * * * * ?", 1), Counting(runs))
        .job(
            job("yearly", "0 0 3 1 1 ?", 2),
            Counting(Arc::clone(yearly)),
        )
        .build()
        .await
        .expect("an instance")
}

async fn line(c: &Client, reg: &str, job: &str) -> Option<Value> {
    let jobs = c.json(&format!("/api/r/{reg}/jobs")).await;
    jobs.as_array()
        .expect("a list")
        .iter()
        .find(|l| l["name"] == job)
        .cloned()
}

/// Posts the same form as admin (it must be done) and as viewer (refused: 403, nothing
/// done), the viewer first.
async fn both(admin: &Client, viewer: &Client, path: &str, fields: &[(&str, &str)]) -> String {
    let (status, text) = viewer.form(path, fields).await;
    assert_eq!(status, 403, "the viewer's POST {path} {fields:?}: {text}");
    assert!(text.contains("may only read"), "{text}");
    let (status, text) = admin.form(path, fields).await;
    assert_eq!(status, 303, "POST {path} {fields:?}: {text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registries_and_operations_over_a_digest_protected_zookeeper() {
    let cluster =
        tokio::task::block_in_place(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")));
    let connect = cluster.connect_string();
    let yearly_runs = Arc::new(AtomicUsize::new(0));
    let a = instance(&connect, 1, &yearly_runs).await;
    let b = instance(&connect, 2, &yearly_runs).await;
    let reader = owner(&connect).await;

    let console = Console::start().await;
    let admin = console.client(ADMIN).await;
    let viewer = console.client(VIEWER).await;
    let url = format!("zk://{connect}/{NS}");

    // --- Adding: the viewer is refused, the admin's registry is kept in the file, read with
    // its credentials (the password never shown).
    let (status, text) = viewer.add_registry("good", &url, USER, PASSWORD).await;
    assert_eq!(status, 403, "{text}");
    audit(&["write refused: role viewer", "user=vic", "/registries"]).await;
    assert!(!console.file().contains("good"), "{}", console.file());
    let (status, text) = admin.add_registry("good", &url, USER, PASSWORD).await;
    assert_eq!(status, 303, "{text}");
    audit(&["registry added", "user=ada", "registry=good"]).await;
    let file = console.file();
    assert!(
        file.contains("name: good") && file.contains(&url) && file.contains("user: ops"),
        "{file}"
    );
    let good = admin.registry_in("good", "live").await;
    assert!(!good.to_string().contains(PASSWORD), "{good}");
    assert!(
        good["url"]
            .as_str()
            .unwrap_or_default()
            .contains("ops:***@"),
        "{good}"
    );
    until("the three jobs listed", || async {
        let jobs = admin.json("/api/r/good/jobs").await;
        let names: Vec<String> = jobs
            .as_array()
            .expect("a list")
            .iter()
            .filter_map(|l| l["name"].as_str().map(str::to_owned))
            .collect();
        if names == ["cfg", "gone", "yearly"] {
            Ok(())
        } else {
            Err(format!("{names:?}"))
        }
    })
    .await;

    // --- A wrong password and no credentials: added, but unreachable, saying why; nothing
    // read from the namespace.
    for (name, user, password) in [("wrong", USER, "not-the-password"), ("bare", "", "")] {
        let (status, text) = admin.add_registry(name, &url, user, password).await;
        assert_eq!(status, 303, "{text}");
        let r = admin.registry_in(name, "unreachable").await;
        let problem = r["problem"].as_str().unwrap_or_default().to_owned();
        assert!(problem.contains("refused access"), "{name}: {r}");
        assert!(!r.to_string().contains("not-the-password"), "{r}");
        let (status, text) = admin.get(&format!("/api/r/{name}/jobs")).await;
        assert_eq!(status, 503, "{name}: {text}");
        assert!(!text.contains("cfg"), "{text}");
    }
    // A registry of that name exists already: refused, the file unchanged.
    let before = console.file();
    let (status, text) = admin.add_registry("good", &url, USER, PASSWORD).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("exists already"), "{text}");
    assert_eq!(console.file(), before);

    // --- Switching: every page offers every registry and shows the one of its path.
    let (status, page) = admin.get("/r/good/jobs").await;
    assert_eq!(status, 200);
    for name in ["good", "wrong", "bare"] {
        assert!(
            page.contains(&format!("value=\"{name}\"")),
            "{name}: {page}"
        );
    }
    assert!(page.contains("id=\"job-cfg\""), "{page}");
    let (status, page) = admin.get("/r/wrong/").await;
    assert_eq!(status, 503, "{page}");
    assert!(
        page.contains("cannot be reached") && page.contains("refused access"),
        "{page}"
    );
    assert!(!page.contains("id=\"job-cfg\""), "{page}");

    // --- Removing: the viewer is refused; the admin's removal rewrites the file and ends the
    // registry's watch and client.
    let wrong = console.app.hub.get("wrong").expect("registry wrong");
    assert!(wrong.is_following());
    both(
        &admin,
        &viewer,
        "/registries",
        &[("action", "remove"), ("name", "wrong")],
    )
    .await;
    audit(&["registry removed", "user=ada", "registry=wrong"]).await;
    let file = console.file();
    assert!(
        !file.contains("name: wrong") && file.contains("name: bare"),
        "{file}"
    );
    assert!(admin.registry("wrong").await.is_none());
    assert_eq!(admin.get("/api/r/wrong/jobs").await.0, 404);
    assert!(!wrong.is_following(), "the removed registry's task ended");
    assert!(wrong.client().is_err(), "its client is closed");
    both(
        &admin,
        &viewer,
        "/registries",
        &[("action", "remove"), ("name", "bare")],
    )
    .await;
    let file = console.file();
    assert!(
        !file.contains("name: bare") && file.contains("name: good"),
        "{file}"
    );
    let kept = shardjob_console::ConsoleConfig::load(&console.config).expect("the file");
    assert_eq!(kept.registries.len(), 1);
    assert_eq!(kept.registries[0].password.as_deref(), Some(PASSWORD));

    // --- A job that never fired: "never", not the time its items were set up (their records
    // are still as the re-shard created them: `shardjob_ops::last_done`).
    until("yearly sharded", || async {
        let s = admin.json("/api/r/good/jobs/yearly").await;
        let owned = s["items"]
            .as_array()
            .map_or(0, |i| i.iter().filter(|i| !i["instance"].is_null()).count());
        if owned == 2 {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;
    let y = line(&admin, "good", "yearly").await.expect("yearly");
    assert!(y["last_done_ms"].is_null(), "{y}");
    assert_eq!(y["never_done"], true, "{y}");
    let (_, page) = admin.get("/r/good/jobs").await;
    let row = page
        .split("id=\"job-yearly\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_default();
    assert!(row.contains("never"), "{row}");
    let (_, page) = admin.get("/r/good/jobs/yearly").await;
    for item in 0..2 {
        let row = page
            .split(&format!("id=\"item-{item}\""))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_default();
        assert!(row.contains("never"), "item {item}: {row}");
    }
    // The starts its items' records were set up with: no fire, whatever they look like.
    let mut starts = Vec::new();
    for item in 0..2 {
        let path = NodePath::new(format!("/yearly/sharding/{item}/execution")).expect("a path");
        let node = reader.get(&path).await.expect("a read").expect("a record");
        assert_eq!(node.stat.created, node.stat.modified, "as created");
        let record = ItemRecord::parse(&node.data).expect("a record");
        assert!(record.run.is_none(), "{record:?}");
        starts.push(record.done.expect("a start"));
    }
    // A trigger runs it. It is no fire (the records' done stays the start), but its claim and
    // its end rewrite the records, and the registry keeps no earlier value to compare with:
    // "never" is no longer proven, and the records' done shows as it is (the history, where
    // the registry has one, tells the trigger's run apart).
    let (status, text) = admin
        .api_post("/api/r/good/ops", json!({"op": "trigger", "job": "yearly"}))
        .await;
    assert_eq!(status, 200, "{text}");
    until("the trigger's runs ended", || async {
        let s = admin.json("/api/r/good/jobs/yearly").await;
        let running = s["items"]
            .as_array()
            .map_or(0, |i| i.iter().filter(|i| !i["run"].is_null()).count());
        let ran = yearly_runs.load(Ordering::SeqCst);
        if ran >= 2 && running == 0 {
            Ok(())
        } else {
            Err(format!("{ran} runs: {s}"))
        }
    })
    .await;
    // The job list is worked out apart from the job's page (and its history figures are
    // cached for a few seconds), so it may show the runs' end a moment later.
    let y = until("the job list to show the records rewritten", || async {
        let y = line(&admin, "good", "yearly").await.expect("yearly");
        if y["never_done"] == false {
            Ok(y)
        } else {
            Err(y.to_string())
        }
    })
    .await;
    assert_eq!(
        y["last_done_ms"].as_i64(),
        starts.iter().max().copied(),
        "{y}"
    );

    // --- A job that fires shows its last fire done: once every item's record was written by
    // runs and none is running, each item's done is a fire of 0/2 * * * * ?.
    let dones = until("cfg's fires done on every item", || async {
        let s = admin.json("/api/r/good/jobs/cfg").await;
        let items = s["items"].as_array().cloned().unwrap_or_default();
        let dones: Vec<i64> = items
            .iter()
            .filter(|i| i["run"].is_null() && i["never_done"] == false)
            .filter_map(|i| i["last_done_ms"].as_i64())
            .collect();
        if items.len() == 2 && dones.len() == 2 {
            Ok(dones)
        } else {
            Err(s.to_string())
        }
    })
    .await;
    for done in dones {
        assert_eq!(done % 2000, 0, "a fire of 0/2 * * * * ?: {done}");
    }
    let l = line(&admin, "good", "cfg").await.expect("cfg");
    assert_eq!(l["never_done"], false, "{l}");
    let done = l["last_done_ms"].as_i64().expect("a fire done");
    assert_eq!(done % 2000, 0, "a fire of 0/2 * * * * ?: {done}");

    // --- The configuration, saved in the page's form: the registry's node changes, the
    // instances re-shard to the new item count.
    let current = admin.json("/api/r/good/jobs/cfg/config").await;
    let yaml = current["yaml"].as_str().expect("yaml");
    let version = current["version"].as_i64().expect("a version");
    let form = ConfigForm::from_config(yaml, Version(version));
    let mut fields: Vec<(String, String)> = form
        .values
        .into_iter()
        .filter(|(_, v)| v != "false")
        .collect();
    for (k, v) in &mut fields {
        if k == "shardingTotalCount" {
            assert_eq!(v, "2");
            *v = "3".to_owned();
        }
    }
    let version = version.to_string();
    fields.push(("version".to_owned(), version));
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (_, page) = admin.get("/r/good/jobs/cfg").await;
    assert!(page.contains("id=\"save-config\""), "the page has the form");
    both(&admin, &viewer, "/r/good/jobs/cfg/config", &fields).await;
    let flash = admin.flash("/r/good/jobs/cfg").await;
    assert!(
        flash.contains("configuration saved (shardingTotalCount)"),
        "{flash}"
    );
    audit(&["configuration saved", "user=ada", "job=cfg"]).await;
    let node = reader
        .get(&NodePath::new("/cfg/config").expect("a path"))
        .await
        .expect("a read")
        .expect("the config node");
    let stored = String::from_utf8_lossy(&node.data).into_owned();
    assert!(stored.contains("shardingTotalCount: 3"), "{stored}");
    until("cfg's three items owned by the instances", || async {
        let s = admin.json("/api/r/good/jobs/cfg").await;
        let owners: Vec<&str> = s["items"]
            .as_array()
            .map(|i| i.iter().filter_map(|i| i["instance"].as_str()).collect())
            .unwrap_or_default();
        if owners.len() == 3 {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;

    // --- Re-shard, from the job page's form.
    let (_, page) = admin.get("/r/good/jobs/cfg").await;
    assert!(
        page.contains("value=\"reshard\""),
        "the page has the button"
    );
    both(
        &admin,
        &viewer,
        "/r/good/op",
        &[
            ("op", "reshard"),
            ("job", "cfg"),
            ("back", "/r/good/jobs/cfg"),
        ],
    )
    .await;
    let flash = admin.flash("/r/good/jobs/cfg").await;
    assert!(flash.contains("will be re-sharded"), "{flash}");
    audit(&["re-shard job cfg", "user=ada"]).await;
    until("the re-shard done by the leader", || async {
        let s = admin.json("/api/r/good/jobs/cfg").await;
        let owned = s["items"]
            .as_array()
            .map_or(0, |i| i.iter().filter(|i| !i["instance"].is_null()).count());
        if s["reshard_pending"] == false && owned == 3 {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;

    // --- Shut down, then remove, from the job page's forms.
    let (_, page) = admin.get("/r/good/jobs/gone").await;
    assert!(page.contains("value=\"shutdown\"") && page.contains("value=\"remove-job\""));
    both(
        &admin,
        &viewer,
        "/r/good/op",
        &[
            ("op", "shutdown"),
            ("job", "gone"),
            ("back", "/r/good/jobs/gone"),
        ],
    )
    .await;
    audit(&["shut down job gone", "user=ada"]).await;
    until("gone's instances shut down", || async {
        let s = admin.json("/api/r/good/jobs/gone").await;
        match s["instances"].as_array() {
            Some(i) if i.is_empty() => Ok(()),
            _ => Err(s.to_string()),
        }
    })
    .await;
    // The others still run.
    let s = admin.json("/api/r/good/jobs/cfg").await;
    assert_eq!(s["instances"].as_array().map(Vec::len), Some(2), "{s}");
    both(
        &admin,
        &viewer,
        "/r/good/op",
        &[
            ("op", "remove-job"),
            ("job", "gone"),
            ("back", "/r/good/jobs"),
        ],
    )
    .await;
    audit(&["remove job gone", "user=ada"]).await;
    until("gone removed", || async {
        match line(&admin, "good", "gone").await {
            None => Ok(()),
            Some(l) => Err(l.to_string()),
        }
    })
    .await;
    let root = reader
        .get(&NodePath::new("/gone").expect("a path"))
        .await
        .expect("a read");
    assert!(root.is_none(), "the job's subtree is deleted");

    console.stop().await;
    for i in [a, b] {
        let _ = tokio::time::timeout(Duration::from_secs(30), i.shutdown()).await;
    }
    let _ = reader.close().await;
}
