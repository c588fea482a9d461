//! The backend factory: picks the consumer of the frame ring (host threads or
//! a GPU-resident graph) and opens it with its rings. The only place that
//! knows the backends apart; the rest of the appliance sees a
//! [`ResidentLoop`].

use super::AppError;
use crate::backend::{Backend, ResidentLoop};
use crate::config::{BackendChoice, Config, StreamToGpu};
use crate::gpu::chain_builder::UserChain;
use crate::gpu::user::handler::UserHandlerSource;
use crate::host::HostLoop;
use crate::rdma::{
    self, ConsumerBackend, GpuFrameRing, IngestPlan, RingPlacement, Transport, final_placement,
    first_placement,
};
use crate::ring::{FrameRing, HostMemory, ResultRing, RingMemory};
use std::sync::Arc;

/// The backend that was picked and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BackendPick {
    /// The backend picked (reported as `name`).
    #[serde(rename = "name")]
    pub backend: Backend,
    /// Why: the configuration, or what `auto` found on the machine.
    pub reason: String,
}

/// Picks the backend for `choice`: `auto` takes CUDA only when a GPU and
/// NVRTC are usable, and says why it took what it took.
pub fn pick_backend(choice: BackendChoice) -> Result<BackendPick, AppError> {
    pick_backend_on(choice, 0)
}

/// As [`pick_backend`], probing GPU `gpu` (a CUDA ordinal).
pub(super) fn pick_backend_on(choice: BackendChoice, gpu: usize) -> Result<BackendPick, AppError> {
    match choice {
        BackendChoice::Host => {
            Ok(BackendPick { backend: Backend::Host, reason: "chosen by configuration".into() })
        }
        BackendChoice::Cuda => match crate::gpu::probe(gpu) {
            Ok(info) => Ok(BackendPick { backend: Backend::Cuda, reason: info.to_string() }),
            Err(why) => Err(AppError::NoGpu(why)),
        },
        BackendChoice::Auto => match crate::gpu::probe(gpu) {
            Ok(info) => Ok(BackendPick { backend: Backend::Cuda, reason: format!("auto: {info}") }),
            Err(why) => {
                Ok(BackendPick { backend: Backend::Host, reason: format!("auto: no usable GPU ({why})") })
            }
        },
    }
}

impl BackendPick {
    /// The picked backend's name: `"host"` or `"cuda"`.
    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// Refuses a `[handler]` on a backend that cannot run user handlers.
    pub(super) fn check_handler(&self, cfg: &Config) -> Result<(), AppError> {
        match &cfg.handler {
            Some(h) if self.backend != Backend::Cuda => {
                Err(AppError::Unsupported(format!("handler.entry: {}", h.host_refusal())))
            }
            _ => Ok(()),
        }
    }
}

/// An opened backend: its rings, its resident loop (not yet launched), how
/// frames reach the frame ring and where that ring lives.
pub(super) struct OpenedBackend {
    pub(super) frame_ring: Arc<FrameRing>,
    pub(super) result_ring: Arc<ResultRing>,
    pub(super) resident: Box<dyn ResidentLoop>,
    pub(super) plan: IngestPlan,
    pub(super) placement: RingPlacement,
    /// The output ring's attach server, when `[output]` is enabled.
    pub(super) outputs: Option<crate::output::OutputServer>,
    /// The transmit ring the loop forms actuation messages into, when the
    /// config has `[[actuate]]` outputs.
    pub(super) transmit: Option<Transmit>,
}

/// A loop's actuation outputs as the sender needs them.
pub(super) struct Transmit {
    pub(super) ring: Arc<crate::actuate::TxRing>,
    pub(super) plan: crate::actuate::ActuationPlan,
    /// How the sender learns of new messages: the host loop wakes it; a GPU
    /// former wakes nobody, so the sender spins on the ring's head.
    pub(super) wait: crate::actuate::SenderWait,
    /// Turns a slot's ready time (the loop's clock) into the host clock.
    pub(super) ready_offset_ns: i64,
}

/// Allocates the rings (`frame_bytes` and `result_bytes` long) where the
/// picked backend needs them and builds its resident loop over them (the
/// CUDA one on GPU `gpu`, with `user_chain`, the chain with Rust operators,
/// when given; the host one with `user_stage`, when given).
pub(super) fn open_backend(
    pick: &BackendPick,
    gpu: usize,
    cfg: &Config,
    (user_handler, user_chain, user_stage): (
        Option<UserHandlerSource>,
        Option<UserChain>,
        Option<crate::host::UserStage>,
    ),
    frame_bytes: usize,
    result_bytes: usize,
) -> Result<OpenedBackend, AppError> {
    let transport = cfg.ingest.transport;
    let actuation = cfg.actuation_plan();
    Ok(match pick.backend {
        Backend::Cuda => {
            if user_stage.is_some() {
                return Err(AppError::Unsupported(
                    "a host user stage runs on the host backend; on the CUDA backend write a user kernel \
                     ([[chain]] op = \"kernel\")"
                        .into(),
                ));
            }
            let rt = crate::gpu::executor::GpuRuntime::open(gpu, crate::gpu::nvrtc::CacheDir::Default)
                .map_err(AppError::GpuOpen)?;
            let (fr, plan, placement) = cuda_frame_ring(cfg, &rt, gpu, frame_bytes)?;
            // Only the native UDP reassembler reports a frame's progress (its received mark).
            let native_udp = matches!(plan, IngestPlan::Udp { .. })
                && cfg.rtp.is_none()
                && cfg.ingest.format == crate::ingest::hsb::IngestFormat::Native;
            let mut loop_cfg = cfg.loop_.clone();
            loop_cfg.stream_to_gpu =
                match crate::gpu::streaming::decide(&cfg.loop_, cfg.ring.slot_bytes, native_udp) {
                    // "auto" leaves a [handler] alone; "on" with one is refused by the loop.
                    Ok(true) if user_handler.is_none() || cfg.loop_.stream_to_gpu == StreamToGpu::On => {
                        StreamToGpu::On
                    }
                    Ok(_) => StreamToGpu::Off,
                    Err(e) => return Err(AppError::GpuLoop(e)),
                };
            let rr = ResultRing::new(mapped(&rt, result_bytes)?, cfg.ring.results)?;
            let served = crate::output::serve_device_outputs(
                &cfg.output,
                &cfg.chain,
                cfg.ring.slot_bytes,
                &rt.ctx,
                rt.info.ordinal as i32,
            )?;
            let (writer, outputs) = served.map(|o| (o.writer, o.server)).unzip();
            let device_actuation = if actuation.is_empty() {
                None
            } else {
                Some(
                    crate::gpu::actuation::DeviceActuation::new(&rt, cfg.ring.transmit_slots, &actuation)
                        .map_err(AppError::GpuLoop)?,
                )
            };
            let lp = crate::gpu::CudaLoop::with_extras(
                Arc::clone(&rt),
                Arc::clone(&fr),
                Arc::clone(&rr),
                &cfg.chain,
                loop_cfg,
                user_handler,
                user_chain,
                writer,
                device_actuation,
            )
            .map_err(AppError::GpuLoop)?;
            let transmit = lp.transmit_ring().map(|ring| Transmit {
                ring: Arc::clone(ring),
                plan: actuation,
                wait: crate::actuate::SenderWait::Spin,
                ready_offset_ns: crate::backend::ResidentLoop::clock_offset_ns(&lp),
            });
            OpenedBackend {
                frame_ring: fr,
                result_ring: rr,
                resident: Box::new(lp),
                plan,
                placement,
                outputs,
                transmit,
            }
        }
        Backend::Host => {
            debug_assert!(user_chain.is_none(), "Rust operators are refused on the host backend");
            let host = |len, huge| -> Result<Box<dyn RingMemory>, AppError> {
                Ok(Box::new(
                    HostMemory::for_ring(len, huge).map_err(|source| AppError::RingMemory { len, source })?,
                ))
            };
            let (fr, rr) =
                make_rings(cfg, host(frame_bytes, cfg.ring.huge_pages)?, host(result_bytes, false)?)?;
            let plan = select_ingest(transport, &cfg.rdma, &fr, &rdma::ring_region(&fr))?;
            let mut lp = HostLoop::new(
                Arc::clone(&fr),
                Arc::clone(&rr),
                cfg.chain.clone(),
                cfg.ring.slot_bytes,
                cfg.loop_.clone(),
            )
            .map_err(AppError::HostLoop)?;
            lp.place_thread(cfg.service.loop_cpu, cfg.service.realtime_priority);
            if let Some(stage) = user_stage {
                lp.set_user_stage(stage).map_err(AppError::HostLoop)?;
            }
            let transmit = if actuation.is_empty() {
                None
            } else {
                let ring =
                    crate::actuate::TxRing::host(cfg.ring.transmit_slots, actuation.max_message_bytes())?;
                let writer = ring.writer().ok_or(AppError::WriterTaken)?;
                lp.actuate(crate::actuate::Actuator::new(actuation.clone(), writer))
                    .map_err(AppError::HostLoop)?;
                // The host loop wakes the sender after each message.
                let wait = crate::actuate::SenderWait::Woken(std::time::Duration::from_millis(10));
                Some(Transmit { ring, plan: actuation, wait, ready_offset_ns: 0 })
            };
            let outputs =
                match crate::output::serve_host_outputs(&cfg.output, &cfg.chain, cfg.ring.slot_bytes)? {
                    Some(o) => {
                        lp.write_outputs(o.writer).map_err(AppError::HostLoop)?;
                        Some(o.server)
                    }
                    None => None,
                };
            OpenedBackend {
                frame_ring: fr,
                result_ring: rr,
                resident: Box::new(lp),
                plan,
                placement: RingPlacement::Host,
                outputs,
                transmit,
            }
        }
    })
}

/// Page-locked host memory the GPU maps, for a ring.
fn mapped(rt: &crate::gpu::executor::GpuRuntime, len: usize) -> Result<Box<dyn RingMemory>, AppError> {
    Ok(Box::new(rt.mapped(len).map_err(|source| AppError::MappedRingMemory { len, source })?))
}

/// The transport decision, as a start-up error when `rdma` cannot run.
fn select_ingest(
    transport: Transport,
    cfg: &crate::rdma::RdmaConfig,
    ring: &Arc<FrameRing>,
    region: &crate::rdma::RingRegion,
) -> Result<IngestPlan, AppError> {
    Ok(rdma::select_ingest_for(transport, cfg, ring, region)?)
}

/// The CUDA backend's frame ring and ingest: with a transport that may take
/// RDMA and a GPU that can be its target, the ring goes in GPU memory and is
/// registered from there (dma-buf, then nvidia-peermem); if RDMA is not
/// taken after all (`auto` without a usable device), that ring is freed --
/// before any graph runs -- and the UDP receiver gets a ring in mapped host
/// memory. Returns the ring, the ingest plan and where the ring lives.
fn cuda_frame_ring(
    cfg: &Config,
    rt: &crate::gpu::executor::GpuRuntime,
    gpu_ordinal: usize,
    frame_bytes: usize,
) -> Result<(Arc<FrameRing>, IngestPlan, RingPlacement), AppError> {
    let transport = cfg.ingest.transport;
    let gpu = match transport {
        Transport::Udp => Err(rdma::placement::GpuRdmaUnknown::NotRead),
        _ => rdma::dmabuf::gpu_rdma_support(gpu_ordinal).map_err(rdma::placement::GpuRdmaUnknown::from),
    };
    let (first, note) = first_placement(ConsumerBackend::Cuda, transport, &gpu);
    if let Some(note) = note {
        tracing::info!("{note}");
    }
    let mapped_ring = || -> Result<Arc<FrameRing>, AppError> {
        let memory = rt
            .mapped_ring(frame_bytes, cfg.ring.huge_pages)
            .map_err(|source| AppError::MappedRingMemory { len: frame_bytes, source })?;
        Ok(FrameRing::new(Box::new(memory), cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy)?)
    };
    if first == RingPlacement::Device {
        match GpuFrameRing::new(&rt.ctx, cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy) {
            Ok(gpu_ring) => {
                let plan = select_ingest(transport, &cfg.rdma, gpu_ring.ring(), gpu_ring.region())?;
                let placement = final_placement(first, plan.is_rdma());
                if placement == RingPlacement::Device {
                    return Ok((gpu_ring.into_ring(), plan, placement));
                }
                // UDP after all: the CPU receiver writes the ring, so it goes
                // in mapped host memory; the GPU ring is freed before any
                // graph runs (freeing synchronises the device).
                drop(gpu_ring);
                return Ok((mapped_ring()?, plan, placement));
            }
            Err(e) => {
                tracing::info!("cannot put the frame ring in GPU memory ({e}); it stays in host memory")
            }
        }
    }
    let ring = mapped_ring()?;
    let plan = select_ingest(transport, &cfg.rdma, &ring, &rdma::ring_region(&ring))?;
    Ok((ring, plan, RingPlacement::HostMapped))
}

fn make_rings(
    cfg: &Config,
    frames: Box<dyn RingMemory>,
    results: Box<dyn RingMemory>,
) -> Result<(Arc<FrameRing>, Arc<ResultRing>), AppError> {
    let fr = FrameRing::new(frames, cfg.ring.slots, cfg.ring.slot_bytes, cfg.ring.policy)?;
    let rr = ResultRing::new(results, cfg.ring.results)?;
    Ok((fr, rr))
}
