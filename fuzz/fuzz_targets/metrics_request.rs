//! Fuzz target: any bytes as the request head a metrics client sends,
//! through `parse_request_line` and `respond`, as the endpoint serves it.
//! Seeds: `fuzz/seeds/metrics_request`.
#![no_main]

use frameloop::service::MetricsBoard;
use frameloop::service::metrics_http::{parse_request_line, respond};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let board = MetricsBoard::new();
    match parse_request_line(data) {
        Ok(request) => {
            assert!(request.path.starts_with('/'));
            let _ = respond(&request, &board);
        }
        Err(response) => assert_eq!(response.status, 400),
    }
});
