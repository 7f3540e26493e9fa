//! Registries by URL: `mem://` (the in-process store, feature `mem`, the default),
//! `zk://host:port,host:port/namespace` (ZooKeeper, feature `zk`),
//! `etcd://host:port/namespace` (etcd: not built in yet).

use std::sync::Arc;
use std::time::Duration;

use shardjob_core::registry::Registry;

/// Why a registry URL cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryUrlError {
    /// The URL has no `scheme://`, or a scheme shardjob does not know.
    #[error(
        "unknown registry URL {0:?}: expected mem://, zk://host:port[,host:port]/namespace or etcd://host:port/namespace"
    )]
    Unknown(String),
    /// The URL is missing a part.
    #[error("registry URL {url:?}: {problem}")]
    Malformed {
        /// The URL.
        url: String,
        /// What is wrong.
        problem: &'static str,
    },
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
    /// `zk://host:port,host:port/namespace`.
    ZooKeeper {
        /// `host:port` of each server.
        servers: Vec<String>,
        /// The namespace (chroot).
        namespace: String,
    },
    /// `etcd://host:port,host:port/namespace`.
    Etcd {
        /// `host:port` of each endpoint.
        endpoints: Vec<String>,
        /// The namespace (key prefix).
        namespace: String,
    },
}

impl RegistryUrl {
    /// Parses a URL.
    pub fn parse(url: &str) -> Result<Self, RegistryUrlError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| RegistryUrlError::Unknown(url.to_owned()))?;
        match scheme {
            "mem" => {
                if rest.trim_matches('/').is_empty() {
                    Ok(RegistryUrl::Mem)
                } else {
                    Err(RegistryUrlError::Malformed {
                        url: url.to_owned(),
                        problem: "mem:// takes no host or path",
                    })
                }
            }
            "zk" | "etcd" => {
                let (hosts, namespace) =
                    rest.split_once('/')
                        .ok_or_else(|| RegistryUrlError::Malformed {
                            url: url.to_owned(),
                            problem: "a namespace is required after the hosts (…/namespace)",
                        })?;
                let hosts: Vec<String> = hosts
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned)
                    .collect();
                let namespace = namespace.trim_matches('/').to_owned();
                if hosts.is_empty() {
                    return Err(RegistryUrlError::Malformed {
                        url: url.to_owned(),
                        problem: "at least one host:port is required",
                    });
                }
                if namespace.is_empty() {
                    return Err(RegistryUrlError::Malformed {
                        url: url.to_owned(),
                        problem: "the namespace is empty",
                    });
                }
                Ok(if scheme == "zk" {
                    RegistryUrl::ZooKeeper {
                        servers: hosts,
                        namespace,
                    }
                } else {
                    RegistryUrl::Etcd {
                        endpoints: hosts,
                        namespace,
                    }
                })
            }
            _ => Err(RegistryUrlError::Unknown(url.to_owned())),
        }
    }

    /// Opens a client with one session of `session_timeout`. Must be called inside a tokio
    /// runtime.
    pub async fn connect(
        &self,
        session_timeout: Duration,
    ) -> Result<Arc<dyn Registry>, RegistryUrlError> {
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
            RegistryUrl::ZooKeeper { servers, namespace } => {
                let config = shardjob_backend_zk::ZkConfig::new(servers.join(","))
                    .namespace(namespace.clone())
                    .session_timeout(session_timeout);
                let registry = shardjob_backend_zk::ZkRegistry::connect(config)
                    .await
                    .map_err(|e| RegistryUrlError::Connect(e.to_string()))?;
                Ok(Arc::new(registry))
            }
            #[cfg(not(feature = "zk"))]
            RegistryUrl::ZooKeeper { .. } => Err(RegistryUrlError::NotBuiltIn {
                scheme: "zk",
                what: "build shardjob with `--features zk`",
            }),
            RegistryUrl::Etcd { .. } => Err(RegistryUrlError::NotBuiltIn {
                scheme: "etcd",
                what: "the etcd backend is not finished",
            }),
        }
    }
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
                namespace: "jobs".into()
            })
        );
        assert_eq!(
            RegistryUrl::parse("etcd://127.0.0.1:2379/ns/"),
            Ok(RegistryUrl::Etcd {
                endpoints: vec!["127.0.0.1:2379".into()],
                namespace: "ns".into()
            })
        );
        assert!(RegistryUrl::parse("zk://a:2181").is_err());
        assert!(RegistryUrl::parse("zk:///ns").is_err());
        assert!(RegistryUrl::parse("redis://x/y").is_err());
        assert!(RegistryUrl::parse("localhost:2181").is_err());
    }

    #[tokio::test]
    async fn backends_not_built_say_so() {
        let err = RegistryUrl::parse("etcd://a:1/n")
            .unwrap()
            .connect(Duration::from_secs(1))
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("not built in"), "{err}");
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
}
