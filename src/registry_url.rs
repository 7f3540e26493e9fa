//! Registries by URL: `mem://` (the in-process store, feature `mem`, the default),
//! `zk://host:port[,host:port]/namespace` (ZooKeeper, feature `zk`) and
//! `etcd://host:port[,host:port]/namespace` (etcd, feature `etcd`).
//!
//! A `zk://` or `etcd://` URL may end in a query with these keys:
//!
//! | key | meaning |
//! |---|---|
//! | `session_timeout_ms` | the session timeout in milliseconds; it wins over the timeout passed to [`RegistryUrl::connect`] (a job file's `sessionTimeoutMilliseconds`, or `shardjob run`'s default) |
//!
//! ZooKeeper asks the server for that session timeout (the server clamps it to its
//! `minSessionTimeout..maxSessionTimeout`). etcd uses it as the TTL of the session's lease,
//! which etcd counts in whole seconds of at least 2: the timeout is rounded up to whole
//! seconds, and to 2 s if it is shorter.
//!
//! ```
//! use std::time::Duration;
//! use shardjob::registry_url::RegistryUrl;
//! let url = RegistryUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/jobs?session_timeout_ms=3000")?;
//! assert_eq!(
//!     url,
//!     RegistryUrl::Etcd {
//!         endpoints: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()],
//!         namespace: "jobs".into(),
//!         session_timeout: Some(Duration::from_secs(3)),
//!     }
//! );
//! # Ok::<(), shardjob::registry_url::RegistryUrlError>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use shardjob_core::registry::Registry;

/// The query key that sets the session timeout, in milliseconds.
pub const SESSION_TIMEOUT_KEY: &str = "session_timeout_ms";

/// The shortest lease TTL etcd grants.
pub const ETCD_MIN_TTL: Duration = Duration::from_secs(2);

/// Why a registry URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryUrlError {
    /// The URL has no `scheme://`, or a scheme shardjob does not know.
    #[error(
        "unknown registry URL {0:?}: expected mem://, zk://host:port[,host:port]/namespace or etcd://host:port[,host:port]/namespace"
    )]
    Unknown(String),
    /// The URL is missing a part.
    #[error("registry URL {url:?}: {problem}")]
    Malformed {
        /// The URL.
        url: String,
        /// What is wrong.
        problem: String,
    },
    /// The backend refused the configuration the URL stands for (a bad namespace, a timeout
    /// out of range...).
    #[error("bad registry configuration: {0}")]
    Config(String),
    /// The registry could not be reached.
    #[error("cannot connect to the registry: {0}")]
    Connect(String),
    /// The backend for the scheme is not in this build.
    #[error("{scheme}:// registries are not built in ({what}); mem:// is")]
    NotBuiltIn {
        /// The scheme.
        scheme: &'static str,
        /// Which backend, and why it is missing.
        what: &'static str,
    },
}

/// A parsed registry URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryUrl {
    /// `mem://`: the in-process store (instances in this process only).
    Mem,
    /// `zk://host:port,host:port/namespace[?session_timeout_ms=N]`.
    ZooKeeper {
        /// `host:port` of each server.
        servers: Vec<String>,
        /// The namespace (chroot).
        namespace: String,
        /// The session timeout the URL asks for.
        session_timeout: Option<Duration>,
    },
    /// `etcd://host:port,host:port/namespace[?session_timeout_ms=N]`.
    Etcd {
        /// `host:port` of each endpoint.
        endpoints: Vec<String>,
        /// The namespace (key prefix).
        namespace: String,
        /// The session timeout (lease TTL) the URL asks for.
        session_timeout: Option<Duration>,
    },
}

impl RegistryUrl {
    /// Parses a URL.
    pub fn parse(url: &str) -> Result<Self, RegistryUrlError> {
        let malformed = |problem: String| RegistryUrlError::Malformed {
            url: url.to_owned(),
            problem,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| RegistryUrlError::Unknown(url.to_owned()))?;
        match scheme {
            "mem" => {
                if rest.trim_matches('/').is_empty() {
                    Ok(RegistryUrl::Mem)
                } else {
                    Err(malformed("mem:// takes no host, path or query".to_owned()))
                }
            }
            "zk" | "etcd" => {
                let (rest, query) = match rest.split_once('?') {
                    Some((rest, query)) => (rest, Some(query)),
                    None => (rest, None),
                };
                let (hosts, namespace) = rest.split_once('/').ok_or_else(|| {
                    malformed("a namespace is required after the hosts (…/namespace)".to_owned())
                })?;
                let hosts: Vec<String> = hosts
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned)
                    .collect();
                let namespace = namespace.trim_matches('/').to_owned();
                if hosts.is_empty() {
                    return Err(malformed("at least one host:port is required".to_owned()));
                }
                if let Some(bad) = hosts.iter().find(|h| !is_host_port(h)) {
                    return Err(malformed(format!(
                        "{bad:?} is not host:port (give no scheme or path per host)"
                    )));
                }
                if namespace.is_empty() {
                    return Err(malformed("the namespace is empty".to_owned()));
                }
                let session_timeout = parse_query(query.unwrap_or("")).map_err(malformed)?;
                Ok(if scheme == "zk" {
                    RegistryUrl::ZooKeeper {
                        servers: hosts,
                        namespace,
                        session_timeout,
                    }
                } else {
                    RegistryUrl::Etcd {
                        endpoints: hosts,
                        namespace,
                        session_timeout,
                    }
                })
            }
            _ => Err(RegistryUrlError::Unknown(url.to_owned())),
        }
    }

    /// The session timeout the URL asks for, if any.
    pub fn session_timeout(&self) -> Option<Duration> {
        match self {
            RegistryUrl::Mem => None,
            RegistryUrl::ZooKeeper {
                session_timeout, ..
            }
            | RegistryUrl::Etcd {
                session_timeout, ..
            } => *session_timeout,
        }
    }

    /// Opens a client with one session. Its timeout is the URL's `session_timeout_ms` if it
    /// has one, else `session_timeout`. Must be called inside a tokio runtime.
    pub async fn connect(
        &self,
        session_timeout: Duration,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
        let session_timeout = self.session_timeout().unwrap_or(session_timeout);
        match self {
            #[cfg(feature = "mem")]
            RegistryUrl::Mem => {
                let server = shardjob_backend_mem::MemServer::default();
                Ok(Arc::new(server.connect(session_timeout)))
            }
            #[cfg(not(feature = "mem"))]
            RegistryUrl::Mem => Err(RegistryUrlError::NotBuiltIn {
                scheme: "mem",
                what: "this build has no `mem` feature",
            }),
            #[cfg(feature = "zk")]
            RegistryUrl::ZooKeeper {
                servers, namespace, ..
            } => {
                use shardjob_backend_zk::{ZkConfig, ZkError, ZkRegistry};
                let config = ZkConfig::new(servers.join(","))
                    .namespace(namespace.clone())
                    .session_timeout(session_timeout);
                let registry = ZkRegistry::connect(config).await.map_err(|e| match e {
                    ZkError::Config(e) => RegistryUrlError::Config(e.to_string()),
                    e => RegistryUrlError::Connect(e.to_string()),
                })?;
                Ok(Arc::new(registry))
            }
            #[cfg(not(feature = "zk"))]
            RegistryUrl::ZooKeeper { .. } => Err(RegistryUrlError::NotBuiltIn {
                scheme: "zk",
                what: "build shardjob with `--features zk`",
            }),
            #[cfg(feature = "etcd")]
            RegistryUrl::Etcd {
                endpoints,
                namespace,
                ..
            } => {
                use shardjob_backend_etcd::{EtcdConfig, EtcdError, EtcdRegistry};
                let config = EtcdConfig::new(endpoints.iter().cloned())
                    .namespace(namespace.clone())
                    .lease_ttl(etcd_ttl(session_timeout));
                let registry = EtcdRegistry::connect(config).await.map_err(|e| match e {
                    EtcdError::Config(e) => RegistryUrlError::Config(e.to_string()),
                    e => RegistryUrlError::Connect(e.to_string()),
                })?;
                Ok(Arc::new(registry))
            }
            #[cfg(not(feature = "etcd"))]
            RegistryUrl::Etcd { .. } => Err(RegistryUrlError::NotBuiltIn {
                scheme: "etcd",
                what: "build shardjob with `--features etcd`",
            }),
        }
    }
}

/// The lease TTL for a session timeout: whole seconds, rounded up, at least [`ETCD_MIN_TTL`].
pub fn etcd_ttl(session_timeout: Duration) -> Duration {
    let secs = session_timeout
        .as_secs()
        .saturating_add(u64::from(session_timeout.subsec_nanos() > 0));
    Duration::from_secs(secs).max(ETCD_MIN_TTL)
}

/// Whether `h` looks like `host:port` (a port number after the last colon, something before).
/// The hosts of a URL are cut before its first `/`, so none holds one.
fn is_host_port(h: &str) -> bool {
    matches!(h.rsplit_once(':'), Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok())
}

/// The session timeout of a query string (`key=value&...`).
fn parse_query(query: &str) -> Result<Option<Duration>, String> {
    let mut session_timeout = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("query part {pair:?} is not key=value"))?;
        match key {
            SESSION_TIMEOUT_KEY => {
                if session_timeout.is_some() {
                    return Err(format!("{SESSION_TIMEOUT_KEY} is given twice"));
                }
                let ms: u64 = value.parse().map_err(|_| {
                    format!("{SESSION_TIMEOUT_KEY}={value:?} is not a number of milliseconds")
                })?;
                if ms == 0 {
                    return Err(format!("{SESSION_TIMEOUT_KEY} must be greater than 0"));
                }
                session_timeout = Some(Duration::from_millis(ms));
            }
            other => {
                return Err(format!(
                    "unknown query key {other:?} (known: {SESSION_TIMEOUT_KEY})"
                ));
            }
        }
    }
    Ok(session_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_schemes() {
        assert_eq!(RegistryUrl::parse("mem://"), Ok(RegistryUrl::Mem));
        assert_eq!(
            RegistryUrl::parse("zk://a:2181,b:2181/jobs"),
            Ok(RegistryUrl::ZooKeeper {
                servers: vec!["a:2181".into(), "b:2181".into()],
                namespace: "jobs".into(),
                session_timeout: None,
            })
        );
        assert_eq!(
            RegistryUrl::parse("etcd://127.0.0.1:2379/ns/"),
            Ok(RegistryUrl::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                namespace: "ns".into(),
                session_timeout: None,
            })
        );
        assert_eq!(
            RegistryUrl::parse("etcd://a:1, b:2 ,/x/y"),
            Ok(RegistryUrl::Etcd {
                endpoints: vec!["a:1".into(), "b:2".into()],
                namespace: "x/y".into(),
                session_timeout: None,
            })
        );
        assert!(RegistryUrl::parse("zk://a:2181").is_err());
        assert!(RegistryUrl::parse("zk:///ns").is_err());
        assert!(RegistryUrl::parse("redis://x/y").is_err());
        assert!(RegistryUrl::parse("localhost:2181").is_err());
    }

    #[test]
    fn the_query_sets_the_session_timeout() {
        let url = RegistryUrl::parse("zk://a:1/ns?session_timeout_ms=4000").unwrap();
        assert_eq!(url.session_timeout(), Some(Duration::from_secs(4)));
        let url = RegistryUrl::parse("etcd://a:1,b:2/ns/?session_timeout_ms=2500").unwrap();
        assert_eq!(url.session_timeout(), Some(Duration::from_millis(2500)));
        assert_eq!(
            RegistryUrl::parse("etcd://a:1/ns?")
                .unwrap()
                .session_timeout(),
            None
        );
        assert_eq!(RegistryUrl::Mem.session_timeout(), None);
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let problem = |url: &str| match RegistryUrl::parse(url) {
            Err(RegistryUrlError::Malformed { problem, .. }) => problem,
            other => panic!("{url}: {other:?}"),
        };
        assert!(problem("etcd://a:1/").contains("namespace is empty"));
        assert!(problem("etcd://,/ns").contains("host:port is required"));
        assert!(problem("etcd://http://a:1/ns").contains("not host:port"));
        assert!(problem("etcd://a/ns").contains("not host:port"));
        assert!(problem("zk://a:99999/ns").contains("not host:port"));
        assert!(problem("zk://a:1/ns?ttl=3").contains("unknown query key \"ttl\""));
        assert!(problem("zk://a:1/ns?session_timeout_ms").contains("not key=value"));
        assert!(problem("zk://a:1/ns?session_timeout_ms=4s").contains("not a number"));
        assert!(problem("zk://a:1/ns?session_timeout_ms=0").contains("greater than 0"));
        assert!(problem("zk://a:1/ns?session_timeout_ms=1&session_timeout_ms=2").contains("twice"));
        assert!(problem("mem://?session_timeout_ms=1").contains("mem:// takes no"));
        let err = RegistryUrl::parse("etcd:/a:1/ns").unwrap_err();
        assert!(err.to_string().contains("etcd://host:port"), "{err}");
    }

    #[test]
    fn etcd_ttls_are_whole_seconds_of_at_least_two() {
        assert_eq!(etcd_ttl(Duration::from_millis(1)), Duration::from_secs(2));
        assert_eq!(
            etcd_ttl(Duration::from_millis(2000)),
            Duration::from_secs(2)
        );
        assert_eq!(
            etcd_ttl(Duration::from_millis(2001)),
            Duration::from_secs(3)
        );
        assert_eq!(etcd_ttl(Duration::from_secs(60)), Duration::from_secs(60));
        assert_eq!(etcd_ttl(Duration::MAX), Duration::from_secs(u64::MAX));
    }

    #[tokio::test]
    async fn backends_not_built_say_so() {
        #[cfg(not(feature = "etcd"))]
        {
            let err = RegistryUrl::parse("etcd://a:1/n")
                .unwrap()
                .connect(Duration::from_secs(1))
                .await
                .err()
                .unwrap();
            assert!(err.to_string().contains("--features etcd"), "{err}");
        }
        #[cfg(not(feature = "zk"))]
        {
            let err = RegistryUrl::parse("zk://a:1/n")
                .unwrap()
                .connect(Duration::from_secs(1))
                .await
                .err()
                .unwrap();
            assert!(err.to_string().contains("--features zk"), "{err}");
        }
        assert!(
            RegistryUrl::Mem
                .connect(Duration::from_secs(1))
                .await
                .is_ok()
        );
    }

    /// A configuration the backend refuses is a configuration error, not a connection error.
    #[cfg(feature = "etcd")]
    #[tokio::test]
    async fn etcd_configuration_errors_are_not_connection_errors() {
        let err = RegistryUrl::parse("etcd://127.0.0.1:1/n?session_timeout_ms=7200000")
            .unwrap()
            .connect(Duration::from_secs(1))
            .await
            .err()
            .unwrap();
        assert!(matches!(err, RegistryUrlError::Config(_)), "{err:?}");
        assert!(err.to_string().contains("lease TTL"), "{err}");
    }
}
