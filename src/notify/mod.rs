//! ElasticJob's notifier error handlers: `EMAIL` (SMTP), `WECHAT` (WeChat Work webhook) and
//! `DINGTALK` (DingTalk webhook, signed when a secret is set; these two need the `http`
//! feature, and a job that names one in a build without it is refused), with ElasticJob 3.0's prop keys
//! (`email.host`, `wechat.webhook`, `dingtalk.secret`, ...; see [`EMAIL_PROPS`],
//! [`WECHAT_PROPS`], [`DINGTALK_PROPS`]).
//!
//! A failure never waits for a notification: the run hands it to the job's notifier task
//! through a bounded queue ([`QUEUE_BOUND`]) and goes on; the task sends, each send bounded by
//! its timeouts. A failure that finds the queue full is not lost from the count: it is folded
//! into the next message. A job that fails every second does not send a message a second: the
//! first failure of a quiet job is sent at once, the failures that follow within the job's
//! window ([`WINDOW_PROP`], default one minute) are folded into one message sent when the
//! window ends, which says how many it folds ("and N more failures since ..."). What is folded
//! when the scheduler stops is sent then.
//!
//! As ElasticJob, a notifier also logs the failure (as `LOG` does), and a notification that
//! cannot be sent is logged, never propagated to the job.

mod email;
mod fold;
mod props;
#[cfg(feature = "http")]
mod webhook;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use shardjob_core::config::{ErrorHandlerType, JobConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use email::EmailSettings;
pub use fold::{Alert, Window};
pub use props::{
    DEFAULT_WINDOW, DINGTALK_PROPS, EMAIL_PROPS, PropError, WECHAT_PROPS, WINDOW_PROP, owns_key,
};
#[cfg(feature = "http")]
pub use webhook::{WebhookSettings, dingtalk_sign};

/// How many failures a job's notifier queue holds before it counts new ones without their
/// text (they are still counted in the next message).
pub const QUEUE_BOUND: usize = 256;

/// How long the notifier of a stopped scheduler may take to send what it had folded.
pub const FLUSH_DEADLINE: Duration = Duration::from_secs(30);

/// An error handler's settings that cannot be honoured.
#[derive(Debug, thiserror::Error)]
#[error("job {job}: jobErrorHandlerType {handler}: {}", .problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct NotifyError {
    /// The job.
    pub job: String,
    /// Its error handler.
    pub handler: ErrorHandlerType,
    /// What is wrong with its props.
    pub problems: Vec<PropError>,
}

/// Where and how a notifier sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// `EMAIL`: a mail through SMTP.
    Email(EmailSettings),
    /// `WECHAT`: a WeChat Work group robot's webhook (the `http` feature).
    #[cfg(feature = "http")]
    Wechat(WebhookSettings),
    /// `DINGTALK`: a DingTalk group robot's webhook (the `http` feature).
    #[cfg(feature = "http")]
    Dingtalk(WebhookSettings),
}

impl Channel {
    /// ElasticJob's name of the handler.
    pub fn name(&self) -> &'static str {
        match self {
            Channel::Email(_) => "EMAIL",
            #[cfg(feature = "http")]
            Channel::Wechat(_) => "WECHAT",
            #[cfg(feature = "http")]
            Channel::Dingtalk(_) => "DINGTALK",
        }
    }
}

/// A notifier's settings, read from a job's error handler type and props.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Where to send.
    pub channel: Channel,
    /// At most one message per window (after the first failure of a quiet job).
    pub window: Duration,
}

impl Settings {
    /// Reads and checks the notifier settings of a job: `None` for the handlers that do not
    /// notify (`LOG`, `THROW`, `IGNORE`, `WEBHOOK`); every problem of the props otherwise,
    /// including notifier props that the job's handler would not read.
    pub fn from_props(
        handler: ErrorHandlerType,
        props: &BTreeMap<String, String>,
    ) -> Result<Option<Settings>, Vec<PropError>> {
        props::read(handler, props)
    }

    /// [`Settings::from_props`] for a job's configuration, with the job named in the error.
    pub fn from_config(config: &JobConfig) -> Result<Option<Settings>, NotifyError> {
        Self::from_props(config.job_error_handler_type, &config.props).map_err(|problems| {
            NotifyError {
                job: config.job_name.clone(),
                handler: config.job_error_handler_type,
                problems,
            }
        })
    }
}

/// One failure a notifier is told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The failed item (`None`: a listener of the run failed).
    pub item: Option<u32>,
    /// The fire time of the run.
    pub fire_time: DateTime<Utc>,
    /// What failed, as the log says it.
    pub error: String,
}

/// The text of a notification: ElasticJob's sentence ("Job '…' exception occur in job
/// processing, caused by …"), then, when the message folds other failures, how many, since the
/// fire of the first of them.
pub fn message_text(job: &str, alert: &Alert) -> String {
    let f = &alert.failure;
    let what = match f.item {
        Some(item) => format!("item {item}"),
        None => "a listener".to_owned(),
    };
    let mut text = format!(
        "Job '{job}' exception occur in job processing, caused by {what} of the run fired at {}: {}",
        f.fire_time.to_rfc3339_opts(SecondsFormat::Millis, true),
        f.error
    );
    if alert.more > 0 {
        let noun = if alert.more == 1 {
            "failure"
        } else {
            "failures"
        };
        text.push_str(&format!(
            "\nand {} more {noun} since {}",
            alert.more,
            alert.since.to_rfc3339_opts(SecondsFormat::Millis, true)
        ));
    }
    text
}

/// What a job's runs hold to tell its notifier of failures. Cheap to clone; the notifier task
/// ends (sending what it folded) once every clone is dropped.
#[derive(Debug, Clone)]
pub struct Notifier {
    inner: Arc<NotifierInner>,
}

#[derive(Debug)]
struct NotifierInner {
    tx: mpsc::Sender<Failure>,
    /// Failures that found the queue full: counted into the next message.
    overflow: Arc<AtomicU64>,
}

impl Notifier {
    /// Starts the notifier task of a job (within a tokio runtime); `tasks` keeps its handle,
    /// so that a stopping scheduler can wait for what it folded to be sent.
    pub fn start(job: &str, settings: Settings, tasks: &NotifierTasks) -> Notifier {
        let (tx, rx) = mpsc::channel(QUEUE_BOUND);
        let overflow = Arc::new(AtomicU64::new(0));
        let sender = Sender::new(job.to_owned(), settings.channel);
        let task = tokio::spawn(run(
            sender,
            Window::new(settings.window),
            rx,
            Arc::clone(&overflow),
        ));
        tasks.add(task);
        Notifier {
            inner: Arc::new(NotifierInner { tx, overflow }),
        }
    }

    /// Tells the notifier of a failure; never waits.
    pub fn failed(&self, failure: Failure) {
        if self.inner.tx.try_send(failure).is_err() {
            self.inner.overflow.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The notifier task: folds failures per window and sends.
async fn run(
    sender: Sender,
    mut window: Window,
    mut rx: mpsc::Receiver<Failure>,
    overflow: Arc<AtomicU64>,
) {
    loop {
        let due = window.due();
        let received = tokio::select! {
            f = rx.recv() => f,
            () = sleep_until(due) => {
                let extra = overflow.swap(0, Ordering::Relaxed);
                if let Some(alert) = window.on_due(tokio::time::Instant::now().into_std(), extra) {
                    sender.send(&alert).await;
                }
                continue;
            }
        };
        match received {
            Some(failure) => {
                let extra = overflow.swap(0, Ordering::Relaxed);
                if let Some(alert) =
                    window.on_failure(failure, extra, tokio::time::Instant::now().into_std())
                {
                    sender.send(&alert).await;
                }
            }
            None => {
                let extra = overflow.swap(0, Ordering::Relaxed);
                if let Some(alert) = window.flush(extra) {
                    let _ = tokio::time::timeout(FLUSH_DEADLINE, sender.send(&alert)).await;
                }
                return;
            }
        }
    }
}

async fn sleep_until(due: Option<std::time::Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

/// Sends one message of a job through its channel, and logs the outcome.
struct Sender {
    job: String,
    channel: Channel,
    #[cfg(feature = "http")]
    http: Option<reqwest::Client>,
}

impl Sender {
    fn new(job: String, channel: Channel) -> Sender {
        #[cfg(feature = "http")]
        let http = match &channel {
            Channel::Wechat(s) | Channel::Dingtalk(s) => webhook::client(s)
                .map_err(|e| {
                    tracing::error!(%job, "cannot make the webhook's HTTP client: {e}");
                })
                .ok(),
            Channel::Email(_) => None,
        };
        Sender {
            job,
            channel,
            #[cfg(feature = "http")]
            http,
        }
    }

    async fn send(&self, alert: &Alert) {
        let text = message_text(&self.job, alert);
        let name = self.channel.name();
        let result = match &self.channel {
            Channel::Email(s) => email::send(s, &text).await,
            #[cfg(feature = "http")]
            Channel::Wechat(s) | Channel::Dingtalk(s) => match &self.http {
                Some(http) => {
                    let dingtalk = matches!(self.channel, Channel::Dingtalk(_));
                    webhook::post(http, s, &text, dingtalk).await
                }
                None => Err("no HTTP client (see the error logged at start)".to_owned()),
            },
        };
        match result {
            Ok(()) => tracing::info!(
                job = %self.job, handler = name, folded = alert.more,
                "the job's failure was notified ({name})"
            ),
            Err(why) => tracing::error!(
                job = %self.job, handler = name, folded = alert.more,
                "the job's failure could not be notified ({name}): {why}"
            ),
        }
    }
}

/// The notifier tasks of a scheduler, for its shutdown to wait for their last messages.
#[derive(Debug, Clone, Default)]
pub struct NotifierTasks {
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl NotifierTasks {
    fn add(&self, task: JoinHandle<()>) {
        if let Ok(mut tasks) = self.tasks.lock() {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }

    /// Waits until every notifier task has ended (each ends, sending what it folded, once its
    /// job's runs and driver are gone), at most [`FLUSH_DEADLINE`].
    pub async fn finish(&self) {
        let tasks = match self.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(_) => return,
        };
        if tasks.is_empty() {
            return;
        }
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(FLUSH_DEADLINE, all).await.is_err() {
            tracing::warn!(
                "notifiers still sending after {FLUSH_DEADLINE:?} at shutdown: their last \
                 messages may be lost"
            );
        }
    }
}

/// A job's notifier as the driver keeps it: re-made when the job's handler or props change
/// (an edit in the registry), left off (with an error logged) when they are unusable.
#[derive(Debug)]
pub struct NotifierSlot {
    /// The configuration last looked at (most runs see the same `Arc`: nothing to compare).
    seen: Option<Arc<JobConfig>>,
    made_for: Option<(ErrorHandlerType, BTreeMap<String, String>)>,
    notifier: Option<Notifier>,
    tasks: NotifierTasks,
}

impl NotifierSlot {
    /// An empty slot whose notifiers' tasks go to `tasks`.
    pub fn new(tasks: NotifierTasks) -> NotifierSlot {
        NotifierSlot {
            seen: None,
            made_for: None,
            notifier: None,
            tasks,
        }
    }

    /// The notifier for the job's configuration in force.
    pub fn for_config(&mut self, config: &Arc<JobConfig>) -> Option<Notifier> {
        if self
            .seen
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, config))
        {
            return self.notifier.clone();
        }
        self.seen = Some(Arc::clone(config));
        let key = (
            config.job_error_handler_type,
            config
                .props
                .iter()
                .filter(|(k, _)| owns_key(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>(),
        );
        if self.made_for.as_ref() != Some(&key) {
            self.notifier = match Settings::from_config(config) {
                Ok(settings) => settings.map(|s| Notifier::start(&config.job_name, s, &self.tasks)),
                Err(e) => {
                    tracing::error!(
                        job = %config.job_name,
                        "{e}: failures of the job are logged only (LOG) until its props are fixed"
                    );
                    None
                }
            };
            self.made_for = Some(key);
        }
        self.notifier.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_elasticjobs_sentence_and_counts_what_it_folds() {
        let fire = DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let since = DateTime::from_timestamp(1_700_000_001, 500_000_000).unwrap_or_default();
        let failure = Failure {
            item: Some(7),
            fire_time: fire,
            error: "script exited with exit status 3".to_owned(),
        };
        let one = Alert {
            failure: failure.clone(),
            more: 0,
            since: fire,
        };
        assert_eq!(
            message_text("settle", &one),
            "Job 'settle' exception occur in job processing, caused by item 7 of the run fired \
             at 2023-11-14T22:13:20.000Z: script exited with exit status 3"
        );
        let folded = Alert {
            failure: Failure {
                item: None,
                ..failure
            },
            more: 41,
            since,
        };
        assert_eq!(
            message_text("settle", &folded),
            "Job 'settle' exception occur in job processing, caused by a listener of the run \
             fired at 2023-11-14T22:13:20.000Z: script exited with exit status 3\nand 41 more \
             failures since 2023-11-14T22:13:21.500Z"
        );
    }
}
