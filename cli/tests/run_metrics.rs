//! `shardjob run` serves Prometheus metrics: from `--metrics HOST:PORT` and from the job
//! file's `elasticjob.metrics`; a bad address and a taken port are refused. (The library's
//! metrics after a real run: the root crate's `tests/metrics.rs`.)

use std::process::{Command, Stdio};
use std::time::Duration;

use shardjob_testkit::prometheus_sample as sample;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Every wait for an effect; generous, for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// `GET path` over HTTP/1.1; the status code and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("the endpoint accepts");
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .expect("a request");
    let mut response = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut response))
        .await
        .expect("an answer in time")
        .expect("an answer");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    (status, body.to_owned())
}

struct TempFile(std::path::PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn job_file(name: &str, text: &str) -> TempFile {
    let path = std::env::temp_dir().join(format!(
        "shardjob-metrics-{}-{name}.yaml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("a temporary file");
    TempFile(path)
}

/// Runs `shardjob run` until it prints its metrics address, scrapes it until the job has
/// fired, then stops it with SIGTERM.
fn run_and_scrape(file: &std::path::Path, extra: &[&str]) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args([
            "run",
            file.to_str().expect("a path"),
            "--registry",
            "mem://",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("its stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let addr = loop {
        match rx.recv_timeout(DEADLINE) {
            Ok(line) => {
                if let Some(rest) = line.strip_prefix("shardjob: metrics on http://") {
                    break rest.trim_end_matches("/metrics").to_owned();
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!("shardjob run did not say where its metrics are");
            }
        }
    };
    let addr: std::net::SocketAddr = addr.parse().expect("an address");
    assert!(addr.ip().is_loopback(), "{addr}");
    assert_ne!(addr.port(), 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(scrape_until_fired(addr));
    // Signal only the child this test started, by its id.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("a status") {
            assert!(status.success(), "{status:?}");
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("shardjob run did not leave after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn scrape_until_fired(addr: std::net::SocketAddr) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let (status, body) = get(addr, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        let ok = sample(
            &body,
            "shardjob_job_item_runs_total",
            "job=\"tick\",kind=\"scheduled\",outcome=\"succeeded\"",
        )
        .unwrap_or(0.0);
        if ok >= 1.0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run of tick counted:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(unix)]
#[test]
fn shardjob_run_serves_metrics_from_the_flag_and_from_the_job_file() {
    let list = job_file(
        "list",
        "- jobName: tick\n  cron: '* * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
         script.command.line: 'true'\n",
    );
    run_and_scrape(&list.0, &["--metrics", "127.0.0.1:0"]);
    let spring = job_file(
        "spring",
        "elasticjob:\n  metrics:\n    port: 0\n  jobs:\n    tick:\n      \
         elasticJobType: SCRIPT\n      cron: '* * * * * ?'\n      shardingTotalCount: 1\n      \
         props:\n        script.command.line: 'true'\n",
    );
    run_and_scrape(&spring.0, &[]);
}

#[test]
fn shardjob_run_refuses_a_bad_metrics_address_and_a_taken_port() {
    let list = job_file(
        "bad",
        "- jobName: tick\n  cron: '* * * * * ?'\n  shardingTotalCount: 1\n  props:\n    \
         script.command.line: 'true'\n",
    );
    let run = |metrics: &str| {
        Command::new(env!("CARGO_BIN_EXE_shardjob"))
            .args([
                "run",
                list.0.to_str().expect("a path"),
                "--registry",
                "mem://",
            ])
            .args(["--metrics", metrics, "--exit-after", "30"])
            .output()
            .expect("the binary runs")
    };
    let out = run("localhost:9464");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"localhost:9464\" is not a metrics address: give HOST:PORT"),
        "{err}"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let addr = taken.local_addr().expect("its address").to_string();
    let out = run(&addr);
    assert_eq!(out.status.code(), Some(1));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("cannot open the metrics endpoint on {addr}")),
        "{text}"
    );
}
