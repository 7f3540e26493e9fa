//! The HTTP job: one request per item.
//!
//! The prop keys are always here (a job file names them); the job itself, [`HttpJob`], and
//! [`check_prop`] need the `http` feature (an HTTP client, reqwest with rustls).

#[cfg(feature = "http")]
use std::sync::{Mutex, PoisonError};
#[cfg(feature = "http")]
use std::time::Duration;

#[cfg(feature = "http")]
use async_trait::async_trait;

#[cfg(feature = "http")]
use super::{CapturedOutput, Job, JobError, ShardingContext};

/// The prop holding the request URI (required; note: `uri`, as in ElasticJob).
pub const PROP_URI: &str = "http.uri";
/// The prop holding the method (required): GET, POST, PUT, DELETE, ...
pub const PROP_METHOD: &str = "http.method";
/// The prop holding the body, sent for POST, PUT and DELETE when not empty.
pub const PROP_DATA: &str = "http.data";
/// The prop holding the connect timeout in milliseconds (default 3000).
pub const PROP_CONNECT_TIMEOUT: &str = "http.connect.timeout.milliseconds";
/// The prop holding the read timeout in milliseconds (default 5000).
pub const PROP_READ_TIMEOUT: &str = "http.read.timeout.milliseconds";
/// The prop holding the `Content-Type` of the body.
pub const PROP_CONTENT_TYPE: &str = "http.content.type";
/// The prop holding the lowest status that fails the item (default 400; `0` never fails on a
/// status). shardjob's addition: ElasticJob only logs a status ≥ 400.
pub const PROP_FAILURE_STATUS: &str = "http.failure.status";
/// The header carrying the item's [`ShardingContext`] JSON.
pub const CONTEXT_HEADER: &str = "shardingContext";

/// Every prop an HTTP job reads.
pub const PROPS: &[&str] = &[
    PROP_URI,
    PROP_METHOD,
    PROP_DATA,
    PROP_CONNECT_TIMEOUT,
    PROP_READ_TIMEOUT,
    PROP_CONTENT_TYPE,
    PROP_FAILURE_STATUS,
];

/// The props an HTTP job cannot run without.
pub const REQUIRED_PROPS: &[&str] = &[PROP_URI, PROP_METHOD];

/// Checks one prop's value as [`HttpJob`] reads it at every run (an empty required value is
/// left to the check for required props): `Err` says what is wrong. Keys it does not read
/// pass.
#[cfg(feature = "http")]
pub fn check_prop(key: &str, value: &str) -> Result<(), String> {
    let text = value.trim();
    match key {
        PROP_URI if text.is_empty() => Ok(()),
        PROP_URI => match reqwest::Url::parse(text) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => Ok(()),
            Ok(url) => Err(format!(
                "{text:?} is not an http:// or https:// URL with a host (scheme {:?})",
                url.scheme()
            )),
            Err(e) => Err(format!("{text:?} is not a URL: {e}")),
        },
        PROP_METHOD if text.is_empty() => Ok(()),
        PROP_METHOD => reqwest::Method::from_bytes(text.to_ascii_uppercase().as_bytes())
            .map(|_| ())
            .map_err(|_| format!("{value:?} is not an HTTP method")),
        PROP_CONNECT_TIMEOUT | PROP_READ_TIMEOUT => match text.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(()),
            _ => Err(format!(
                "{value:?} is not a positive number of milliseconds"
            )),
        },
        PROP_FAILURE_STATUS => text
            .parse::<u16>()
            .map(|_| ())
            .map_err(|_| format!("{value:?} is not an HTTP status")),
        _ => Ok(()),
    }
}

/// How much of a response body is kept.
#[cfg(feature = "http")]
const BODY_LIMIT: usize = 64 * 1024;

/// ElasticJob's HTTP job (type `HTTP`): for each item, one request to `http.uri` with the
/// item's context JSON in the `shardingContext` header.
///
/// A transport error, a timeout, or a status at or above `http.failure.status` (default 400)
/// fails the item; the start of the response body (64 KiB) is kept as the item's output.
#[cfg(feature = "http")]
#[derive(Debug, Default)]
pub struct HttpJob {
    /// A client per (connect, read) timeout pair, re-made when the props change.
    client: Mutex<Option<((u64, u64), reqwest::Client)>>,
}

#[cfg(feature = "http")]
impl HttpJob {
    /// A job with no client yet (made at the first request).
    pub fn new() -> Self {
        Self::default()
    }

    fn client(&self, connect_ms: u64, read_ms: u64) -> Result<reqwest::Client, JobError> {
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((key, client)) = slot.as_ref() {
            if *key == (connect_ms, read_ms) {
                return Ok(client.clone());
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(connect_ms))
            .read_timeout(Duration::from_millis(read_ms))
            .build()
            .map_err(|e| JobError::Config(format!("cannot build the HTTP client: {e}")))?;
        *slot = Some(((connect_ms, read_ms), client.clone()));
        Ok(client)
    }
}

#[cfg(feature = "http")]
fn millis(ctx: &ShardingContext, key: &str, default: u64) -> Result<u64, JobError> {
    match ctx.prop(key) {
        None => Ok(default),
        Some(text) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(ms),
            _ => Err(JobError::Config(format!(
                "{key}: {text:?} is not a positive number of milliseconds"
            ))),
        },
    }
}

#[cfg(feature = "http")]
#[async_trait]
impl Job for HttpJob {
    fn job_type(&self) -> String {
        "HTTP".to_owned()
    }

    async fn execute_item(
        &self,
        ctx: &ShardingContext,
    ) -> Result<Option<CapturedOutput>, JobError> {
        let required = |key: &str| {
            ctx.prop(key)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| JobError::Config(format!("props {key} is required")))
        };
        let uri = required(PROP_URI)?;
        let method = required(PROP_METHOD)?.to_ascii_uppercase();
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| JobError::Config(format!("{PROP_METHOD}: {method:?} is not a method")))?;
        let connect = millis(ctx, PROP_CONNECT_TIMEOUT, 3000)?;
        let read = millis(ctx, PROP_READ_TIMEOUT, 5000)?;
        let failure_status = match ctx.prop(PROP_FAILURE_STATUS) {
            None => 400,
            Some(text) => text.trim().parse::<u16>().map_err(|_| {
                JobError::Config(format!("{PROP_FAILURE_STATUS}: {text:?} is not a status"))
            })?,
        };
        let client = self.client(connect, read)?;
        let mut request = client
            .request(method.clone(), uri)
            .header(CONTEXT_HEADER, ctx.to_json());
        let data = ctx.prop(PROP_DATA).unwrap_or_default();
        let with_body = matches!(
            method,
            reqwest::Method::POST | reqwest::Method::PUT | reqwest::Method::DELETE
        );
        if with_body && !data.is_empty() {
            request = request.body(data.to_owned());
        }
        if let Some(content_type) = ctx.prop(PROP_CONTENT_TYPE) {
            request = request.header(reqwest::header::CONTENT_TYPE, content_type);
        }
        let exchange = async {
            let mut response = request.send().await.map_err(describe)?;
            let status = response.status();
            let mut body = Vec::new();
            let mut dropped = 0u64;
            while let Some(chunk) = response.chunk().await.map_err(describe)? {
                let room = BODY_LIMIT.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                dropped += chunk.len().saturating_sub(room) as u64;
            }
            Ok::<_, JobError>((status, body, dropped))
        };
        let (status, body, dropped) = tokio::select! {
            result = exchange => result?,
            _ = ctx.cancel.cancelled() => return Err(JobError::Cancelled),
        };
        let output = CapturedOutput {
            stdout: String::from_utf8_lossy(&body).into_owned(),
            stdout_truncated: dropped,
            ..CapturedOutput::default()
        };
        if failure_status > 0 && status.as_u16() >= failure_status {
            return Err(JobError::HttpStatus {
                status: status.as_u16(),
                output,
            });
        }
        Ok(Some(output))
    }
}

#[cfg(feature = "http")]
fn describe(e: reqwest::Error) -> JobError {
    if e.is_timeout() {
        JobError::Io(format!("HTTP request timed out: {e}"))
    } else {
        JobError::Io(format!("HTTP request failed: {e}"))
    }
}
