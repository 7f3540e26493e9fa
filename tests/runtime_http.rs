//! HTTP jobs against a small HTTP/1.1 server on 127.0.0.1 (this test's own).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shardjob::jobs::{HttpJob, Job, JobError, ShardingContext};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// Serves: `/ok` 200 "hello", `/fail` 500 "boom", `/slow` 200 after 2 s. Records requests.
async fn server() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                let mut lines = head.split("\r\n");
                let mut first = lines.next().unwrap_or_default().split(' ');
                let method = first.next().unwrap_or_default().to_owned();
                let path = first.next().unwrap_or_default().to_owned();
                let headers: BTreeMap<String, String> = lines
                    .filter_map(|l| l.split_once(": "))
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
                    .collect();
                let len: usize = headers
                    .get("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
                log.lock().unwrap().push(Seen {
                    method,
                    path: path.clone(),
                    headers,
                    body,
                });
                let (status, text) = match path.as_str() {
                    "/ok" => ("200 OK", "hello"),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        ("200 OK", "late")
                    }
                    _ => ("500 Internal Server Error", "boom"),
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, seen)
}

fn ctx(props: &[(&str, String)]) -> ShardingContext {
    let props = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    ShardingContext::new("http-job", 2, 1)
        .with_job_parameter("jp")
        .with_props(props)
}

#[tokio::test]
async fn get_sends_the_context_header_and_keeps_the_body() {
    let (addr, seen) = server().await;
    let ctx = ctx(&[
        ("http.uri", format!("http://{addr}/ok")),
        ("http.method", "get".into()),
        ("http.data", "not sent with GET".into()),
    ]);
    let out = HttpJob::new().execute_item(&ctx).await.unwrap().unwrap();
    assert_eq!(out.stdout, "hello");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].body, "");
    let header: serde_json::Value =
        serde_json::from_str(&seen[0].headers["shardingcontext"]).unwrap();
    assert_eq!(header["jobName"], "http-job");
    assert_eq!(header["shardingItem"], 1);
    assert_eq!(header["jobParameter"], "jp");
}

#[tokio::test]
async fn post_sends_data_and_content_type() {
    let (addr, seen) = server().await;
    let ctx = ctx(&[
        ("http.uri", format!("http://{addr}/ok")),
        ("http.method", "POST".into()),
        ("http.data", "a=1&b=2".into()),
        (
            "http.content.type",
            "application/x-www-form-urlencoded".into(),
        ),
    ]);
    HttpJob::new().execute_item(&ctx).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path, "/ok");
    assert_eq!(seen[0].body, "a=1&b=2");
    assert_eq!(
        seen[0].headers["content-type"],
        "application/x-www-form-urlencoded"
    );
}

#[tokio::test]
async fn status_400_and_above_fails_unless_configured_otherwise() {
    let (addr, _) = server().await;
    let job = HttpJob::new();
    let uri = format!("http://{addr}/fail");
    let err = job
        .execute_item(&ctx(&[
            ("http.uri", uri.clone()),
            ("http.method", "GET".into()),
        ]))
        .await
        .unwrap_err();
    let JobError::HttpStatus { status, output } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(*status, 500);
    assert_eq!(output.stdout, "boom");
    // Threshold 0: ElasticJob's behaviour, the status is not a failure.
    let out = job
        .execute_item(&ctx(&[
            ("http.uri", uri),
            ("http.method", "GET".into()),
            ("http.failure.status", "0".into()),
        ]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.stdout, "boom");
}

#[tokio::test]
async fn timeouts_and_transport_errors_fail() {
    let (addr, _) = server().await;
    let job = HttpJob::new();
    let err = job
        .execute_item(&ctx(&[
            ("http.uri", format!("http://{addr}/slow")),
            ("http.method", "GET".into()),
            ("http.read.timeout.milliseconds", "300".into()),
        ]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, JobError::Io(m) if m.contains("timed out")),
        "{err:?}"
    );
    // A port nobody listens on (bound, then closed).
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let err = job
        .execute_item(&ctx(&[
            ("http.uri", format!("http://127.0.0.1:{port}/ok")),
            ("http.method", "GET".into()),
        ]))
        .await
        .unwrap_err();
    assert!(matches!(err, JobError::Io(_)), "{err:?}");
    let err = job
        .execute_item(&ctx(&[("http.method", "GET".into())]))
        .await
        .unwrap_err();
    assert!(matches!(err, JobError::Config(_)), "{err:?}");
}
