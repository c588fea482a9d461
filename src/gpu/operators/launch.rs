//! What the built-in operators' launches share: block sizes, the grid
//! cap of the elementwise kernels and the buffer arithmetic.

use crate::fragment::DeviceRegion;
use cudarc::driver::LaunchConfig;

/// Threads per block of the elementwise kernels (`FL_OP_THREADS`).
pub const OP_THREADS: u32 = 256;
/// Most blocks an elementwise kernel is launched with; larger frames are
/// covered by grid-stride loops, so a graph sized for big frames stays cheap
/// on small ones.
pub const MAX_GRID: u32 = 1024;

/// Floats a region holds, as the `capacity` the kernels take.
pub(super) fn float_capacity(region: DeviceRegion) -> u32 {
    u32::try_from(region.bytes / 4).unwrap_or(u32::MAX)
}

/// Blocks for `items` work items of `per_block` each, within `1..=MAX_GRID`.
pub(super) fn grid_for(items: u32, per_block: u32) -> u32 {
    items.div_ceil(per_block).clamp(1, MAX_GRID)
}

/// A one-dimensional launch of `grid` blocks of `block` threads.
pub(super) fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (block, 1, 1), shared_mem_bytes: 0 }
}

/// Bytes of an f32 sample buffer holding `samples` (at least one sample, so
/// that a port is never declared empty).
pub(super) fn sample_bytes(samples: usize) -> usize {
    samples.max(1) * std::mem::size_of::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_geometry() {
        assert_eq!(grid_for(0, 256), 1);
        assert_eq!(grid_for(4096, 256), 16);
        assert_eq!(grid_for(1 << 20, 256), MAX_GRID);
        assert_eq!(float_capacity(DeviceRegion { dptr: 1, bytes: 4099 }), 1024);
    }
}
