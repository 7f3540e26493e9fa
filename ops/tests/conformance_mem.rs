//! The operation API's conformance suite against the in-memory registry.

mod suite;

use std::time::Duration;

use async_trait::async_trait;
use shardjob_backend_mem::MemServer;
use shardjob_core::registry::Registry;
use suite::Backend;

struct Mem {
    server: MemServer,
}

#[async_trait]
impl Backend for Mem {
    async fn client(&self, _ns: &str) -> Box<dyn Registry> {
        Box::new(self.server.connect(Duration::from_secs(10)))
    }
}

async fn make(_test: &str) -> Mem {
    Mem {
        server: MemServer::default(),
    }
}

ops_tests!(make);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_client_is_unreachable() {
    let server = MemServer::default();
    let reg = server.connect(Duration::from_secs(10));
    let id = reg.session().expect("a session").id;
    assert!(server.suspend(id));
    suite::calls_fail_as_unreachable(&reg).await;
}
