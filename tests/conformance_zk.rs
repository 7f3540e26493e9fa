//! The registry conformance suite against a real ZooKeeper server (started by the test kit:
//! one server shared by the tests of this file, one of their own for the restart test).
//!
//! Each client of the shared server talks to it through a proxy of its own
//! ([`shardjob_testkit::Proxy`]), so that `expire` can take that one client off the network
//! and let the server expire its session by the session timeout, as a real expiry happens.

mod conformance;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use conformance::Backend;
use shardjob::core::registry::Registry;
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::{Cluster, Proxy};

const SESSION: Duration = Duration::from_secs(2);
/// The restart test's sessions must outlive the server's restart, and the client's
/// reconnection after it, on a loaded machine too.
const LONG_SESSION: Duration = Duration::from_secs(12);
/// How long `expire` waits for the server to expire a session cut off from it: far beyond
/// the session timeout, for a loaded machine.
const EXPIRY_WAIT: Duration = Duration::from_secs(120);

static SHARED: OnceLock<Cluster> = OnceLock::new();

fn shared() -> &'static Cluster {
    SHARED.get_or_init(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")))
}

struct Zk {
    connect: String,
    prefix: String,
    session: Duration,
    dedicated: Option<Mutex<Cluster>>,
    /// Each client, and the proxy it talks through (clients of the shared server).
    clients: Mutex<Vec<(ZkRegistry, Option<Proxy>)>>,
}

#[async_trait]
impl Backend for Zk {
    async fn client(&self, ns: &str) -> Box<dyn Registry> {
        let proxy = match self.dedicated {
            Some(_) => None,
            None => {
                let server = shared().client_addr(1).unwrap();
                Some(Proxy::start(server).unwrap())
            }
        };
        let connect = match &proxy {
            Some(proxy) => proxy.addr().to_string(),
            None => self.connect.clone(),
        };
        let config = ZkConfig::new(connect)
            .namespace(format!("{}/{ns}", self.prefix))
            .session_timeout(self.session)
            .request_timeout(Duration::from_secs(5));
        let client = ZkRegistry::connect(config).await.unwrap();
        self.clients.lock().unwrap().push((client.clone(), proxy));
        Box::new(client)
    }

    /// Cuts the client's proxy until the server has expired the session (it can only expire
    /// it: nothing of the client reaches the server), then lets the client reconnect, learn of
    /// the expiry and open a new session. No race with the client's reconnection.
    async fn expire(&self, client: &dyn Registry) {
        let id = client.session().expect("a session").id;
        let clients = self.clients.lock().unwrap();
        let proxy = clients
            .iter()
            .find(|(c, _)| c.session().is_some_and(|s| s.id == id))
            .expect("a client of this harness")
            .1
            .as_ref()
            .expect("a client behind a proxy");
        let start = Instant::now();
        // Whether the server holds the session; `dump` may fail on a starved server: ask again
        // until the deadline.
        let alive = || loop {
            match shared().zk_session_alive(1, id.0) {
                Ok(alive) => return alive,
                Err(e) => {
                    assert!(start.elapsed() < EXPIRY_WAIT, "{e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        tokio::task::block_in_place(|| {
            assert!(alive(), "the server does not list session {id:?}");
            proxy.cut();
            while alive() {
                assert!(
                    start.elapsed() < EXPIRY_WAIT,
                    "the server did not expire session {id:?} within {EXPIRY_WAIT:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
            proxy.restore();
        });
    }

    async fn interrupt(&self, _client: &dyn Registry) {
        let cluster = self.dedicated.as_ref().expect("a server of its own");
        tokio::task::block_in_place(|| {
            let mut cluster = cluster.lock().unwrap();
            cluster.kill(1).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            cluster.restart(1).unwrap();
        });
    }

    fn session_timeout(&self) -> Duration {
        self.session
    }
}

async fn make(test: &str) -> Zk {
    let (connect, dedicated, session) = if test == "watches_resume_after_reconnect" {
        let cluster =
            tokio::task::block_in_place(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")));
        (
            cluster.connect_string(),
            Some(Mutex::new(cluster)),
            LONG_SESSION,
        )
    } else {
        let cluster = tokio::task::block_in_place(shared);
        (cluster.connect_string(), None, SESSION)
    };
    Zk {
        connect,
        prefix: format!("/conformance/{test}"),
        session,
        dedicated,
        clients: Mutex::new(Vec::new()),
    }
}

conformance_tests!(make);
