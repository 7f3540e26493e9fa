//! `examples/axum_service.rs`: its router, in process over `mem://`, answers on a real socket
//! (127.0.0.1): the status shows the instance and the items it owns, and a trigger runs them.

#[allow(dead_code)]
#[path = "../examples/axum_service.rs"]
mod axum_service;

use std::time::Duration;

use axum_service::{JOB, REGIONS, Status};

/// Waits up to 30 s for `f` to give something; a loaded machine only makes it slower.
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status(http: &reqwest::Client, base: &str) -> Status {
    let text = http
        .get(format!("{base}/status"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

async fn trigger(http: &reqwest::Client, base: &str, path: &str) -> (u16, String) {
    let r = http.post(format!("{base}{path}")).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_trigger_endpoints_over_mem() {
    let service = axum_service::start("mem://").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = axum_service::router(std::sync::Arc::clone(&service));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();

    // The only instance owns every item once the plan is written.
    let s = eventually("plan giving every item to this instance", || async {
        let s = status(&http, &base).await;
        let all: Vec<u32> = (0..REGIONS.len() as u32).collect();
        (s.jobs.len() == 1 && s.jobs[0].owned_items == all).then_some(s)
    })
    .await;
    assert_eq!(s.instance, service.handle.instance_id().to_string());
    assert_eq!(s.state, "running");
    assert_eq!(s.registry, "mem://");
    assert_eq!(s.jobs[0].name, JOB);
    assert_eq!(s.jobs[0].items, REGIONS.len() as u32);
    assert_eq!(s.jobs[0].error, None);

    // A trigger with a parameter runs every owned item once, with that parameter.
    let (code, body) = trigger(
        &http,
        &base,
        &format!("/jobs/{JOB}/trigger?parameter=eu-only"),
    )
    .await;
    assert_eq!(code, 202, "{body}");
    let runs = eventually("the triggered runs", || async {
        let s = status(&http, &base).await;
        let runs: Vec<_> = s
            .recent_runs
            .into_iter()
            .filter(|r| r.kind == "TRIGGER")
            .collect();
        (runs.len() == REGIONS.len()).then_some(runs)
    })
    .await;
    for r in &runs {
        assert_eq!(r.parameter, "eu-only", "{r:?}");
        assert_eq!(r.region, REGIONS[r.item as usize], "{r:?}");
    }

    // A job the instance does not host: 404; after the scheduler left: 503.
    let (code, body) = trigger(&http, &base, "/jobs/no-such-job/trigger").await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no-such-job"), "{body}");
    service.handle.shutdown().await.unwrap();
    let (code, body) = trigger(&http, &base, &format!("/jobs/{JOB}/trigger")).await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(status(&http, &base).await.state, "stopped");
    server.abort();
}
