//! `shardjob run` with a job file whose job has `jobErrorHandlerType: EMAIL` mails its
//! failures through a real SMTP server (aiosmtpd, started by testkit). (The notifiers
//! themselves: the root crate's `tests/notify.rs`.)

use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use shardjob_testkit::{ReceivedMail, SmtpServer};

/// How long a test waits for what must come: generous, so that a loaded machine only makes a
/// test slower, never fails it.
const WAIT: Duration = Duration::from_secs(60);

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

/// `shardjob run` with a job file whose job has `jobErrorHandlerType: EMAIL` mails its
/// failures.
#[test]
fn a_job_file_with_email_sends_mail_from_shardjob_run() {
    let smtp = SmtpServer::start("robot", "s3cret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jobs.yaml");
    let yaml = format!(
        "elasticjob:\n  jobs:\n    nightly:\n      elasticJobType: SCRIPT\n      \
         cron: '* * * * * ?'\n      shardingTotalCount: 1\n      \
         jobErrorHandlerType: EMAIL\n      props:\n        \
         script.command.line: 'false'\n        email.host: 127.0.0.1\n        \
         email.port: {}\n        email.username: robot\n        email.password: s3cret\n        \
         email.useSsl: false\n        email.subject: nightly failed\n        \
         email.from: robot@example.com\n        email.to: ops@example.com\n",
        smtp.port()
    );
    std::fs::write(&file, yaml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shardjob"))
        .args(["run", file.to_str().unwrap(), "--registry", "mem://"])
        .args(["--exit-after", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mails = smtp.wait_for(1, WAIT).unwrap();
    let first = &mails[0];
    assert_eq!(header(first, "Subject"), Some("nightly failed"));
    assert_eq!(first.rcpt_to, ["ops@example.com"]);
    let body = html_part(first);
    assert!(
        body.starts_with(
            "<pre>Job 'nightly' exception occur in job processing, caused by item 0 of the run \
             fired at "
        ),
        "{body}"
    );
    // At most one mail for the window (a minute by default), and one at exit for the rest.
    assert!(mails.len() <= 2, "{mails:#?}");
}
