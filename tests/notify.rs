//! The notifier error handlers against real receivers: `EMAIL` through a real SMTP server
//! (aiosmtpd, started by testkit), `WECHAT` and `DINGTALK` through a local HTTP receiver
//! standing in for the two robots' webhooks. Exact messages, DingTalk's signature recomputed,
//! failures folded into one message per window, and a hanging endpoint that delays no run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::Uri;
use axum::routing::post;
use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use shardjob::core::config::ErrorHandlerType;
use shardjob::core::machine::ItemOutcome;
use shardjob::core::{CronExpr, InstanceId, JobConfig};
use shardjob::jobs::{JobError, ShardingContext, SimpleJob};
use shardjob::mem::MemServer;
use shardjob::runtime::{RunEvent, RuntimeError, Scheduler, SchedulerHandle};
use shardjob_testkit::{ReceivedMail, SmtpServer, SmtpTls};
use tokio::sync::watch;

/// How long a test waits for what must come: generous, so that a loaded machine only makes a
/// test slower, never fails it.
const WAIT: Duration = Duration::from_secs(60);

/// A job whose every item fails, recording the fire times it saw.
#[derive(Clone, Default)]
struct Failing {
    fires: Arc<Mutex<Vec<DateTime<Utc>>>>,
}

#[async_trait::async_trait]
impl SimpleJob for Failing {
    async fn execute(&self, ctx: &ShardingContext) -> Result<(), JobError> {
        self.fires.lock().unwrap().push(ctx.fire_time);
        Err(JobError::failed(format!(
            "disk <sda> full on item {}",
            ctx.sharding_item
        )))
    }
}

fn job(name: &str, items: u32, handler: ErrorHandlerType, props: &[(&str, String)]) -> JobConfig {
    let mut config = JobConfig::new(name, items).with_cron(CronExpr::parse("* * * * * ?").unwrap());
    config.job_error_handler_type = handler;
    for (k, v) in props {
        config.props.insert((*k).to_owned(), v.clone());
    }
    config
}

async fn start(server: &MemServer, config: JobConfig, job: Failing) -> SchedulerHandle {
    Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .instance_id(InstanceId::new("127.0.0.1@-@4242").unwrap())
        .job(config, job)
        .build()
        .await
        .unwrap()
}

/// ElasticJob's sentence for item 0 of the run fired at `fire`.
fn expected(job: &str, item: u32, fire: DateTime<Utc>) -> String {
    format!(
        "Job '{job}' exception occur in job processing, caused by item {item} of the run fired \
         at {}: disk <sda> full on item {item}",
        fire.to_rfc3339_opts(SecondsFormat::Millis, true)
    )
}

/// Polls `done` (up to [`WAIT`]).
async fn wait_until<T>(what: &str, mut done: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = done() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {what} within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// EMAIL

/// The HTML part of a mail, decoded (the notifier sends it in base64).
fn html_part(mail: &ReceivedMail) -> String {
    let data = mail.data.replace("\r\n", "\n");
    let (_, part) = data
        .split_once("Content-Transfer-Encoding: base64\n")
        .unwrap_or_else(|| panic!("no base64 part in:\n{data}"));
    // The part's other headers, up to the blank line, then the body up to the boundary.
    let mut lines = part.lines();
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
    }
    let b64: String = lines
        .take_while(|l| !l.starts_with("--"))
        .collect::<Vec<_>>()
        .concat();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .unwrap_or_else(|e| panic!("{e}: {b64}"));
    String::from_utf8(bytes).unwrap()
}

fn header<'m>(mail: &'m ReceivedMail, name: &str) -> Option<&'m str> {
    mail.data
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .map(str::trim_end)
}

fn email_props(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("email.host", "127.0.0.1".to_owned()),
        ("email.port", port.to_string()),
        ("email.username", "robot".to_owned()),
        ("email.password", "s3cret".to_owned()),
        // The test server speaks plain SMTP: no TLS, and it offers no STARTTLS.
        ("email.useSsl", "false".to_owned()),
        ("email.from", "robot@example.com".to_owned()),
        ("email.to", "ops@example.com,dev@example.com".to_owned()),
        ("email.cc", "lead@example.com".to_owned()),
        ("email.bcc", "audit@example.com".to_owned()),
        ("shardjob.notify.windowMilliseconds", "600000".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_is_sent_through_a_real_smtp_server() {
    let smtp = SmtpServer::start("robot", "s3cret").unwrap();
    let server = MemServer::default();
    let job_body = Failing::default();
    let handle = start(
        &server,
        job(
            "mailer",
            1,
            ErrorHandlerType::Email,
            &email_props(smtp.port()),
        ),
        job_body.clone(),
    )
    .await;
    let first = wait_until("first mail", || smtp.mails().into_iter().next()).await;
    handle.shutdown().await.unwrap();
    let fire = job_body.fires.lock().unwrap()[0];
    assert_eq!(first.auth, "robot", "authenticated as email.username");
    assert!(!first.tls, "the server offers no TLS");
    assert_eq!(first.mail_from, "robot@example.com");
    let mut rcpt = first.rcpt_to.clone();
    rcpt.sort();
    assert_eq!(
        rcpt,
        [
            "audit@example.com",
            "dev@example.com",
            "lead@example.com",
            "ops@example.com"
        ]
    );
    assert_eq!(header(&first, "Subject"), Some("ElasticJob error message"));
    assert_eq!(header(&first, "From"), Some("robot@example.com"));
    assert_eq!(
        header(&first, "To"),
        Some("ops@example.com, dev@example.com")
    );
    assert_eq!(header(&first, "Cc"), Some("lead@example.com"));
    assert_eq!(header(&first, "Bcc"), None, "Bcc is in the envelope only");
    assert!(
        first
            .data
            .contains("Content-Type: text/html; charset=utf-8"),
        "{}",
        first.data
    );
    let want = expected("mailer", 0, fire)
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    assert_eq!(html_part(&first), format!("<pre>{want}</pre>"));

    // The failures after the first, within the window, came as one more mail at shutdown
    // that counts them.
    let fires = job_body.fires.lock().unwrap().clone();
    let mails = smtp.mails();
    if fires.len() == 1 {
        assert_eq!(mails.len(), 1, "one failure, one mail");
    } else {
        assert_eq!(mails.len(), 2, "one mail, then one folding the rest");
        let last = html_part(&mails[1]);
        let more = fires.len() - 2;
        if more > 0 {
            let noun = if more == 1 { "failure" } else { "failures" };
            let since = fires[1].to_rfc3339_opts(SecondsFormat::Millis, true);
            assert!(
                last.contains(&format!("\nand {more} more {noun} since {since}")),
                "{last}"
            );
        }
        let want = expected("mailer", 0, fires[fires.len() - 1])
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(last.starts_with(&format!("<pre>{want}")), "{last}");
    }
}

/// `email.useSsl: true` speaks TLS from the first byte (SMTPS); `false` upgrades with STARTTLS
/// when the server offers it. The test server's certificate is self-signed: `email.ssl.trust`
/// names its host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_over_smtps_and_starttls() {
    for (tls, use_ssl) in [(SmtpTls::Implicit, "true"), (SmtpTls::StartTls, "false")] {
        let smtp = SmtpServer::start_with("robot", "s3cret", tls).unwrap();
        let server = MemServer::default();
        let mut props = email_props(smtp.port());
        props.retain(|(k, _)| *k != "email.useSsl");
        props.push(("email.useSsl", use_ssl.to_owned()));
        props.push(("email.ssl.trust", "127.0.0.1".to_owned()));
        let body = Failing::default();
        let handle = start(
            &server,
            job("mailer", 1, ErrorHandlerType::Email, &props),
            body.clone(),
        )
        .await;
        let first = wait_until("a mail over TLS", || smtp.mails().into_iter().next()).await;
        handle.shutdown().await.unwrap();
        assert!(first.tls, "{tls:?}: {first:?}");
        assert_eq!(first.auth, "robot", "{tls:?}");
        let fire = body.fires.lock().unwrap()[0];
        let want = expected("mailer", 0, fire)
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert_eq!(html_part(&first), format!("<pre>{want}</pre>"), "{tls:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notifier_props_are_refused_at_build() {
    let server = MemServer::default();
    let mut props = email_props(25);
    props.retain(|(k, _)| *k != "email.host");
    props.push(("email.port", "0".to_owned()));
    props.push(("email.protocol", "smtp".to_owned()));
    let err = match Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .job(
            job("mailer", 1, ErrorHandlerType::Email, &props),
            Failing::default(),
        )
        .build()
        .await
    {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    };
    let RuntimeError::Notify(why) = &err else {
        panic!("{err:?}")
    };
    for want in [
        "job mailer: jobErrorHandlerType EMAIL",
        "props email.host: is required by the EMAIL error handler",
        "props email.port: \"0\" is not a port",
        "props email.protocol: unknown prop of the EMAIL error handler",
    ] {
        assert!(why.contains(want), "{want:?} in {why}");
    }
    let err = match Scheduler::builder()
        .registry(Arc::new(server.connect(Duration::from_secs(3))))
        .job(
            job("robot", 1, ErrorHandlerType::Dingtalk, &[]),
            Failing::default(),
        )
        .build()
        .await
    {
        Ok(_) => panic!("accepted"),
        Err(e) => e,
    };
    assert!(
        err.to_string()
            .contains("props dingtalk.webhook: is required by the DINGTALK error handler"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// WECHAT and DINGTALK

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hit {
    query: String,
    body: serde_json::Value,
}

/// A local stand-in for a robot's webhook: records each request; answers `{"errcode":0}`
/// once `open` is true (a closed gate holds the request, as a hanging server does).
#[derive(Clone)]
struct Receiver {
    hits: Arc<Mutex<Vec<Hit>>>,
    gate: watch::Receiver<bool>,
}

async fn hook(State(r): State<Receiver>, uri: Uri, body: String) -> String {
    r.hits.lock().unwrap().push(Hit {
        query: uri.query().unwrap_or("").to_owned(),
        body: serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
    });
    let mut gate = r.gate.clone();
    let _ = gate.wait_for(|open| *open).await;
    r#"{"errcode":0,"errmsg":"ok"}"#.to_owned()
}

/// Starts the receiver; returns its URL, its hits and the gate's sender.
async fn receiver(open: bool) -> (String, Arc<Mutex<Vec<Hit>>>, watch::Sender<bool>) {
    let (gate_tx, gate) = watch::channel(open);
    let hits = Arc::new(Mutex::new(Vec::new()));
    let app = Router::new()
        .route("/robot/send", post(hook))
        .with_state(Receiver {
            hits: Arc::clone(&hits),
            gate,
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/robot/send"), hits, gate_tx)
}

fn query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn form_encode(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dingtalk_messages_are_signed_and_carry_the_keyword() {
    let (url, hits, _gate) = receiver(true).await;
    let server = MemServer::default();
    let body = Failing::default();
    let before = Utc::now().timestamp_millis();
    let handle = start(
        &server,
        job(
            "robot",
            1,
            ErrorHandlerType::Dingtalk,
            &[
                ("dingtalk.webhook", format!("{url}?access_token=T0K")),
                ("dingtalk.keyword", "[shardjob] ".to_owned()),
                ("dingtalk.secret", "SEC0123456789abcdef".to_owned()),
            ],
        ),
        body.clone(),
    )
    .await;
    let hit = wait_until("a DingTalk request", || {
        hits.lock().unwrap().first().cloned()
    })
    .await;
    let after = Utc::now().timestamp_millis();
    handle.shutdown().await.unwrap();
    let fire = body.fires.lock().unwrap()[0];
    assert_eq!(
        hit.body,
        serde_json::json!({
            "msgtype": "text",
            "text": {"content": format!("[shardjob] {}", expected("robot", 0, fire))}
        })
    );
    let q = query(&hit.query);
    assert_eq!(q.get("access_token").map(String::as_str), Some("T0K"));
    let ts: i64 = q["timestamp"].parse().unwrap();
    assert!(
        (before..=after).contains(&ts),
        "{before} <= {ts} <= {after}"
    );
    let mut mac = Hmac::<Sha256>::new_from_slice(b"SEC0123456789abcdef").unwrap();
    mac.update(format!("{ts}\nSEC0123456789abcdef").as_bytes());
    let sign = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    assert_eq!(
        q["sign"],
        form_encode(&sign),
        "URL-encoded base64 of the HMAC"
    );
}

/// A WeChat endpoint that hangs delays no run: the job's runs go on ending (and firing)
/// while the notifier waits on its first request; the failures meanwhile are folded into one
/// message that counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_wechat_endpoint_delays_no_run_and_failures_are_folded() {
    let (url, hits, gate) = receiver(false).await;
    let server = MemServer::default();
    let body = Failing::default();
    let handle = start(
        &server,
        job(
            "wechat-job",
            1,
            ErrorHandlerType::Wechat,
            &[
                ("wechat.webhook", format!("{url}?key=K")),
                // Long enough that a run waiting for the send would wait for minutes.
                ("wechat.readTimeoutMilliseconds", "600000".to_owned()),
                ("shardjob.notify.windowMilliseconds", "600000".to_owned()),
            ],
        ),
        body.clone(),
    )
    .await;
    let mut events = handle.subscribe();
    // The first failure's request arrives and is held.
    wait_until("the first WeChat request", || {
        (!hits.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    // Meanwhile, runs go on ending (failed): three in all, the first included.
    let mut ended = 0;
    let deadline = tokio::time::Instant::now() + WAIT;
    while ended < 3 {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("runs go on ending while the endpoint hangs")
            .unwrap();
        if let RunEvent::ItemFinished {
            outcome: ItemOutcome::Failed(_),
            ..
        } = event
        {
            ended += 1;
        }
    }
    assert_eq!(
        hits.lock().unwrap().len(),
        1,
        "the gate still holds the first"
    );
    gate.send_replace(true);
    handle.shutdown().await.unwrap();
    let fires = body.fires.lock().unwrap().clone();
    assert!(fires.len() >= 3, "{fires:?}");
    let hits = hits.lock().unwrap().clone();
    assert_eq!(
        hits.len(),
        2,
        "one message, then one folding the rest: {hits:#?}"
    );
    assert_eq!(hits[0].query, "key=K");
    assert_eq!(
        hits[0].body,
        serde_json::json!({
            "msgtype": "text",
            "text": {"content": expected("wechat-job", 0, fires[0])}
        })
    );
    let more = fires.len() - 2;
    let noun = if more == 1 { "failure" } else { "failures" };
    let folded = format!(
        "{}\nand {more} more {noun} since {}",
        expected("wechat-job", 0, fires[fires.len() - 1]),
        fires[1].to_rfc3339_opts(SecondsFormat::Millis, true)
    );
    assert_eq!(hits[1].body["text"]["content"], folded);
}
