//! The operator kernels' CUDA sources (each built-in operator's beside its
//! launch code in `src/gpu/operators/`, the shared ones and the fused
//! chains' in `kernels/`), embedded in the binary so
//! the CUDA backend compiles them with NVRTC at start-up wherever it runs.
//! They `#include "ops_common.cuh"` (below) and the shared layout header
//! `ring.cuh` (with its `prelude.cuh`) from `handlers/`.

/// Headers the kernel sources include by name, besides `ring.cuh`/`prelude.cuh`.
pub const KERNEL_HEADERS: &[(&str, &str)] = &[
    ("ops_common.cuh", include_str!("../../kernels/ops_common.cuh")),
    ("unpack.cuh", include_str!("operators/unpack.cuh")),
    ("fir.cuh", include_str!("operators/fir.cuh")),
    ("filter2d.cuh", include_str!("operators/filter2d.cuh")),
    ("reduce.cuh", include_str!("operators/reduce.cuh")),
    ("frameloop.cuh", include_str!("../../kernels/frameloop.cuh")),
    ("user_frame.cuh", include_str!("../../kernels/user_frame.cuh")),
    ("output_ring.cuh", include_str!("../../kernels/output_ring.cuh")),
    ("stream.cuh", include_str!("../../kernels/stream.cuh")),
];

/// Every `.cu` file of `kernels/` and `src/gpu/operators/`: (file name, source).
pub const KERNEL_SOURCES: &[(&str, &str)] = &[
    ("unpack.cu", include_str!("operators/unpack.cu")),
    ("fir.cu", include_str!("operators/fir.cu")),
    ("filter2d.cu", include_str!("operators/filter2d.cu")),
    ("reduce.cu", include_str!("operators/reduce.cu")),
    ("delay.cu", include_str!("operators/delay.cu")),
    ("stage.cu", include_str!("../../kernels/stage.cu")),
    ("fused.cu", include_str!("../../kernels/fused.cu")),
    ("fused_tiled.cu", include_str!("../../kernels/fused_tiled.cu")),
    ("fft.cu", include_str!("operators/fft.cu")),
    ("user_support.cu", include_str!("../../kernels/user_support.cu")),
    ("output_publish.cu", include_str!("../../kernels/output_publish.cu")),
];

/// The `extern "C"` kernels the built-in operators launch, by source file.
pub const KERNEL_NAMES: &[(&str, &[&str])] = &[
    ("unpack.cu", &["fl_unpack_u8", "fl_unpack_u16", "fl_unpack_u12"]),
    ("fir.cu", &["fl_fir"]),
    ("filter2d.cu", &["fl_filter2d"]),
    ("reduce.cu", &["fl_stats", "fl_threshold", "fl_stats_threshold"]),
    ("delay.cu", &["fl_delay"]),
    ("stage.cu", &["fl_stage_payload", "fl_stream_pull", "fl_stream_tail"]),
    ("fused.cu", &["fl_fused_chain"]),
    ("fused_tiled.cu", &["fl_fused_tiled", "fl_fused_tiled_loop"]),
    ("fft.cu", &["fl_fft_window", "fl_fft_spectrum"]),
    ("user_support.cu", &["fl_user_prologue"]),
    ("output_publish.cu", &["fl_output_publish"]),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.cu` or `.cuh` file added to kernels/ or beside an operator
    /// (src/gpu/operators/) but not embedded would never be compiled.
    #[test]
    fn every_kernel_file_is_embedded_and_named() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut on_disk: Vec<String> = ["kernels", "src/gpu/operators"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(root.join(dir)).unwrap())
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".cu") || n.ends_with(".cuh"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> =
            KERNEL_SOURCES.iter().chain(KERNEL_HEADERS).map(|(n, _)| n.to_string()).collect();
        embedded.sort();
        assert_eq!(on_disk, embedded);
        for (file, source) in KERNEL_SOURCES {
            let names = KERNEL_NAMES.iter().find(|(f, _)| f == file).map(|(_, n)| *n).unwrap();
            for name in names {
                assert!(source.contains(&format!(" {name}(")), "{file} defines no kernel {name}");
            }
        }
    }
}
