//! Where the frame ring's bytes live, as a pure decision: host memory for
//! the host backend, GPU memory for the CUDA backend when a NIC may write
//! it (GPUDirect RDMA), and page-locked host memory the GPU maps otherwise
//! -- including after RDMA turned out unusable under `auto`, because GPU
//! memory is only worth it when a NIC writes it.

use super::config::Transport;
use super::dmabuf::GpuRdmaSupport;

/// The memory a frame ring is allocated in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RingPlacement {
    /// Anonymous host mapping (the host backend).
    Host,
    /// Page-locked host memory mapped into the GPU (the CUDA backend's UDP
    /// ring; an RDMA NIC writes it as host memory).
    HostMapped,
    /// GPU memory (`cuMemAlloc`) that the NIC writes directly.
    Device,
}

impl RingPlacement {
    pub fn describe(self) -> &'static str {
        match self {
            RingPlacement::Host => "host memory",
            RingPlacement::HostMapped => "page-locked host memory mapped into the GPU",
            RingPlacement::Device => "GPU memory (GPUDirect RDMA)",
        }
    }
}

/// The resident loop that consumes the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerBackend {
    Host,
    Cuda,
}

/// Why the GPU's GPUDirect RDMA attributes are not known (the frame ring
/// then stays in host memory).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuRdmaUnknown {
    /// They were not read: `ingest.transport = "udp"` takes no RDMA.
    #[error("not read: ingest.transport = \"udp\"")]
    NotRead,
    /// CUDA could not report them; check the driver (the source says why).
    #[error(transparent)]
    Query(#[from] crate::gpu::GpuError),
}

/// The placement to try first, and why GPU memory was ruled out when the
/// CUDA backend takes RDMA but the GPU cannot serve as its target.
///
/// `gpu` is what the GPU reports about GPUDirect RDMA (or why it could not
/// be read); it is only looked at for the CUDA backend with a transport
/// that may take RDMA.
pub fn first_placement<E: std::fmt::Display>(
    backend: ConsumerBackend,
    transport: Transport,
    gpu: &Result<GpuRdmaSupport, E>,
) -> (RingPlacement, Option<String>) {
    match (backend, transport) {
        (ConsumerBackend::Host, _) => (RingPlacement::Host, None),
        (ConsumerBackend::Cuda, Transport::Udp) => (RingPlacement::HostMapped, None),
        (ConsumerBackend::Cuda, Transport::Auto | Transport::Rdma) => match gpu {
            Err(why) => (
                RingPlacement::HostMapped,
                Some(format!(
                    "the GPU's GPUDirect RDMA attributes could not be read ({why}); the frame ring stays in host memory"
                )),
            ),
            Ok(s) if !s.gpu_direct_rdma => (
                RingPlacement::HostMapped,
                Some("the GPU does not support GPUDirect RDMA; the frame ring stays in host memory".into()),
            ),
            Ok(s) if !s.orders_remote_writes() => (
                RingPlacement::HostMapped,
                Some(format!(
                    "the GPU does not order a NIC's writes for its kernels (GPU_DIRECT_RDMA_WRITES_ORDERING = {}, \
                     needs 100 or more), which the head-sequence trailer relies on; the frame ring stays in host memory",
                    s.writes_ordering
                )),
            ),
            Ok(_) => (RingPlacement::Device, None),
        },
    }
}

/// The placement the loop runs with, once the transport is decided: a ring
/// placed in GPU memory for RDMA moves to mapped host memory when UDP was
/// taken instead (the UDP receiver writes the ring from the CPU).
pub fn final_placement(first: RingPlacement, rdma_taken: bool) -> RingPlacement {
    match first {
        RingPlacement::Device if !rdma_taken => RingPlacement::HostMapped,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPABLE: GpuRdmaSupport =
        GpuRdmaSupport { gpu_direct_rdma: true, dma_buf: true, writes_ordering: 100 };
    const TRANSPORTS: [Transport; 3] = [Transport::Auto, Transport::Rdma, Transport::Udp];

    #[test]
    fn host_backend_always_takes_host_memory() {
        for t in TRANSPORTS {
            for gpu in [Ok(CAPABLE), Err("no GPU")] {
                assert_eq!(first_placement(ConsumerBackend::Host, t, &gpu), (RingPlacement::Host, None));
            }
        }
        assert_eq!(final_placement(RingPlacement::Host, true), RingPlacement::Host);
        assert_eq!(final_placement(RingPlacement::Host, false), RingPlacement::Host);
    }

    #[test]
    fn cuda_with_udp_takes_mapped_host_memory_without_asking_the_gpu() {
        let unreadable = Err::<GpuRdmaSupport, _>("never read");
        assert_eq!(
            first_placement(ConsumerBackend::Cuda, Transport::Udp, &unreadable),
            (RingPlacement::HostMapped, None)
        );
        assert_eq!(
            first_placement(ConsumerBackend::Cuda, Transport::Udp, &Ok::<_, &str>(CAPABLE)),
            (RingPlacement::HostMapped, None)
        );
    }

    #[test]
    fn cuda_with_rdma_or_auto_takes_gpu_memory_on_a_capable_gpu() {
        for t in [Transport::Auto, Transport::Rdma] {
            for ordering in [100, 200] {
                let gpu = Ok::<_, &str>(GpuRdmaSupport { writes_ordering: ordering, ..CAPABLE });
                assert_eq!(first_placement(ConsumerBackend::Cuda, t, &gpu), (RingPlacement::Device, None));
            }
            // dma-buf support only decides how it registers, not where it lives.
            let no_dmabuf = Ok::<_, &str>(GpuRdmaSupport { dma_buf: false, ..CAPABLE });
            assert_eq!(first_placement(ConsumerBackend::Cuda, t, &no_dmabuf).0, RingPlacement::Device);
        }
    }

    #[test]
    fn a_gpu_that_cannot_be_the_target_keeps_the_ring_in_host_memory_and_says_why() {
        let cases = [
            (Ok(GpuRdmaSupport { gpu_direct_rdma: false, ..CAPABLE }), "does not support GPUDirect RDMA"),
            (Ok(GpuRdmaSupport { writes_ordering: 0, ..CAPABLE }), "GPU_DIRECT_RDMA_WRITES_ORDERING = 0"),
            (Err("CUDA_ERROR_INVALID_VALUE"), "could not be read (CUDA_ERROR_INVALID_VALUE)"),
        ];
        for (gpu, says) in cases {
            for t in [Transport::Auto, Transport::Rdma] {
                let (placement, note) = first_placement(ConsumerBackend::Cuda, t, &gpu);
                assert_eq!(placement, RingPlacement::HostMapped);
                let note = note.expect("a reason");
                assert!(note.contains(says) && !note.contains('\n'), "{note}");
            }
        }
    }

    #[test]
    fn gpu_memory_is_kept_only_when_rdma_was_taken() {
        assert_eq!(final_placement(RingPlacement::Device, true), RingPlacement::Device);
        assert_eq!(final_placement(RingPlacement::Device, false), RingPlacement::HostMapped);
        assert_eq!(final_placement(RingPlacement::HostMapped, true), RingPlacement::HostMapped);
        assert_eq!(final_placement(RingPlacement::HostMapped, false), RingPlacement::HostMapped);
    }
}
