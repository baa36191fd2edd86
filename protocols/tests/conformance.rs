//! The ObjectBackend conformance suite against the in-memory reference backend, served
//! by the protocols' own S3 and Azure Blob servers on loopback.

use std::sync::Arc;

use talon_protocols::testing::memory::MemoryBackend;
use talon_protocols::testing::{serve, suite};

#[tokio::test]
async fn the_in_memory_backend_conforms() {
    let served = serve::serve(Arc::new(MemoryBackend::new()))
        .await
        .unwrap_or_else(|e| panic!("serving the in-memory backend: {e}"));
    suite::run(&served.endpoint, "memory", &[])
        .await
        .assert_passed();
}
