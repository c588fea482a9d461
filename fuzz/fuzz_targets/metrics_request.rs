//! Fuzz target: any bytes as what a metrics client sends on its connection,
//! through the HTTP/1 server (hyper, as the appliance's HTTP server runs it)
//! and the `/metrics` route (`metrics_router`), over an in-memory stream.
//! Whatever the bytes, the server answers with an HTTP/1.0 or 1.1 response or
//! closes the connection; it never panics.
//! Seeds: `fuzz/seeds/metrics_request`.
#![no_main]

use frameloop::service::MetricsBoard;
use frameloop::service::metrics_http::metrics_router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime")
    })
}

fuzz_target!(|data: &[u8]| {
    runtime().block_on(async {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let served = hyper::server::conn::http1::Builder::new().half_close(true).serve_connection(
            TokioIo::new(server),
            TowerToHyperService::new(metrics_router(MetricsBoard::new())),
        );
        let sent = async {
            let _ = client.write_all(data).await;
            let _ = client.shutdown().await;
            let mut answer = Vec::new();
            let _ = client.read_to_end(&mut answer).await;
            answer
        };
        let (_, answer) = tokio::join!(served, sent);
        assert!(
            answer.is_empty() || answer.starts_with(b"HTTP/1.0 ") || answer.starts_with(b"HTTP/1.1 "),
            "not an HTTP/1 response: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(64)])
        );
    });
});
