//! The metrics endpoint: `GET /metrics` over HTTP/1.x on a plain tokio listener, one request
//! per connection, in the OpenMetrics text format (which Prometheus scrapes).
//!
//! Bounded like the dump port: the request head must come within [`REQUEST_TIMEOUT`] and fit
//! in [`MAX_REQUEST_HEAD`] bytes, the answer must be taken within [`WRITE_TIMEOUT`], and at
//! most [`MAX_CLIENTS`] are served at once (more wait for a slot). It runs in tasks of its
//! own: a scrape never stalls the scheduler.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use super::{Metrics, MetricsAddr};
use crate::runtime::SchedulerState;

/// The largest request head read.
pub const MAX_REQUEST_HEAD: usize = 8192;

/// How long a client has to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a client has to take the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many scrapes are served at once.
pub const MAX_CLIENTS: usize = 16;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The endpoint's listener, bound by the builder (so that a port taken fails the build).
pub(crate) struct MetricsServer {
    listener: TcpListener,
    registry: Arc<Registry>,
}

impl MetricsServer {
    /// Binds `addr` and registers `metrics` in a registry of its own.
    pub(crate) async fn bind(addr: MetricsAddr, metrics: &Metrics) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr.0).await?;
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        Ok(Self {
            listener,
            registry: Arc::new(registry),
        })
    }

    /// The address bound.
    pub(crate) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the scheduler stops.
    pub(crate) async fn run(self, mut state: watch::Receiver<SchedulerState>) {
        let slots = Arc::new(Semaphore::new(MAX_CLIENTS));
        loop {
            if *state.borrow_and_update() != SchedulerState::Running {
                return;
            }
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                changed = state.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait a little rather than spin.
                    tracing::warn!("metrics endpoint: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let slots = Arc::clone(&slots);
            let registry = Arc::clone(&self.registry);
            tokio::spawn(async move {
                let Ok(_slot) = slots.acquire_owned().await else {
                    return;
                };
                if let Err(e) = serve(stream, &registry).await {
                    tracing::debug!("metrics endpoint: {e}");
                }
            });
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Metrics,
    NotFound,
    BadMethod,
    BadRequest,
}

/// Decides on a request line (pure: tested below).
fn route(head: &str) -> Route {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics,
        (_, "/metrics") => Route::BadMethod,
        _ => Route::NotFound,
    }
}

async fn serve(mut stream: TcpStream, registry: &Arc<Registry>) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = async {
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST_HEAD {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        Ok::<_, std::io::Error>(())
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
        Ok(result) => result?,
        Err(_) => return Ok(()),
    }
    let (status, content_type, body) = match route(&String::from_utf8_lossy(&head)) {
        Route::Metrics => {
            // Thousands of jobs make megabytes of text: written on a blocking thread, not on
            // one the runs need.
            let registry = Arc::clone(registry);
            let encoded = tokio::task::spawn_blocking(move || {
                let mut body = String::new();
                prometheus_client::encoding::text::encode(&mut body, &registry).map(|()| body)
            })
            .await;
            match encoded {
                Ok(Ok(body)) => ("200 OK", CONTENT_TYPE, body),
                _ => (
                    "500 Internal Server Error",
                    "text/plain; charset=utf-8",
                    "the metrics could not be encoded\n".to_owned(),
                ),
            }
        }
        Route::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: the metrics are at GET /metrics\n".to_owned(),
        ),
        Route::BadMethod => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics is served\n".to_owned(),
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "expected an HTTP/1 request: GET /metrics\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(result) => result,
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_metrics_is_served() {
        assert_eq!(
            route("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(
            route("GET /metrics?name[]=x HTTP/1.0\r\n\r\n"),
            Route::Metrics
        );
        assert_eq!(route("POST /metrics HTTP/1.1\r\n\r\n"), Route::BadMethod);
        assert_eq!(route("GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route("GET /metrics\r\n\r\n"), Route::BadRequest);
        assert_eq!(route("hello"), Route::BadRequest);
        assert_eq!(route(""), Route::BadRequest);
    }
}
