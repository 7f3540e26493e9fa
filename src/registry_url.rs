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
//! Credentials go before the hosts, percent-encoded where they hold `:`, `@`, `/` or `%`:
//! `zk://user:pass@host:port/ns` authenticates every ZooKeeper session with `digest`
//! credentials and creates nodes with ElasticJob's `CREATOR_ALL` ACL (only that user may read
//! or write them); `etcd://user:pass@host:port/ns` logs in with etcd's user authentication.
//! To keep them out of process lists, leave them out of the URL and set
//! [`ENV_USER`] and [`ENV_PASSWORD`] instead ([`RegistryUrl::with_credentials_from`]).
//! The `Debug` and `Display` forms of a URL never show the password.
//!
//! [`RegistryUrl::connect_with`] tries again with backoff until [`ConnectOptions::wait`] is
//! spent, logging every failed attempt with the address and its cause (connection refused,
//! name resolution, timeout, authentication).
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
//!         credentials: None,
//!     }
//! );
//! let url = RegistryUrl::parse("zk://ops:s%40cret@127.0.0.1:2181/jobs")?;
//! assert_eq!(url.to_string(), "zk://ops:***@127.0.0.1:2181/jobs");
//! # Ok::<(), shardjob::registry_url::RegistryUrlError>(())
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use shardjob_core::backoff::Backoff;
use shardjob_core::registry::Registry;
#[cfg(any(feature = "zk", feature = "etcd"))]
use shardjob_core::registry::RegistryError;

/// The environment variable holding the registry user when the URL has none.
pub const ENV_USER: &str = "SHARDJOB_REGISTRY_USER";
/// The environment variable holding the registry password when the URL has none.
pub const ENV_PASSWORD: &str = "SHARDJOB_REGISTRY_PASSWORD";

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
    /// The registry refused this client access to the namespace (an ACL the credentials do
    /// not satisfy, or etcd authentication). Not retried.
    #[error(
        "the registry at {address} refused access to namespace {namespace:?}: {cause}; give the credentials that own it (zk://user:pass@… / etcd://user:pass@…, $SHARDJOB_REGISTRY_USER and $SHARDJOB_REGISTRY_PASSWORD, or regCenter.digest)"
    )]
    NotAuthorized {
        /// The hosts.
        address: String,
        /// The namespace.
        namespace: String,
        /// The registry's answer.
        cause: String,
    },
    /// The registry could not be reached within the time given to keep trying.
    #[error(
        "cannot connect to the registry at {address} after {attempts} attempt(s) in {waited:?}: {cause}"
    )]
    GaveUp {
        /// The hosts tried.
        address: String,
        /// How many attempts were made.
        attempts: u32,
        /// How long it tried.
        waited: Duration,
        /// The last attempt's cause.
        cause: String,
    },
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
        /// `digest` credentials (`user:pass@`).
        credentials: Option<Credentials>,
    },
    /// `etcd://host:port,host:port/namespace[?session_timeout_ms=N]`.
    Etcd {
        /// `host:port` of each endpoint.
        endpoints: Vec<String>,
        /// The namespace (key prefix).
        namespace: String,
        /// The session timeout (lease TTL) the URL asks for.
        session_timeout: Option<Duration>,
        /// etcd user credentials (`user:pass@`).
        credentials: Option<Credentials>,
    },
}

/// A user and password for the registry. `Debug` shows the user only.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name.
    pub user: String,
    password: String,
}

impl Credentials {
    /// Credentials of `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self {
            user: user.into(),
            password: password.into(),
        }
    }

    /// The password (handle with care: never log it).
    pub fn password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

/// The URL with the password replaced by `***`.
impl fmt::Display for RegistryUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (scheme, hosts, namespace, session_timeout, credentials) = match self {
            RegistryUrl::Mem => return f.write_str("mem://"),
            RegistryUrl::ZooKeeper {
                servers,
                namespace,
                session_timeout,
                credentials,
            } => ("zk", servers, namespace, session_timeout, credentials),
            RegistryUrl::Etcd {
                endpoints,
                namespace,
                session_timeout,
                credentials,
            } => ("etcd", endpoints, namespace, session_timeout, credentials),
        };
        write!(f, "{scheme}://")?;
        if let Some(c) = credentials {
            write!(f, "{}:***@", percent_encode(&c.user))?;
        }
        write!(f, "{}/{namespace}", hosts.join(","))?;
        if let Some(t) = session_timeout {
            write!(f, "?{SESSION_TIMEOUT_KEY}={}", t.as_millis())?;
        }
        Ok(())
    }
}

/// How to connect: the timeouts and how long to keep trying at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The session timeout when the URL gives none.
    pub session_timeout: Duration,
    /// How long one connection attempt may take (ZooKeeper's connection timeout, etcd's
    /// connect timeout); `None` keeps the backend's default.
    pub connection_timeout: Option<Duration>,
    /// How long to keep trying before giving up; zero makes one attempt.
    pub wait: Duration,
    /// The pause after the first failed attempt; it doubles after each.
    pub base_sleep: Duration,
    /// The longest pause between attempts.
    pub max_sleep: Duration,
    /// The most retries after the first attempt (`None`: as many as `wait` allows).
    pub max_retries: Option<u32>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_secs(10),
            connection_timeout: None,
            wait: Duration::ZERO,
            base_sleep: Duration::from_secs(1),
            max_sleep: Duration::from_secs(3),
            max_retries: None,
        }
    }
}

impl ConnectOptions {
    /// The pause before retry number `retry` (from 1): `base_sleep` doubled each time, at most
    /// `max_sleep`.
    pub fn pause(&self, retry: u32) -> Duration {
        Backoff::new(self.base_sleep, self.max_sleep)
            .pause(retry)
            .max(Duration::from_millis(1))
    }
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
                if rest.contains('@') {
                    Err(malformed("mem:// takes no credentials".to_owned()))
                } else if rest.trim_matches('/').is_empty() {
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
                let (authority, namespace) = rest.split_once('/').ok_or_else(|| {
                    malformed("a namespace is required after the hosts (…/namespace)".to_owned())
                })?;
                let (credentials, hosts) = match authority.rsplit_once('@') {
                    None => (None, authority),
                    Some((userinfo, hosts)) => {
                        let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                            malformed("credentials must be user:password@".to_owned())
                        })?;
                        let user = percent_decode(user).map_err(&malformed)?;
                        let password = percent_decode(password).map_err(&malformed)?;
                        if user.is_empty() {
                            return Err(malformed("the user name is empty".to_owned()));
                        }
                        (Some(Credentials::new(user, password)), hosts)
                    }
                };
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
                if let Err(e) = shardjob_core::config::check_namespace(&namespace) {
                    return Err(malformed(e.to_string()));
                }
                let session_timeout = parse_query(query.unwrap_or("")).map_err(malformed)?;
                Ok(if scheme == "zk" {
                    RegistryUrl::ZooKeeper {
                        servers: hosts,
                        namespace,
                        session_timeout,
                        credentials,
                    }
                } else {
                    RegistryUrl::Etcd {
                        endpoints: hosts,
                        namespace,
                        session_timeout,
                        credentials,
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

    /// The credentials the URL carries, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        match self {
            RegistryUrl::Mem => None,
            RegistryUrl::ZooKeeper { credentials, .. } | RegistryUrl::Etcd { credentials, .. } => {
                credentials.as_ref()
            }
        }
    }

    /// The hosts, comma-separated (`""` for mem://).
    pub fn address(&self) -> String {
        match self {
            RegistryUrl::Mem => String::new(),
            RegistryUrl::ZooKeeper { servers: h, .. } | RegistryUrl::Etcd { endpoints: h, .. } => {
                h.join(",")
            }
        }
    }

    /// Gives the URL these credentials when it has none of its own (a user and password read
    /// from [`ENV_USER`] and [`ENV_PASSWORD`], say). Credentials in the URL and different ones
    /// given here are an error, as is a password without a user or credentials for mem://.
    pub fn with_credentials_from(
        mut self,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Self, RegistryUrlError> {
        let given = match (user, password) {
            (None, None) => return Ok(self),
            (None, Some(_)) => {
                return Err(RegistryUrlError::Config(format!(
                    "{ENV_PASSWORD} is set but {ENV_USER} is not"
                )));
            }
            (Some(user), _) if user.is_empty() => {
                return Err(RegistryUrlError::Config(format!("{ENV_USER} is empty")));
            }
            (Some(user), password) => Credentials::new(user, password.unwrap_or_default()),
        };
        match &mut self {
            RegistryUrl::Mem => Err(RegistryUrlError::Config(format!(
                "mem:// takes no credentials, but {ENV_USER} is set"
            ))),
            RegistryUrl::ZooKeeper { credentials, .. } | RegistryUrl::Etcd { credentials, .. } => {
                match credentials {
                    Some(own) if *own != given => Err(RegistryUrlError::Config(format!(
                        "the registry URL has credentials and {ENV_USER}/{ENV_PASSWORD} give \
                         others: give them in one place"
                    ))),
                    _ => {
                        *credentials = Some(given);
                        Ok(self)
                    }
                }
            }
        }
    }

    /// Opens a client with one session. Its timeout is the URL's `session_timeout_ms` if it
    /// has one, else `session_timeout`. One attempt; see [`RegistryUrl::connect_with`] for
    /// retries. Must be called inside a tokio runtime.
    pub async fn connect(
        &self,
        session_timeout: Duration,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
        self.connect_once(&ConnectOptions {
            session_timeout,
            ..ConnectOptions::default()
        })
        .await
    }

    /// Opens a client, trying again with backoff (`base_sleep` doubling up to `max_sleep`,
    /// at most `max_retries` retries) until `options.wait` is spent. Every failed attempt is
    /// logged at WARN with the address and the cause; a configuration error is not retried.
    pub async fn connect_with(
        &self,
        options: &ConnectOptions,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
        let start = tokio::time::Instant::now();
        let deadline = start + options.wait;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let error = match self.connect_once(options).await {
                Ok(registry) => {
                    if attempt > 1 {
                        tracing::info!(registry = %self, attempt, "connected to the registry");
                    }
                    return Ok(registry);
                }
                Err(e @ RegistryUrlError::Connect(_)) => e,
                Err(e) => return Err(e),
            };
            let cause = match &error {
                RegistryUrlError::Connect(cause) => cause.clone(),
                other => other.to_string(),
            };
            let retries_left = options.max_retries.is_none_or(|m| attempt <= m);
            let pause = options.pause(attempt);
            let now = tokio::time::Instant::now();
            if !retries_left || now + pause > deadline {
                if attempt == 1 && options.wait.is_zero() {
                    return Err(error);
                }
                return Err(RegistryUrlError::GaveUp {
                    address: self.address(),
                    attempts: attempt,
                    waited: now - start,
                    cause,
                });
            }
            tracing::warn!(
                registry = %self,
                attempt,
                retry_in_ms = pause.as_millis() as u64,
                "cannot connect to the registry: {cause}"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// The error of credentials the registry does not accept for this namespace.
    #[cfg(any(feature = "zk", feature = "etcd"))]
    fn not_authorized(&self, cause: String) -> RegistryUrlError {
        let namespace = match self {
            RegistryUrl::ZooKeeper { namespace, .. } | RegistryUrl::Etcd { namespace, .. } => {
                namespace.clone()
            }
            RegistryUrl::Mem => String::new(),
        };
        RegistryUrlError::NotAuthorized {
            address: self.address(),
            namespace,
            cause,
        }
    }

    /// Reads the namespace's children once, so credentials that do not open it fail here,
    /// at start-up, with a message that says so, rather than in every later request.
    #[cfg(any(feature = "zk", feature = "etcd"))]
    async fn check_access(
        &self,
        registry: Arc<dyn Registry>,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
        use shardjob_core::registry::{NodePath, RegistryError};
        match registry.children(&NodePath::root()).await {
            Ok(_) => Ok(registry),
            Err(RegistryError::NotAuthorized(cause)) => {
                let _ = registry.close().await;
                let namespace = match self {
                    RegistryUrl::ZooKeeper { namespace, .. }
                    | RegistryUrl::Etcd { namespace, .. } => namespace.clone(),
                    RegistryUrl::Mem => String::new(),
                };
                Err(RegistryUrlError::NotAuthorized {
                    address: self.address(),
                    namespace,
                    cause,
                })
            }
            Err(e) => {
                let _ = registry.close().await;
                Err(RegistryUrlError::Connect(format!(
                    "{}: {e}",
                    self.address()
                )))
            }
        }
    }

    #[cfg_attr(
        not(any(feature = "mem", feature = "zk", feature = "etcd")),
        allow(unused_variables)
    )]
    async fn connect_once(
        &self,
        options: &ConnectOptions,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
        #[cfg(any(feature = "mem", feature = "zk", feature = "etcd"))]
        let session_timeout = self.session_timeout().unwrap_or(options.session_timeout);
        #[cfg(any(feature = "zk", feature = "etcd"))]
        let probe_timeout = options.connection_timeout.unwrap_or(Duration::from_secs(2));
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
                servers,
                namespace,
                credentials,
                ..
            } => {
                use shardjob_backend_zk::{ZkAcl, ZkConfig, ZkError, ZkRegistry};
                let mut config = ZkConfig::new(servers.join(","))
                    .namespace(namespace.clone())
                    .session_timeout(session_timeout);
                if let Some(t) = options.connection_timeout {
                    config = config.connection_timeout(t);
                }
                if let Some(c) = credentials {
                    // ElasticJob's registry center: digest auth on the session and
                    // CREATOR_ALL_ACL on every node it creates.
                    config = config
                        .digest(c.user.clone(), c.password().to_owned())
                        .acl(ZkAcl::CreatorAll);
                }
                config
                    .validate()
                    .map_err(|e| RegistryUrlError::Config(e.to_string()))?;
                probe(servers, probe_timeout).await?;
                let registry = ZkRegistry::connect(config).await.map_err(|e| match e {
                    ZkError::Config(e) => RegistryUrlError::Config(e.to_string()),
                    ZkError::Registry(RegistryError::NotAuthorized(cause)) => {
                        self.not_authorized(cause)
                    }
                    ZkError::Registry(RegistryError::Timeout) => {
                        RegistryUrlError::Connect(format!(
                            "ZooKeeper at {}: no session in time: the servers take TCP connections \
                         but did not answer (paused, overloaded, TLS-only, or not ZooKeeper)",
                            servers.join(",")
                        ))
                    }
                    ZkError::Registry(e) => RegistryUrlError::Connect(format!(
                        "ZooKeeper at {}: {e}",
                        servers.join(",")
                    )),
                })?;
                self.check_access(Arc::new(registry)).await
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
                credentials,
                ..
            } => {
                use shardjob_backend_etcd::{EtcdConfig, EtcdError, EtcdRegistry};
                let mut config = EtcdConfig::new(endpoints.iter().cloned())
                    .namespace(namespace.clone())
                    .lease_ttl(etcd_ttl(session_timeout));
                if let Some(t) = options.connection_timeout {
                    config = config.connect_timeout(t);
                }
                if let Some(c) = credentials {
                    config = config.user(c.user.clone(), c.password().to_owned());
                }
                config
                    .validate()
                    .map_err(|e| RegistryUrlError::Config(e.to_string()))?;
                probe(endpoints, probe_timeout).await?;
                let registry = EtcdRegistry::connect(config).await.map_err(|e| match e {
                    EtcdError::Config(e) => RegistryUrlError::Config(e.to_string()),
                    EtcdError::Registry(RegistryError::NotAuthorized(cause)) => {
                        self.not_authorized(cause)
                    }
                    EtcdError::Registry(RegistryError::Timeout) => {
                        RegistryUrlError::Connect(format!(
                            "etcd at {}: no answer in time: the endpoints take TCP connections \
                             but did not answer (paused, overloaded, TLS expected, or not etcd)",
                            endpoints.join(",")
                        ))
                    }
                    e => RegistryUrlError::Connect(format!("etcd at {}: {e}", endpoints.join(","))),
                })?;
                self.check_access(Arc::new(registry)).await
            }
            #[cfg(not(feature = "etcd"))]
            RegistryUrl::Etcd { .. } => Err(RegistryUrlError::NotBuiltIn {
                scheme: "etcd",
                what: "build shardjob with `--features etcd`",
            }),
        }
    }
}

/// Checks that at least one host takes TCP connections, so a registry that is down fails at
/// once with its cause (name resolution, connection refused, timeout) and its address instead
/// of the client's silent retries ending in a timeout.
#[cfg(any(feature = "zk", feature = "etcd"))]
async fn probe(hosts: &[String], timeout: Duration) -> Result<(), RegistryUrlError> {
    let mut causes = Vec::new();
    for host in hosts {
        let cause = match tokio::time::timeout(timeout, tokio::net::lookup_host(host.as_str()))
            .await
        {
            Err(_) => format!("{host}: name resolution timed out after {timeout:?}"),
            Ok(Err(e)) => format!("{host}: cannot resolve the host name (DNS): {e}"),
            Ok(Ok(addrs)) => {
                let addrs: Vec<_> = addrs.collect();
                if addrs.is_empty() {
                    format!("{host}: the host name resolves to no address (DNS)")
                } else {
                    let mut last = String::new();
                    for addr in addrs {
                        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
                            .await
                        {
                            Ok(Ok(_)) => return Ok(()),
                            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                                last = format!("{host} ({addr}): connection refused");
                            }
                            Ok(Err(e)) => last = format!("{host} ({addr}): {e}"),
                            Err(_) => {
                                last = format!(
                                    "{host} ({addr}): no answer within {timeout:?} (connect timed out)"
                                );
                            }
                        }
                    }
                    last
                }
            }
        };
        causes.push(cause);
    }
    Err(RegistryUrlError::Connect(causes.join("; ")))
}

/// Decodes `%XX` escapes (the rest is taken as it is).
fn percent_decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    "a '%' in the credentials is not followed by two hex digits".to_owned()
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the credentials are not UTF-8 once decoded".to_owned())
}

/// Escapes what cannot stand as it is in a URL's user part.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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
                credentials: None,
            })
        );
        assert_eq!(
            RegistryUrl::parse("etcd://127.0.0.1:2379/ns/"),
            Ok(RegistryUrl::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                namespace: "ns".into(),
                session_timeout: None,
                credentials: None,
            })
        );
        assert_eq!(
            RegistryUrl::parse("etcd://a:1, b:2 ,/x/y"),
            Ok(RegistryUrl::Etcd {
                endpoints: vec!["a:1".into(), "b:2".into()],
                namespace: "x/y".into(),
                session_timeout: None,
                credentials: None,
            })
        );
        assert!(RegistryUrl::parse("zk://a:2181").is_err());
        assert!(RegistryUrl::parse("zk:///ns").is_err());
        assert!(RegistryUrl::parse("redis://x/y").is_err());
        assert!(RegistryUrl::parse("localhost:2181").is_err());
    }

    #[test]
    fn credentials_are_parsed_decoded_and_never_shown() {
        let url = RegistryUrl::parse("zk://ops:p%40ss%3Aw%2Fd@a:1,b:2/jobs").unwrap();
        let c = url.credentials().unwrap();
        assert_eq!((c.user.as_str(), c.password()), ("ops", "p@ss:w/d"));
        assert_eq!(url.to_string(), "zk://ops:***@a:1,b:2/jobs");
        let debug = format!("{url:?}");
        assert!(!debug.contains("p@ss") && debug.contains("***"), "{debug}");
        let url =
            RegistryUrl::parse("etcd://root:secret@127.0.0.1:2379/ns?session_timeout_ms=3000")
                .unwrap();
        assert_eq!(url.credentials().unwrap().password(), "secret");
        assert_eq!(
            url.to_string(),
            "etcd://root:***@127.0.0.1:2379/ns?session_timeout_ms=3000"
        );
        assert!(!format!("{url:?}").contains("secret"));
        for bad in [
            "zk://ops@a:1/ns",
            "zk://:pw@a:1/ns",
            "zk://u:%zz@a:1/ns",
            "mem://u:p@",
        ] {
            assert!(RegistryUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_from_the_environment_fill_a_url_without_them() {
        let url = RegistryUrl::parse("zk://a:1/ns").unwrap();
        let with = url
            .clone()
            .with_credentials_from(Some("u".into()), Some("pw".into()))
            .unwrap();
        assert_eq!(with.credentials(), Some(&Credentials::new("u", "pw")));
        assert_eq!(
            url.clone().with_credentials_from(None, None),
            Ok(url.clone())
        );
        assert!(
            url.clone()
                .with_credentials_from(None, Some("pw".into()))
                .is_err()
        );
        let own = RegistryUrl::parse("zk://v:x@a:1/ns").unwrap();
        assert!(
            own.with_credentials_from(Some("u".into()), Some("pw".into()))
                .is_err()
        );
        assert!(
            RegistryUrl::Mem
                .with_credentials_from(Some("u".into()), None)
                .is_err()
        );
    }

    #[test]
    fn namespaces_are_checked_by_the_core_rules() {
        for bad in [
            "zk://a:1/zookeeper",
            "etcd://a:1/zookeeper/x",
            "zk://a:1/a\u{200B}b",
            "zk://a:1/x/../y",
        ] {
            assert!(
                matches!(
                    RegistryUrl::parse(bad),
                    Err(RegistryUrlError::Malformed { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        let o = ConnectOptions {
            base_sleep: Duration::from_millis(100),
            max_sleep: Duration::from_millis(350),
            ..ConnectOptions::default()
        };
        let pauses: Vec<u128> = (1..=5).map(|r| o.pause(r).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 350, 350, 350]);
        assert_eq!(o.pause(200), Duration::from_millis(350));
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

    /// A refused port fails at once with the address and the cause, and retries are bounded
    /// by the wait.
    #[cfg(feature = "zk")]
    #[tokio::test]
    async fn a_refused_port_says_so_with_its_address() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = RegistryUrl::parse(&format!("zk://127.0.0.1:{port}/n")).unwrap();
        let err = url.connect(Duration::from_secs(10)).await.err().unwrap();
        let text = err.to_string();
        assert!(
            text.contains("connection refused") && text.contains(&port.to_string()),
            "{text}"
        );
        let options = ConnectOptions {
            wait: Duration::from_millis(300),
            base_sleep: Duration::from_millis(50),
            max_sleep: Duration::from_millis(50),
            ..ConnectOptions::default()
        };
        let err = url.connect_with(&options).await.err().unwrap();
        assert!(
            matches!(&err, RegistryUrlError::GaveUp { attempts, .. } if *attempts >= 2),
            "{err:?}"
        );
        assert!(err.to_string().contains("connection refused"), "{err}");
    }

    /// A port that takes connections and never answers (a paused server) is said to be
    /// that, with the address, not as a bare "timed out".
    #[cfg(feature = "zk")]
    #[tokio::test]
    async fn a_silent_server_is_said_to_be_silent() {
        // The kernel completes connections to a listening socket nobody accepts from.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = silent.local_addr().unwrap().port();
        let url =
            RegistryUrl::parse(&format!("zk://127.0.0.1:{port}/n?session_timeout_ms=500")).unwrap();
        let options = ConnectOptions {
            connection_timeout: Some(Duration::from_millis(500)),
            ..ConnectOptions::default()
        };
        let err = url.connect_with(&options).await.err().unwrap().to_string();
        assert!(
            err.contains("did not answer") && err.contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
        drop(silent);
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
