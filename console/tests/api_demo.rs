//! `mem://`: the demo. Added as a registry, it runs its jobs inside the console (two instances,
//! four jobs) and records their history: the pages and the API show them, runs end in the
//! history, the job that only runs when triggered shows no fire done ("never"), and a removed
//! demo stops its instances.

mod common;

use common::{ADMIN, Console, until};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mem_demo_runs_inside_the_console() {
    let console = Console::start().await;
    let admin = console.client(ADMIN).await;
    let (status, text) = admin.add_registry("demo", "mem://", "", "").await;
    assert_eq!(status, 303, "{text}");
    let r = admin.registry_in("demo", "live").await;
    assert_eq!(r["history"], true, "the demo records its history: {r}");
    // Its history's tables exist from the start: the history reads, empty or not.
    let (status, text) = admin.get("/api/r/demo/history/executions").await;
    assert_eq!(status, 200, "{text}");
    until("the demo's jobs, on two instances", || async {
        let jobs = admin.json("/api/r/demo/jobs").await;
        let list = jobs.as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = list.iter().filter_map(|l| l["name"].as_str()).collect();
        let two = list.iter().all(|l| l["instance_count"] == 2);
        if names == ["flaky-import", "nightly-report", "orders-sync", "reindex"] && two {
            Ok(())
        } else {
            Err(jobs.to_string())
        }
    })
    .await;
    // orders-sync fires every 5 s: its runs end in the history, and its fires are done.
    until("orders-sync's runs in the history", || async {
        let page = admin
            .json("/api/r/demo/history/executions?job=orders-sync&success=true")
            .await;
        let rows = page["rows"].as_array().map_or(0, Vec::len);
        if rows >= 4 {
            Ok(())
        } else {
            Err(page.to_string())
        }
    })
    .await;
    until("orders-sync's fire done", || async {
        let jobs = admin.json("/api/r/demo/jobs").await;
        let line = jobs
            .as_array()
            .and_then(|l| l.iter().find(|l| l["name"] == "orders-sync").cloned())
            .unwrap_or_default();
        if line["last_done_ms"].as_i64().is_some_and(|d| d % 5000 == 0) {
            Ok(())
        } else {
            Err(line.to_string())
        }
    })
    .await;
    // reindex has no schedule: no fire done, ever (its items' records are as created); the
    // list says "never".
    let jobs = admin.json("/api/r/demo/jobs").await;
    let reindex = jobs
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == "reindex").cloned())
        .expect("reindex");
    assert!(reindex["last_done_ms"].is_null(), "{reindex}");
    assert_eq!(reindex["never_done"], true, "{reindex}");
    let (_, page) = admin.get("/r/demo/jobs").await;
    let row = page
        .split("id=\"job-reindex\"")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .unwrap_or_default();
    assert!(row.contains("never"), "{row}");
    // Triggered, it runs on the demo's instances; the list then shows the history's result.
    let (status, text) = admin
        .api_post(
            "/api/r/demo/ops",
            json!({"op": "trigger", "job": "reindex"}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    until("reindex's triggered runs in the history", || async {
        let page = admin
            .json("/api/r/demo/history/executions?job=reindex")
            .await;
        let done = page["rows"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["success"] == true).count());
        if done >= 2 {
            Ok(())
        } else {
            Err(page.to_string())
        }
    })
    .await;
    until("reindex's last result from the history", || async {
        let (_, page) = admin.get("/r/demo/jobs").await;
        let row = page
            .split("id=\"job-reindex\"")
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_default()
            .to_owned();
        if row.contains("SUCCESS") {
            Ok(())
        } else {
            Err(row)
        }
    })
    .await;

    // Removed, the demo's task and client end.
    let demo = console.app.hub.get("demo").expect("the demo");
    let (status, text) = admin
        .form("/registries", &[("action", "remove"), ("name", "demo")])
        .await;
    assert_eq!(status, 303, "{text}");
    assert!(!demo.is_following());
    assert!(demo.client().is_err());
    assert!(!console.file().contains("mem://"), "{}", console.file());
    console.stop().await;
}
