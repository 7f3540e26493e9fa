//! The registry conformance suite against a real ZooKeeper server (started by the test kit:
//! one server shared by the tests of this file, one of their own for the restart test).

mod conformance;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use conformance::Backend;
use shardjob::core::registry::Registry;
use shardjob_backend_zk::{ZkConfig, ZkRegistry};
use shardjob_testkit::Cluster;

const SESSION: Duration = Duration::from_secs(2);
/// The restart test's sessions must outlive the server's restart, and the client's
/// reconnection after it, on a loaded machine too.
const LONG_SESSION: Duration = Duration::from_secs(12);

static SHARED: OnceLock<Cluster> = OnceLock::new();

fn shared() -> &'static Cluster {
    SHARED.get_or_init(|| Cluster::zookeeper(1).unwrap_or_else(|e| panic!("{e}")))
}

struct Zk {
    connect: String,
    prefix: String,
    session: Duration,
    dedicated: Option<Mutex<Cluster>>,
    clients: Mutex<Vec<ZkRegistry>>,
}

#[async_trait]
impl Backend for Zk {
    async fn client(&self, ns: &str) -> Box<dyn Registry> {
        let config = ZkConfig::new(self.connect.clone())
            .namespace(format!("{}/{ns}", self.prefix))
            .session_timeout(self.session)
            .request_timeout(Duration::from_secs(5));
        let client = ZkRegistry::connect(config).await.unwrap();
        self.clients.lock().unwrap().push(client.clone());
        Box::new(client)
    }

    async fn expire(&self, client: &dyn Registry) {
        let id = client.session().expect("a session").id;
        let found = self
            .clients
            .lock()
            .unwrap()
            .iter()
            .find(|c| c.session().is_some_and(|s| s.id == id))
            .cloned()
            .expect("a client of this harness");
        found.expire_session().await.unwrap();
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
