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
