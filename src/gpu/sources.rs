//! The CUDA sources embedded in the binary: the shared headers that kernels
//! `#include`, the loop's own kernels (`handlers/`) and the operator kernels
//! (`kernels/`, listed by `gpu::kernel_sources`).

/// The loop's headers, resolved by name for every compiled source (`#include "ring.cuh"`).
pub const LOOP_HEADERS: &[(&str, &str)] = &[
    ("prelude.cuh", include_str!("../../handlers/prelude.cuh")),
    ("ring.cuh", include_str!("../../handlers/ring.cuh")),
    ("ring_ready.cuh", include_str!("../../handlers/ring_ready.cuh")),
    ("actuation.cuh", include_str!("../../handlers/actuation.cuh")),
];

/// The resident loop's kernels: data-ready handler, controller, end and stage
/// markers, and the diagnostics (round-trip floor, deliberate fault).
pub const HANDLER_SOURCES: &[(&str, &str)] = &[
    ("ring_ready.cu", include_str!("../../handlers/ring_ready.cu")),
    ("diagnostics.cu", include_str!("../../handlers/diagnostics.cu")),
];

/// The operator kernels from `kernels/`.
pub const OPERATOR_SOURCES: &[(&str, &str)] = super::kernel_sources::KERNEL_SOURCES;

/// Every header a source may include: the loop's and the operators'.
pub fn all_headers() -> impl Iterator<Item = (&'static str, &'static str)> {
    LOOP_HEADERS.iter().chain(super::kernel_sources::KERNEL_HEADERS.iter()).copied()
}

/// Every source compiled at start-up, handlers first.
pub fn all_sources() -> impl Iterator<Item = (&'static str, &'static str)> {
    HANDLER_SOURCES.iter().chain(OPERATOR_SOURCES.iter()).copied()
}
