//! Configuration of an [`EtcdRegistry`](crate::EtcdRegistry).

use std::time::Duration;

use shardjob_core::registry::{NodePath, PathError};

/// etcd's default `--max-txn-ops`.
pub const ETCD_MAX_TXN_OPS: usize = 128;

/// etcd's default `--max-request-bytes` (1.5 MiB).
pub const ETCD_MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// A bad [`EtcdConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdConfigError {
    /// No endpoint is given.
    #[error("no etcd endpoint given (expected http://host:port or host:port)")]
    NoEndpoints,
    /// The namespace is not a valid path.
    #[error("bad etcd namespace: {0}")]
    BadNamespace(#[from] PathError),
    /// The namespace breaks the rules every registry's namespaces follow (see
    /// [`check_namespace`](shardjob_core::config::check_namespace)).
    #[error(transparent)]
    Namespace(#[from] shardjob_core::config::NamespaceError),
    /// The lease TTL is out of range.
    #[error("bad lease TTL {0:?}: etcd grants 2 s to 1 hour, in whole seconds")]
    BadTtl(Duration),
    /// A timeout is zero or too large.
    #[error("bad {what}: {value:?} (must be between 1 ms and 1 hour)")]
    BadTimeout {
        /// Which timeout.
        what: &'static str,
        /// The value given.
        value: Duration,
    },
    /// The user name is empty.
    #[error("the etcd user name is empty")]
    BadUser,
    /// TLS material could not be used.
    #[error("bad TLS configuration: {0}")]
    BadTls(String),
}

/// TLS material for the connection (with the `tls` cargo feature, which builds `rustls` with
/// `ring`).
#[cfg(feature = "tls")]
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate(s) to trust, PEM.
    pub ca_pem: Vec<u8>,
    /// A client certificate and its key, PEM, for mutual TLS.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The name to check the server certificate against, if not the endpoint's host.
    pub domain: Option<String>,
}

/// How to reach etcd and how to use it.
///
/// ```
/// use std::time::Duration;
/// use shardjob_backend_etcd::EtcdConfig;
/// let config = EtcdConfig::new(["http://10.0.0.1:2379", "http://10.0.0.2:2379"])
///     .namespace("elasticjob-demo")
///     .lease_ttl(Duration::from_secs(10))
///     .user("shardjob", "secret");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    /// The cluster's client endpoints (`http://host:port`, or `host:port`).
    pub endpoints: Vec<String>,
    /// The namespace: every node's key is the namespace path followed by the node path
    /// (`/ns` + `/job/config`). The namespace node itself is the root `/`. `None`: no prefix.
    pub namespace: Option<String>,
    /// The TTL of the session lease (the session timeout), renewed every third of it.
    /// Default 10 s; etcd grants at least 2 s.
    pub lease_ttl: Duration,
    /// How long connecting to an endpoint may take. Default 2 s.
    pub connect_timeout: Duration,
    /// The deadline of every request. Default 10 s.
    pub request_timeout: Duration,
    /// User name and password (etcd's auth).
    pub user: Option<(String, String)>,
    /// The server's `--max-txn-ops`: larger transactions fail early with `TooLarge`.
    pub max_txn_ops: usize,
    /// The server's `--max-request-bytes` (an estimate is checked before sending).
    pub max_request_bytes: usize,
    /// TLS material.
    #[cfg(feature = "tls")]
    pub tls: Option<EtcdTls>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("namespace", &self.namespace)
            .field("lease_ttl", &self.lease_ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("max_txn_ops", &self.max_txn_ops)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish_non_exhaustive()
    }
}

impl EtcdConfig {
    /// A configuration with the defaults for these endpoints.
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        Self {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            namespace: None,
            lease_ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            user: None,
            max_txn_ops: ETCD_MAX_TXN_OPS,
            max_request_bytes: ETCD_MAX_REQUEST_BYTES - 1024,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// A configuration from a comma-separated endpoint list.
    pub fn from_list(list: &str) -> Self {
        Self::new(list.split(',').map(str::trim).filter(|s| !s.is_empty()))
    }

    /// Sets the namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets the lease TTL (the session timeout).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the per-request deadline.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Authenticates as this user.
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// Uses TLS.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Checks the configuration; returns the key prefix (`""` or `/ns`).
    pub fn validate(&self) -> Result<String, EtcdConfigError> {
        if self.endpoints.iter().all(|e| e.trim().is_empty()) {
            return Err(EtcdConfigError::NoEndpoints);
        }
        let prefix = match self.namespace.as_deref().map(|n| n.trim_matches('/')) {
            None | Some("") => String::new(),
            Some(ns) => {
                shardjob_core::config::check_namespace(ns)?;
                NodePath::new(format!("/{ns}"))?.as_str().to_owned()
            }
        };
        let ttl = self.lease_ttl;
        if ttl < Duration::from_secs(2)
            || ttl > Duration::from_secs(3600)
            || ttl.subsec_nanos() != 0
        {
            return Err(EtcdConfigError::BadTtl(ttl));
        }
        for (what, value) in [
            ("connect timeout", self.connect_timeout),
            ("request timeout", self.request_timeout),
        ] {
            if value < Duration::from_millis(1) || value > Duration::from_secs(3600) {
                return Err(EtcdConfigError::BadTimeout { what, value });
            }
        }
        if self.user.as_ref().is_some_and(|(u, _)| u.is_empty()) {
            return Err(EtcdConfigError::BadUser);
        }
        Ok(prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_errors() {
        assert_eq!(EtcdConfig::from_list("a:1").validate().unwrap(), "");
        assert_eq!(
            EtcdConfig::from_list("a:1")
                .namespace("/x/y/")
                .validate()
                .unwrap(),
            "/x/y"
        );
        assert_eq!(
            EtcdConfig::from_list(" , ").validate(),
            Err(EtcdConfigError::NoEndpoints)
        );
        assert!(matches!(
            EtcdConfig::from_list("a:1")
                .namespace("team\u{200B}")
                .validate(),
            Err(EtcdConfigError::Namespace(_))
        ));
        assert!(matches!(
            EtcdConfig::from_list("a:1").namespace("a//b").validate(),
            Err(EtcdConfigError::BadNamespace(_) | EtcdConfigError::Namespace(_))
        ));
        assert!(matches!(
            EtcdConfig::from_list("a:1")
                .lease_ttl(Duration::from_millis(1500))
                .validate(),
            Err(EtcdConfigError::BadTtl(_))
        ));
        assert_eq!(
            EtcdConfig::from_list("a:1").user("", "p").validate(),
            Err(EtcdConfigError::BadUser)
        );
    }
}
