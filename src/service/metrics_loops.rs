//! The Prometheus text of several resident loops: every family of the
//! single-loop output once, its samples from each loop with a `loop` label in
//! front of their own labels, plus whether each loop and each of its streams
//! is up.

use super::metrics_http::{MetricsSnapshot, escape_label_value, render};
use std::fmt::Write as _;

/// One loop's metrics and state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopMetrics {
    /// The loop's name (the `loop` label).
    pub name: String,
    /// The GPU it runs on (`None` on the host backend).
    pub gpu: Option<usize>,
    /// False once one of its stages stopped by itself.
    pub up: bool,
    /// The stream ids it serves.
    pub streams: Vec<u32>,
    /// Its counters and latency, as a single loop would show them.
    pub snapshot: MetricsSnapshot,
}

/// One metric family: its `# HELP`/`# TYPE` lines and its samples.
struct Family {
    name: String,
    head: String,
    samples: Vec<String>,
}

/// `line` (a sample) with `loop="name"` as its first label.
fn with_loop_label(line: &str, name: &str) -> String {
    let label = format!("loop=\"{}\"", escape_label_value(name));
    match line.find(['{', ' ']) {
        Some(at) if line[at..].starts_with('{') => format!("{}{{{label},{}", &line[..at], &line[at + 1..]),
        Some(at) => format!("{}{{{label}}}{}", &line[..at], &line[at..]),
        None => line.to_string(),
    }
}

/// The family a `# HELP` or `# TYPE` line declares.
fn declared(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("# HELP ").or_else(|| line.strip_prefix("# TYPE "))?;
    rest.split(' ').next()
}

/// Renders `loops` in the text exposition format (each family once, its
/// samples grouped under it).
pub fn render_loops(loops: &[LoopMetrics]) -> String {
    let mut out = String::with_capacity(4096 * loops.len().max(1));
    out.push_str("# HELP frameloop_loop_up 1 while every stage of the loop runs; 0 once one stopped.\n");
    out.push_str("# TYPE frameloop_loop_up gauge\n");
    for l in loops {
        let gpu = l.gpu.map_or_else(|| "none".to_string(), |g| g.to_string());
        let _ = writeln!(
            out,
            "frameloop_loop_up{{loop=\"{}\",gpu=\"{gpu}\"}} {}",
            escape_label_value(&l.name),
            u8::from(l.up)
        );
    }
    out.push_str("# HELP frameloop_stream_up 1 while the loop serving the stream is up.\n");
    out.push_str("# TYPE frameloop_stream_up gauge\n");
    for l in loops {
        for s in &l.streams {
            let _ = writeln!(
                out,
                "frameloop_stream_up{{loop=\"{}\",stream=\"{s}\"}} {}",
                escape_label_value(&l.name),
                u8::from(l.up)
            );
        }
    }
    let mut families: Vec<Family> = Vec::new();
    for l in loops {
        let text = render(&l.snapshot);
        let mut current: Option<usize> = None;
        let mut new_family = false;
        for line in text.lines() {
            if let Some(name) = declared(line) {
                if current.is_none_or(|c| families[c].name != name) {
                    match families.iter().position(|f| f.name == name) {
                        Some(at) => {
                            current = Some(at);
                            new_family = false;
                        }
                        None => {
                            families.push(Family {
                                name: name.to_string(),
                                head: String::new(),
                                samples: Vec::new(),
                            });
                            current = Some(families.len() - 1);
                            new_family = true;
                        }
                    }
                }
                if new_family && let Some(c) = current {
                    families[c].head.push_str(line);
                    families[c].head.push('\n');
                }
            } else if !line.is_empty()
                && let Some(c) = current
            {
                families[c].samples.push(with_loop_label(line, &l.name));
            }
        }
    }
    for f in families {
        out.push_str(&f.head);
        for s in f.samples {
            out.push_str(&s);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::SegmentLatency;

    fn snapshot(processed: u64) -> MetricsSnapshot {
        MetricsSnapshot {
            backend: "host".into(),
            loop_launched: true,
            loop_iterations: processed * 2,
            frames: vec![("processed".into(), processed)],
            drops: vec![("ring_full".into(), 1)],
            latency: vec![SegmentLatency {
                segment: "end_to_end".into(),
                count: processed,
                sum_ns: 1000.0,
                quantiles: vec![(0.5, 9_000)],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn each_family_appears_once_with_a_loop_label_on_every_sample() {
        let loops = [
            LoopMetrics {
                name: "cam0".into(),
                gpu: Some(0),
                up: true,
                streams: vec![1, 2],
                snapshot: snapshot(10),
            },
            LoopMetrics {
                name: "cam1".into(),
                gpu: None,
                up: false,
                streams: vec![3],
                snapshot: snapshot(20),
            },
        ];
        let text = render(&MetricsSnapshot { loops: loops.to_vec(), ..Default::default() });
        for want in [
            "frameloop_loop_up{loop=\"cam0\",gpu=\"0\"} 1\n",
            "frameloop_loop_up{loop=\"cam1\",gpu=\"none\"} 0\n",
            "frameloop_stream_up{loop=\"cam0\",stream=\"2\"} 1\n",
            "frameloop_stream_up{loop=\"cam1\",stream=\"3\"} 0\n",
            "frameloop_frames_total{loop=\"cam0\",outcome=\"processed\"} 10\n",
            "frameloop_frames_total{loop=\"cam1\",outcome=\"processed\"} 20\n",
            "frameloop_loop_iterations_total{loop=\"cam1\"} 40\n",
            "frameloop_latency_seconds{loop=\"cam0\",segment=\"end_to_end\",quantile=\"0.5\"} 0.000009\n",
            "frameloop_latency_seconds_count{loop=\"cam1\",segment=\"end_to_end\"} 20\n",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
        let mut seen: Vec<&str> = Vec::new();
        let mut current = "";
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!seen.contains(&name), "{name} declared twice\n{text}");
                seen.push(name);
                current = name;
            } else if !line.starts_with('#') {
                assert!(line.starts_with(current), "{line} outside its family {current}\n{text}");
                assert!(line.contains("loop=\""), "{line} has no loop label");
            }
        }
        // The single-loop text is not touched.
        assert!(!render(&snapshot(10)).contains("loop=\""));
    }
}
