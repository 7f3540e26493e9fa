//! Configuration of a [`ZkRegistry`](crate::ZkRegistry).

use std::time::Duration;

use shardjob_core::registry::{NodePath, PathError};

/// ZooKeeper's default `jute.maxbuffer`: the largest packet a server accepts (1 MiB - 1).
pub const ZK_MAX_PACKET: usize = 0xfffff;

/// Who may do what with the nodes this client creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ZkAcl {
    /// `world:anyone` may do everything (ZooKeeper's and ElasticJob's default).
    #[default]
    Open,
    /// Only the authenticated creator's identity (`auth` scheme) may do anything. Needs
    /// [`ZkConfig::digest`].
    CreatorAll,
    /// The creator's identity may do everything, anyone may read. Needs [`ZkConfig::digest`].
    CreatorAllAnyoneRead,
}

/// A bad [`ZkConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZkConfigError {
    /// The connect string lists no host.
    #[error("the ZooKeeper connect string lists no host (expected host:port[,host:port...])")]
    NoHosts,
    /// A host entry is not `host:port`.
    #[error("bad ZooKeeper host {0:?}: expected host:port")]
    BadHost(String),
    /// The namespace (or the chroot part of the connect string) is not a valid path.
    #[error("bad ZooKeeper namespace: {0}")]
    BadNamespace(#[from] PathError),
    /// The namespace breaks the rules every registry's namespaces follow (see
    /// [`check_namespace`](shardjob_core::config::check_namespace)), such as ZooKeeper's
    /// own `/zookeeper`.
    #[error(transparent)]
    Namespace(#[from] shardjob_core::config::NamespaceError),
    /// An ACL that names the creator needs digest credentials.
    #[error("ACL {0:?} needs digest credentials (ZkConfig::digest)")]
    AclNeedsAuth(ZkAcl),
    /// A timeout is zero or too large.
    #[error("bad {what}: {value:?} (must be between 1 ms and 1 hour)")]
    BadTimeout {
        /// Which timeout.
        what: &'static str,
        /// The value given.
        value: Duration,
    },
    /// The digest user name is empty or holds a `:`.
    #[error("bad digest user name {0:?}: must be non-empty and hold no ':'")]
    BadUser(String),
}

/// How to reach ZooKeeper and how to use it.
///
/// ```
/// use std::time::Duration;
/// use shardjob_backend_zk::ZkConfig;
/// let config = ZkConfig::new("10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181")
///     .namespace("elasticjob-demo")
///     .session_timeout(Duration::from_secs(10))
///     .digest("shardjob", "secret");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ZkConfig {
    /// `host:port[,host:port...][/chroot]`; a chroot part is put in front of the namespace.
    pub connect: String,
    /// The namespace, applied as a chroot: `"ns"` or `"/ns"` or `"/a/b"`. Created (with its
    /// ancestors) if missing. `None` means the server's root.
    pub namespace: Option<String>,
    /// The session timeout to ask for (the server clamps it to its
    /// `minSessionTimeout..maxSessionTimeout`). Default 10 s.
    pub session_timeout: Duration,
    /// How long one connection attempt to one server may take. Default 2 s.
    pub connection_timeout: Duration,
    /// The deadline of every request (including the wait for a session after an expiry).
    /// Default 10 s.
    pub request_timeout: Duration,
    /// `digest` credentials `(user, password)`, added to every session.
    pub digest: Option<(String, String)>,
    /// The ACL of created nodes.
    pub acl: ZkAcl,
    /// The largest request the client sends, in bytes (an estimate of the packet size);
    /// larger ones fail with [`RegistryError::TooLarge`](shardjob_core::registry::RegistryError)
    /// instead of making the server drop the connection. Default: ZooKeeper's default
    /// `jute.maxbuffer` minus 1 KiB of headroom.
    pub max_request_bytes: usize,
}

impl std::fmt::Debug for ZkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkConfig")
            .field("connect", &self.connect)
            .field("namespace", &self.namespace)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("digest_user", &self.digest.as_ref().map(|(u, _)| u))
            .field("acl", &self.acl)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

impl ZkConfig {
    /// A configuration with the defaults for this connect string.
    pub fn new(connect: impl Into<String>) -> Self {
        Self {
            connect: connect.into(),
            namespace: None,
            session_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            digest: None,
            acl: ZkAcl::Open,
            max_request_bytes: ZK_MAX_PACKET - 1024,
        }
    }

    /// Sets the namespace (the chroot).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets the session timeout.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// Sets the connection timeout.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// Sets the per-request deadline.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Authenticates every session with `digest` credentials.
    pub fn digest(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.digest = Some((user.into(), password.into()));
        self
    }

    /// Sets the ACL of created nodes.
    pub fn acl(mut self, acl: ZkAcl) -> Self {
        self.acl = acl;
        self
    }

    /// Sets the request size limit.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// Checks the configuration and splits it into the hosts part of the connect string and
    /// the chroot (`None` for the server root).
    pub fn validate(&self) -> Result<(String, Option<NodePath>), ZkConfigError> {
        let (hosts, chroot) = match self.connect.find('/') {
            Some(at) => (&self.connect[..at], Some(&self.connect[at..])),
            None => (self.connect.as_str(), None),
        };
        let hosts: Vec<&str> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        if hosts.is_empty() {
            return Err(ZkConfigError::NoHosts);
        }
        for h in &hosts {
            let ok = h
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(ZkConfigError::BadHost((*h).to_owned()));
            }
        }
        if let Some(ns) = self
            .namespace
            .as_deref()
            .filter(|n| !n.trim_matches('/').is_empty())
        {
            shardjob_core::config::check_namespace(ns)?;
        }
        let mut root = String::new();
        for part in [chroot, self.namespace.as_deref()].into_iter().flatten() {
            let part = part.trim_matches('/');
            if !part.is_empty() {
                root.push('/');
                root.push_str(part);
            }
        }
        let chroot = if root.is_empty() {
            None
        } else {
            Some(NodePath::new(root)?)
        };
        for (what, value) in [
            ("session timeout", self.session_timeout),
            ("connection timeout", self.connection_timeout),
            ("request timeout", self.request_timeout),
        ] {
            if value < Duration::from_millis(1) || value > Duration::from_secs(3600) {
                return Err(ZkConfigError::BadTimeout { what, value });
            }
        }
        if let Some((user, _)) = &self.digest
            && (user.is_empty() || user.contains(':'))
        {
            return Err(ZkConfigError::BadUser(user.clone()));
        }
        if self.acl != ZkAcl::Open && self.digest.is_none() {
            return Err(ZkConfigError::AclNeedsAuth(self.acl));
        }
        Ok((hosts.join(","), chroot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_hosts_and_chroot() {
        let (hosts, chroot) = ZkConfig::new("a:1, b:2/base")
            .namespace("ns")
            .validate()
            .unwrap();
        assert_eq!(hosts, "a:1,b:2");
        assert_eq!(chroot.unwrap().as_str(), "/base/ns");
        let (_, chroot) = ZkConfig::new("a:1").validate().unwrap();
        assert_eq!(chroot, None);
        let (_, chroot) = ZkConfig::new("a:1").namespace("/x/y/").validate().unwrap();
        assert_eq!(chroot.unwrap().as_str(), "/x/y");
    }

    #[test]
    fn rejects_bad_configs() {
        assert_eq!(ZkConfig::new("").validate(), Err(ZkConfigError::NoHosts));
        assert!(matches!(
            ZkConfig::new("a").validate(),
            Err(ZkConfigError::BadHost(_))
        ));
        assert!(matches!(
            ZkConfig::new("a:1").namespace("x//..").validate(),
            Err(ZkConfigError::BadNamespace(_) | ZkConfigError::Namespace(_))
        ));
        assert!(matches!(
            ZkConfig::new("a:1").namespace("zookeeper").validate(),
            Err(ZkConfigError::Namespace(_))
        ));
        assert!(matches!(
            ZkConfig::new("a:1").namespace("a\u{202E}b").validate(),
            Err(ZkConfigError::Namespace(_))
        ));
        assert_eq!(
            ZkConfig::new("a:1").acl(ZkAcl::CreatorAll).validate(),
            Err(ZkConfigError::AclNeedsAuth(ZkAcl::CreatorAll))
        );
        assert!(matches!(
            ZkConfig::new("a:1")
                .session_timeout(Duration::ZERO)
                .validate(),
            Err(ZkConfigError::BadTimeout { .. })
        ));
        assert!(matches!(
            ZkConfig::new("a:1").digest("a:b", "c").validate(),
            Err(ZkConfigError::BadUser(_))
        ));
    }
}
