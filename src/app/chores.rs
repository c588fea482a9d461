//! The periodic chores of `frameloop run`'s control loop, the same with one
//! resident loop and with several: publishing the metrics snapshot when a
//! scrape asks or half a second passed, re-measuring the GPU clock, the
//! progress line on stderr, and the stop's notifications.

use super::{CLOCK_RECALIBRATION, Progress};
use crate::service::{MetricsBoard, MetricsSnapshot, Notifier, WatchdogPinger};
use std::time::{Duration, Instant};

/// How stale the published metrics snapshot may get between scrapes.
const PUBLISH_EVERY: Duration = Duration::from_millis(500);

pub(super) struct Chores {
    progress: Progress,
    /// The progress line goes to stderr only when systemd is not watching.
    show_progress: bool,
    last_publish: Instant,
    last_calibration: Instant,
}

impl Chores {
    pub(super) fn new(notifier: Option<&Notifier>) -> Self {
        let now = Instant::now();
        Self {
            progress: Progress::on_stderr(),
            show_progress: notifier.is_none(),
            last_publish: now,
            last_calibration: now,
        }
    }

    /// Whether the GPU clock is due to be re-measured (counted as done).
    pub(super) fn calibration_due(&mut self) -> bool {
        let due = self.last_calibration.elapsed() >= CLOCK_RECALIBRATION;
        if due {
            self.last_calibration = Instant::now();
        }
        due
    }

    /// Publishes `snapshot()` when a scrape waits for current values or the
    /// last one is half a second old.
    pub(super) fn publish_if_due(
        &mut self,
        board: &MetricsBoard,
        snapshot: impl FnOnce() -> MetricsSnapshot,
    ) {
        if board.refresh_wanted() || self.last_publish.elapsed() >= PUBLISH_EVERY {
            board.publish(snapshot());
            self.last_publish = Instant::now();
        }
    }

    /// The progress line, when nobody else reports progress.
    pub(super) fn show_progress(&mut self, line: impl FnOnce() -> String) {
        if self.show_progress {
            self.progress.show(line);
        }
    }

    /// Ends the progress line, tells systemd the service is stopping and
    /// stops the watchdog pings.
    pub(super) fn finish(mut self, notifier: Option<&Notifier>, pinger: Option<WatchdogPinger>) {
        self.progress.done();
        if let Some(n) = notifier {
            n.stopping();
        }
        drop(pinger);
    }
}
