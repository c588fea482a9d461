//! Delivery counters: where processed frames go besides the result ring (the
//! output ring's consumers, the NATS sink), as `/metrics` and the stop
//! report show them. Plain numbers; the output and sink layers fill them in.

use serde::Serialize;

/// The output ring and its attached consumers at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OutputMetrics {
    /// Outputs written into the ring since start (its head sequence).
    pub written: u64,
    /// Consumers attached now: `(consumer line, lag)`, where lag is the
    /// outputs written after the newest one that consumer finished with.
    pub consumers: Vec<(usize, u64)>,
    /// Consumers attached since start.
    pub attaches: u64,
    /// Attach requests refused (wrong version, not a request, no free line).
    pub refused: u64,
    /// Connections dropped because their attach request took too long.
    pub timed_out: u64,
}

impl OutputMetrics {
    /// Name and value of each counter, for the stop report.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut rows = vec![
            ("outputs_written".to_string(), self.written),
            ("consumers_attached".to_string(), self.consumers.len() as u64),
            ("attaches".to_string(), self.attaches),
            ("attaches_refused".to_string(), self.refused),
            ("attaches_timed_out".to_string(), self.timed_out),
        ];
        rows.extend(self.consumers.iter().map(|&(line, lag)| (format!("consumer_{line}_lag"), lag)));
        rows
    }
}

/// The NATS sink's counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SinkMetrics {
    /// Messages handed to the broker, retries included.
    pub published: u64,
    /// Results the stream acknowledged.
    pub acked: u64,
    /// Results dropped: the queue was full, or unacknowledged at stop.
    pub dropped: u64,
    /// Results queued and not yet acknowledged.
    pub pending: u64,
    /// Times the connection to the broker was re-established.
    pub reconnects: u64,
}

impl SinkMetrics {
    /// Name and value of each counter, for the stop report and `/metrics`.
    pub fn counters(&self) -> [(&'static str, u64); 5] {
        [
            ("published", self.published),
            ("acked", self.acked),
            ("dropped", self.dropped),
            ("pending", self.pending),
            ("reconnects", self.reconnects),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_counters_name_each_consumer_line_with_its_lag() {
        let m =
            OutputMetrics { written: 40, consumers: vec![(0, 3), (5, 0)], attaches: 4, ..Default::default() };
        let rows = m.counters();
        assert!(rows.contains(&("outputs_written".into(), 40)));
        assert!(rows.contains(&("consumers_attached".into(), 2)));
        assert!(rows.contains(&("consumer_0_lag".into(), 3)));
        assert!(rows.contains(&("consumer_5_lag".into(), 0)));
        let s = SinkMetrics { published: 9, dropped: 2, pending: 1, ..Default::default() };
        assert_eq!(s.counters()[0], ("published", 9));
        assert_eq!(s.counters()[2], ("dropped", 2));
        assert_eq!(s.counters()[3], ("pending", 1));
    }
}
