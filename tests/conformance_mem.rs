//! The registry conformance suite against the in-memory registry.

mod conformance;

use std::time::Duration;

use async_trait::async_trait;
use conformance::Backend;
use shardjob::core::registry::Registry;
use shardjob_backend_mem::MemServer;

struct Mem {
    server: MemServer,
}

const SESSION: Duration = Duration::from_secs(2);

#[async_trait]
impl Backend for Mem {
    async fn client(&self, _ns: &str) -> Box<dyn Registry> {
        Box::new(self.server.connect(SESSION))
    }

    async fn expire(&self, client: &dyn Registry) {
        let id = client.session().expect("a session").id;
        assert!(self.server.expire_session(id));
    }

    async fn interrupt(&self, client: &dyn Registry) {
        let id = client.session().expect("a session").id;
        assert!(self.server.suspend(id));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(self.server.resume(id));
    }

    fn session_timeout(&self) -> Duration {
        SESSION
    }

    fn limits_sizes(&self) -> bool {
        false
    }
}

async fn make(_test: &str) -> Mem {
    Mem {
        server: MemServer::default(),
    }
}

conformance_tests!(make);
