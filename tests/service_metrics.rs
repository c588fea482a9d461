//! The Prometheus endpoint over a real socket: what a scraper receives
//! parses as the text exposition format, with the published numbers under
//! the documented names and labels.

mod service_support;

use frameloop::metrics::{OutputMetrics, SinkMetrics};
use frameloop::service::{FrameRingPages, MetricsBoard, MetricsServer, MetricsSnapshot, SegmentLatency};
use service_support::{http_get, parse_exposition};

fn snapshot(iterations: u64) -> MetricsSnapshot {
    MetricsSnapshot {
        backend: "cuda".into(),
        loop_launched: true,
        loop_iterations: iterations,
        loop_idle_iterations: iterations / 2,
        frames: vec![("processed".into(), 1000), ("skipped".into(), 4), ("incomplete".into(), 2)],
        drops: vec![("ring_full".into(), 9), ("bad_magic".into(), 1), ("we\"ird\\name\nx".into(), 5)],
        ring_overruns: 3,
        receiver_busy_poll_gaps: 11,
        receiver_assembly_waits: 12,
        frame_ring_pages: Some(FrameRingPages { bytes: 8 << 20, huge_page_bytes: 8 << 20 }),
        param_generation: 0,
        reloads: Vec::new(),
        latency: vec![
            SegmentLatency {
                segment: "end_to_end".into(),
                count: 1000,
                sum_ns: 12_500_000.0,
                quantiles: vec![(0.5, 12_000), (0.9, 14_000), (0.99, 20_000), (0.999, 31_000)],
            },
            SegmentLatency {
                segment: "gpu".into(),
                count: 1000,
                sum_ns: 3_000_000.0,
                quantiles: vec![(0.5, 2_900), (0.99, 4_100)],
            },
        ],
        loops: Vec::new(),
        logs: Vec::new(),
        outputs: None,
        nats_sink: None,
        actuation: None,
    }
}

#[test]
fn scraped_text_parses_with_the_published_values() {
    let board = MetricsBoard::new();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), board.clone()).unwrap();
    board.publish(snapshot(5000));
    let (status, head, body) = http_get(server.local_addr(), "/metrics").unwrap();
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));

    for (family, kind) in [
        ("frameloop_info", "gauge"),
        ("frameloop_loop_launched", "gauge"),
        ("frameloop_loop_iterations_total", "counter"),
        ("frameloop_loop_idle_iterations_total", "counter"),
        ("frameloop_frames_total", "counter"),
        ("frameloop_drops_total", "counter"),
        ("frameloop_ring_overruns_total", "counter"),
        ("frameloop_receiver_busy_poll_gaps_total", "counter"),
        ("frameloop_receiver_assembly_waits_total", "counter"),
        ("frameloop_frame_ring_bytes", "gauge"),
        ("frameloop_frame_ring_huge_page_bytes", "gauge"),
        ("frameloop_latency_seconds", "summary"),
    ] {
        assert_eq!(exp.types.get(family).map(String::as_str), Some(kind), "{family}");
        assert!(exp.helps.get(family).is_some_and(|h| !h.is_empty()), "{family} has no HELP");
    }
    assert_eq!(
        exp.value("frameloop_info", &[("backend", "cuda"), ("version", env!("CARGO_PKG_VERSION"))]),
        Some(1.0)
    );
    assert_eq!(exp.value("frameloop_loop_launched", &[("backend", "cuda")]), Some(1.0));
    assert_eq!(exp.value("frameloop_loop_iterations_total", &[]), Some(5000.0));
    assert_eq!(exp.value("frameloop_loop_idle_iterations_total", &[]), Some(2500.0));
    assert_eq!(exp.value("frameloop_frames_total", &[("outcome", "processed")]), Some(1000.0));
    assert_eq!(exp.value("frameloop_frames_total", &[("outcome", "incomplete")]), Some(2.0));
    assert_eq!(exp.value("frameloop_drops_total", &[("reason", "ring_full")]), Some(9.0));
    // A label value with a quote, a backslash and a line feed survives the trip.
    assert_eq!(exp.value("frameloop_drops_total", &[("reason", "we\"ird\\name\nx")]), Some(5.0));
    assert_eq!(exp.value("frameloop_ring_overruns_total", &[]), Some(3.0));
    assert_eq!(exp.value("frameloop_receiver_busy_poll_gaps_total", &[]), Some(11.0));
    assert_eq!(exp.value("frameloop_receiver_assembly_waits_total", &[]), Some(12.0));
    assert_eq!(exp.value("frameloop_frame_ring_huge_page_bytes", &[]), Some(f64::from(8 << 20)));
    let p99 =
        exp.value("frameloop_latency_seconds", &[("segment", "end_to_end"), ("quantile", "0.99")]).unwrap();
    assert!((p99 - 20e-6).abs() < 1e-12, "{p99}");
    let sum = exp.value("frameloop_latency_seconds_sum", &[("segment", "end_to_end")]).unwrap();
    assert!((sum - 0.0125).abs() < 1e-12, "{sum}");
    assert_eq!(exp.value("frameloop_latency_seconds_count", &[("segment", "gpu")]), Some(1000.0));
    assert_eq!(exp.all("frameloop_latency_seconds").len(), 6);

    // A new snapshot replaces the old one.
    board.publish(snapshot(6000));
    let (_, _, body) = http_get(server.local_addr(), "/metrics").unwrap();
    let exp = parse_exposition(&body).unwrap();
    assert_eq!(exp.value("frameloop_loop_iterations_total", &[]), Some(6000.0));

    let (status, _, _) = http_get(server.local_addr(), "/").unwrap();
    assert_eq!(status, 404);
    server.stop();
}

#[test]
fn output_consumers_and_nats_sink_counters_are_scraped_when_enabled() {
    let board = MetricsBoard::new();
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), board.clone()).unwrap();
    board.publish(snapshot(10));
    let (_, _, body) = http_get(server.local_addr(), "/metrics").unwrap();
    let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    assert!(!exp.types.contains_key("frameloop_output_consumers"), "no output families without [output]");
    assert!(!exp.types.contains_key("frameloop_nats_sink_results"), "no sink family without [sink.nats]");

    let outputs = OutputMetrics {
        written: 120,
        consumers: vec![(0, 4), (3, 0)],
        attaches: 5,
        refused: 1,
        timed_out: 2,
    };
    let nats_sink = SinkMetrics { published: 100, acked: 97, dropped: 2, pending: 1, reconnects: 3 };
    board.publish(MetricsSnapshot { outputs: Some(outputs), nats_sink: Some(nats_sink), ..snapshot(11) });
    let (_, _, body) = http_get(server.local_addr(), "/metrics").unwrap();
    let exp = parse_exposition(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    for (family, kind) in [
        ("frameloop_outputs_written_total", "counter"),
        ("frameloop_output_consumers", "gauge"),
        ("frameloop_output_consumer_lag", "gauge"),
        ("frameloop_output_attaches_total", "counter"),
        ("frameloop_nats_sink_results", "gauge"),
    ] {
        assert_eq!(exp.types.get(family).map(String::as_str), Some(kind), "{family}");
        assert!(exp.helps.get(family).is_some_and(|h| !h.is_empty()), "{family} has no HELP");
    }
    assert_eq!(exp.value("frameloop_outputs_written_total", &[]), Some(120.0));
    assert_eq!(exp.value("frameloop_output_consumers", &[]), Some(2.0));
    assert_eq!(exp.value("frameloop_output_consumer_lag", &[("consumer", "0")]), Some(4.0));
    assert_eq!(exp.value("frameloop_output_consumer_lag", &[("consumer", "3")]), Some(0.0));
    assert_eq!(exp.value("frameloop_output_attaches_total", &[("outcome", "refused")]), Some(1.0));
    assert_eq!(exp.value("frameloop_output_attaches_total", &[("outcome", "timed_out")]), Some(2.0));
    assert_eq!(exp.value("frameloop_nats_sink_results", &[("state", "published")]), Some(100.0));
    assert_eq!(exp.value("frameloop_nats_sink_results", &[("state", "dropped")]), Some(2.0));
    assert_eq!(exp.value("frameloop_nats_sink_results", &[("state", "pending")]), Some(1.0));
    assert_eq!(exp.value("frameloop_nats_sink_results", &[("state", "reconnects")]), Some(3.0));
    server.stop();
}

#[test]
fn the_parser_rejects_malformed_exposition() {
    // Guards the checks above: the parser is strict where scrapers are.
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\"} 1\n";
    assert!(parse_exposition(good).is_ok());
    for bad in [
        "a_total 1\n",                                      // no TYPE
        "# TYPE a_total counter\na_total{k=\"v} 1\n",       // unterminated label
        "# TYPE a_total counter\na_total{k=\"a\\q\"} 1\n",  // bad escape
        "# TYPE a_total counter\na_total one\n",            // bad value
        "# TYPE a_total counter\na_total -1\n",             // negative counter
        "# TYPE s summary\ns{segment=\"x\"} 1\n",           // summary sample without quantile
        "# TYPE a_total counter\n# TYPE a_total counter\n", // declared twice
        "# TYPE a_total counter\na_total 1",                // no final line feed
        "# TYPE 1bad gauge\n1bad 1\n",                      // bad name
    ] {
        assert!(parse_exposition(bad).is_err(), "accepted {bad:?}");
    }
}
