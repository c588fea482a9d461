//! `frameloop consume`: attach to a running appliance's output socket and
//! print each arriving output, for people checking a running service.

use super::{Consumer, OutputError};
use crate::clock;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `frameloop consume`.
#[derive(Debug)]
pub struct ConsumeArgs {
    /// The appliance's output socket (its output.socket).
    pub socket: PathBuf,
    /// Stop after this many outputs (read or lost) [default: until interrupted].
    pub count: Option<u64>,
    /// Also print each output's samples (space-separated, on the line after
    /// it); from a device-memory ring they are copied to the host first.
    pub samples: bool,
    /// Spin on the ring's head for this long before sleeping between polls
    /// (microseconds). `--spin-us 0` sleeps at once; a large value keeps one
    /// core busy and sees each output as soon as it is published.
    pub spin_us: u64,
}

/// Runs `frameloop consume`.
pub fn consume(args: &ConsumeArgs) -> Result<(), OutputError> {
    // The wait between polls sleeps 20 µs; with the default 50 µs timer
    // slack that sleep lasts ~70 µs, which would be most of what `consume`
    // reports as publish-to-seen. 1 µs of slack for this thread.
    if let Err(e) = crate::realtime::set_current_thread_timer_slack(1_000) {
        tracing::debug!("timer slack left as it was: {e}");
    }
    let mut consumer = Consumer::attach(&args.socket)?;
    consumer.set_spin(Duration::from_micros(args.spin_us));
    let g = consumer.geometry();
    let mut out = std::io::stdout().lock();
    let write_failed = |e: std::io::Error| OutputError::Handshake(format!("cannot write to stdout: {e}"));
    writeln!(
        out,
        "attached to {}: {} slots of {} samples in {}",
        args.socket.display(),
        g.slot_count,
        g.sample_capacity,
        consumer.memory_kind().name()
    )
    .map_err(write_failed)?;
    out.flush().map_err(write_failed)?;
    let mut line = String::new();
    while args.count.is_none_or(|n| consumer.read() + consumer.lost() < n) {
        let lost_before = consumer.lost();
        let Some(frame) = consumer.next_timeout(Duration::from_millis(100)) else {
            if consumer.appliance_gone() && !consumer.ready() {
                writeln!(out, "the appliance closed the output socket (stopped)").map_err(write_failed)?;
                break;
            }
            continue;
        };
        let seen_ns = clock::realtime_ns();
        let r = *frame.record();
        line.clear();
        use std::fmt::Write as _;
        let _ = write!(
            line,
            "seq {} frame {} publish_to_seen_us {:.1} len {} sum {} min {} max {} mean {} detect {}",
            frame.sequence(),
            r.frame_seq,
            seen_ns.saturating_sub(r.published_ns) as f64 / 1000.0,
            frame.len(),
            r.sum,
            r.min,
            r.max,
            r.mean,
            r.detect_count,
        );
        if args.samples {
            line.push_str("\nsamples");
            for s in frame.copy_samples()? {
                let _ = write!(line, " {s}");
            }
        }
        let intact = frame.is_intact();
        drop(frame);
        if !intact {
            line = format!("seq overwritten while printed (lost {})", consumer.lost());
        } else if consumer.lost() > lost_before {
            let _ = write!(line, " (lost {} before it)", consumer.lost() - lost_before);
        }
        writeln!(out, "{line}").map_err(write_failed)?;
        out.flush().map_err(write_failed)?;
    }
    writeln!(out, "read {} lost {}", consumer.read(), consumer.lost()).map_err(write_failed)?;
    Ok(())
}
