//! The operation API's conformance suite against a real etcd server (started by the test kit,
//! shared by the tests of this file; each test has a namespace of its own).

mod suite;

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use shardjob_backend_etcd::{EtcdConfig, EtcdRegistry};
use shardjob_core::registry::Registry;
use shardjob_testkit::Cluster;
use suite::Backend;

static SHARED: OnceLock<Cluster> = OnceLock::new();

fn shared() -> &'static Cluster {
    SHARED.get_or_init(|| Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}")))
}

struct Etcd {
    endpoints: Vec<String>,
    prefix: String,
}

#[async_trait]
impl Backend for Etcd {
    async fn client(&self, ns: &str) -> Box<dyn Registry> {
        let config = EtcdConfig::new(self.endpoints.clone())
            .namespace(format!("{}/{ns}", self.prefix))
            .lease_ttl(Duration::from_secs(10))
            .request_timeout(Duration::from_secs(10));
        Box::new(EtcdRegistry::connect(config).await.unwrap())
    }
}

async fn make(test: &str) -> Etcd {
    let cluster = tokio::task::block_in_place(shared);
    Etcd {
        endpoints: cluster.endpoints(),
        prefix: format!("/ops/{test}"),
    }
}

ops_tests!(make);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_unreachable() {
    let mut cluster =
        tokio::task::block_in_place(|| Cluster::etcd(1).unwrap_or_else(|e| panic!("{e}")));
    let config = EtcdConfig::new(cluster.endpoints())
        .namespace("/ops/down")
        .lease_ttl(Duration::from_secs(4))
        .request_timeout(Duration::from_secs(2));
    let reg = EtcdRegistry::connect(config).await.unwrap();
    tokio::task::block_in_place(|| cluster.kill(1)).unwrap();
    suite::calls_fail_as_unreachable(&reg).await;
}
