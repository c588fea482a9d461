//! `frameloop bench` and `frameloop send`: the appliance with a loopback
//! sender, and the sensor emulator on its own, with their progress lines
//! and printed reports.

use super::bench::BenchCommand;
use super::choices::{SendFormat, Transport};
use super::send::SendCommand;
use frameloop::app::{
    AppError, Appliance, Progress, StartOptions, backend_override, html_report, load_or_default,
    print_report, signals,
};

/// `frameloop bench`: the appliance and a loopback sender in one process.
pub fn bench(args: &BenchCommand) -> Result<(), AppError> {
    let mut cfg = load_or_default(args.config.as_deref())?;
    backend_override(&mut cfg, args.backend.map(Into::into));
    let frame_bytes = args.frame_bytes.unwrap_or(65536);
    // Every frame of the run has this size: slots hold exactly one (the
    // fused GPU chain, for one, is chosen by what the slots can hold).
    if args.frame_bytes.is_some() || frame_bytes > cfg.ring.slot_bytes {
        cfg.ring.slot_bytes = frame_bytes;
    }
    cfg.ingest.bind = "127.0.0.1:0".into();
    signals::install().map_err(AppError::Signals)?;
    let mut app = Appliance::start(
        &cfg,
        StartOptions { histogram_log: args.histogram_log.clone(), on_result: None, ..Default::default() },
    )?;
    let send = frameloop::sender::SendArgs {
        rate: args.rate,
        frame_bytes: frame_bytes as u64,
        packet_bytes: args.packet_bytes,
        duration: Some(args.duration),
        streams: args.streams,
        ..frameloop::sender::SendArgs::new(app.local_addr().to_string())
    };
    let plan = cfg.actuation_plan();
    let expect = bench_expectation(&plan);
    let geometry = send.validate().map_err(AppError::Sender)?;
    let stop = signals::stop_flag();
    let expecting = expect.clone();
    let sender = std::thread::Builder::new()
        .name("frameloop-sender".into())
        .spawn(move || frameloop::sender::run_sender_expecting(&send, &expecting, stop, |_| {}))
        .map_err(|source| AppError::Spawn { thread: "sender", source })?;
    let mut progress = Progress::on_stderr();
    let mut last_calibration = std::time::Instant::now();
    while !sender.is_finished() {
        progress.show(|| app.progress_line());
        if last_calibration.elapsed() >= frameloop::app::CLOCK_RECALIBRATION {
            if let Err(e) = app.recalibrate_clock() {
                tracing::warn!("GPU clock recalibration failed: {e}");
            }
            last_calibration = std::time::Instant::now();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    progress.done();
    let (sent, round_trip) =
        sender.join().map_err(|_| AppError::SenderPanicked)?.map_err(AppError::Sender)?;
    let floor = match (&round_trip, args.ping_pong_floor) {
        (Some(_), true) => {
            let rounds = ((args.rate * args.duration) as usize).clamp(100, 20_000);
            let ip = app.local_addr().ip();
            Some(
                frameloop::sender::ping_pong::ping_pong_floor(geometry, plan.max_message_bytes(), rounds, ip)
                    .map_err(AppError::Sender)?,
            )
        }
        (None, true) => {
            tracing::warn!(
                "--ping-pong-floor compares with the actuation round trip: the config has no [[actuate]] output for this sender"
            );
            None
        }
        _ => None,
    };
    // Let the last frames through reassembly and the loop.
    std::thread::sleep(std::time::Duration::from_millis(50));
    app.drain(std::time::Duration::from_secs(2));
    let mut report = app.stop()?;
    report.latency.add_counters(
        "sender",
        [("frames_sent", sent.frames), ("packets_sent", sent.packets), ("bytes_sent", sent.bytes)],
    );
    let sender_json = serde_json::to_value(&sent).unwrap_or_default();
    let mut extra = vec![("sender", sender_json.clone())];
    if let Some(rt) = &round_trip {
        extra.push(("actuation_round_trip", serde_json::to_value(rt).unwrap_or_default()));
    }
    if let Some(f) = &floor {
        extra.push(("ping_pong_floor", serde_json::to_value(f).unwrap_or_default()));
    }
    print_report(&report, extra, args.json);
    if let (Some(rt), false) = (&round_trip, args.json) {
        print!("{}", round_trip_table(rt, floor.as_ref()));
    }
    if let Some(path) = &args.report {
        let config = html_report::config_text(args.config.as_deref(), &cfg);
        let title = format!("frameloop bench: {} frames/s of {frame_bytes} bytes", args.rate);
        html_report::write(path, &html_report::run_report(&title, &report, config, Some(sender_json))?)?;
    }
    Ok(())
}

/// How the bench's sender waits for the config's actuation outputs: on its
/// own socket for replies, else on the first fixed destination; `every` when
/// every output it hears answers every frame. No expectation without outputs.
fn bench_expectation(plan: &frameloop::actuate::ActuationPlan) -> frameloop::sender::ExpectArgs {
    use frameloop::actuate::{Destination, When};
    let mut expect = frameloop::sender::ExpectArgs {
        actuation_wait_ms: 300,
        actuation_late_ms: 100.0,
        ..Default::default()
    };
    let reply: Vec<_> = plan.outputs.iter().filter(|o| o.destination == Destination::Reply).collect();
    let heard: Vec<_> = if reply.is_empty() {
        let Some(first) = plan.outputs.iter().find_map(|o| match &o.destination {
            Destination::Fixed(a) => a.first().copied(),
            Destination::Reply => None,
        }) else {
            return expect;
        };
        expect.actuation_listen = Some(first);
        plan.outputs
            .iter()
            .filter(|o| matches!(&o.destination, Destination::Fixed(a) if a.contains(&first)))
            .collect()
    } else {
        reply
    };
    let every = heard.iter().all(|o| o.when == When::Every);
    expect.expect_actuation = Some(if every {
        frameloop::sender::ExpectActuation::Every
    } else {
        frameloop::sender::ExpectActuation::Some
    });
    expect.actuation_outputs = heard.len() as u32;
    expect
}

/// The round-trip rows of the bench: sensor to actuator, and the ping-pong
/// floor (round trip and its half, the one-way) when measured.
fn round_trip_table(
    rt: &frameloop::sender::RoundTripReport,
    floor: Option<&frameloop::metrics::Percentiles>,
) -> String {
    use std::fmt::Write as _;
    let mut out =
        String::from("\nround trip (us)            p50        p90        p99      p99.9        max\n");
    let mut row = |name: &str, p: &frameloop::metrics::Percentiles, scale: f64| {
        let _ = writeln!(
            out,
            "{name:<22}{:>11.1}{:>11.1}{:>11.1}{:>11.1}{:>11.1}",
            p.p50_us * scale,
            p.p90_us * scale,
            p.p99_us * scale,
            p.p99_9_us * scale,
            p.max_us * scale
        );
    };
    row("sensor->actuator", &rt.round_trip, 1.0);
    if let Some(f) = floor {
        row("udp ping-pong floor", f, 1.0);
        row("  one way (half)", f, 0.5);
    }
    let _ = writeln!(
        out,
        "actuation messages: {} matched, {} missing, {} late, {} duplicate, {} malformed, {} unmatched",
        rt.matched, rt.missing, rt.late, rt.duplicate, rt.malformed, rt.unmatched
    );
    out
}

/// `frameloop send`: the sensor emulator.
pub fn send(command: SendCommand) -> Result<(), AppError> {
    let transport = command.transport;
    let format = command.format;
    let send_args = frameloop::sender::SendArgs::from(command.send);
    let expect_args = frameloop::sender::ExpectArgs::from(command.expect);
    #[cfg(feature = "rdma")]
    let rdma_args = frameloop::rdma::sender::RdmaSendArgs::from(command.rdma);
    signals::install().map_err(AppError::Signals)?;
    let mut progress = Progress::on_stderr();
    if transport == Transport::Rdma {
        if expect_args.expect_actuation.is_some() {
            return Err(AppError::Unsupported(
                "--expect-actuation listens for UDP answers to UDP frames; use --transport udp".into(),
            ));
        }
        if let Some(gbps) = send_args.link_gbps {
            return Err(AppError::Unsupported(format!(
                "--link-gbps {gbps} paces UDP datagrams and RDMA writes are not paced; drop --link-gbps or use --transport udp"
            )));
        }
        #[cfg(feature = "rdma")]
        {
            let stats = frameloop::rdma::sender::run_rdma_sender(
                &send_args,
                &rdma_args,
                signals::stop_flag(),
                |s| {
                    progress.show(|| format!("{s:?}"));
                },
            )?;
            progress.done();
            println!("{stats:#?}");
            return Ok(());
        }
        #[cfg(not(feature = "rdma"))]
        return Err(AppError::Unsupported("this build has no RDMA support (cargo feature rdma)".into()));
    }
    let show = |s: &frameloop::sender::SenderStats| {
        progress.show(|| {
            format!(
                "{:>6.1}s  {} frames ({:.0}/s)  {} packets  {:.2} Gb/s  worst lag {:.0} µs",
                s.elapsed_s,
                s.frames,
                s.frames_per_s,
                s.packets,
                s.gbit_per_s,
                s.max_schedule_lag_ns as f64 / 1000.0
            )
        });
    };
    let (stats, round_trip) = match format {
        SendFormat::Native => {
            frameloop::sender::run_sender_expecting(&send_args, &expect_args, signals::stop_flag(), show)
        }
        SendFormat::Hsb if expect_args.expect_actuation.is_some() => {
            return Err(AppError::Unsupported(
                "--expect-actuation matches native frames; drop it with --format hsb".into(),
            ));
        }
        SendFormat::Hsb => {
            frameloop::sender::hsb::run_hsb_sender(&send_args, signals::stop_flag(), show).map(|s| (s, None))
        }
    }
    .map_err(AppError::Sender)?;
    progress.done();
    if let Some(warning) = stats.link_lag_warning(send_args.link_gbps) {
        tracing::warn!("{warning}");
    }
    match round_trip {
        None => println!("{}", serde_json::to_string_pretty(&stats).unwrap_or_default()),
        Some(rt) => {
            let both = serde_json::json!({ "sender": stats, "actuation": rt });
            println!("{}", serde_json::to_string_pretty(&both).unwrap_or_default());
        }
    }
    Ok(())
}
