//! The output-publish node of the CUDA backend: the argument of the
//! `fl_output_publish` kernel (kernels/output_publish.cu) that writes each
//! frame's output into an output ring in device memory, and the output ring
//! as the loop keeps it while the graph runs: its writer, its control block
//! registered with the device, and the device's count of outputs written.

use super::GpuError;
use crate::cuda::{DeviceBuffer, HostRegistration};
use crate::output::OutputWriter;
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// Threads of the single block `fl_output_publish` runs (`FL_OUTPUT_THREADS`).
pub(super) const OUTPUT_THREADS: u32 = 1024;

/// The argument of `fl_output_publish` (`OutputPublish` in kernels/output_publish.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputPublish {
    /// Device address of the ring's data region (slot 0).
    pub slots: u64,
    /// Device address of the registered control block.
    pub ctl: u64,
    /// Device address of the chain's final output buffer, set when the graph
    /// is built (0: the node writes records without samples).
    pub samples: u64,
    /// Device address of the count of outputs written (a `u64`).
    pub written: u64,
    /// Device address of the control block's slot-head table.
    pub heads: u64,
    pub slot_count: u32,
    pub slot_stride: u32,
    /// `f32` samples a slot holds.
    pub sample_capacity: u32,
    /// `f32` samples the output buffer holds, set with `samples`.
    pub buffer_capacity: u32,
}

const _: () = assert!(std::mem::size_of::<OutputPublish>() == 56);

/// An output ring in device memory as the CUDA loop keeps it while its
/// graph writes the ring. Drop it only once the graph is gone.
pub(super) struct DeviceOutput {
    /// Declared first: unregistered before the ring it points into can go.
    _control: HostRegistration,
    /// The device's count of outputs written (zeroed at creation).
    _written: DeviceBuffer,
    /// The ring's single producer: the graph writes for it.
    _writer: OutputWriter,
}

impl DeviceOutput {
    /// Registers the control block of `writer`'s ring (device memory) with
    /// the device of `ctx`; returns it and the node's argument (its sample
    /// buffer still to be set).
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        writer: OutputWriter,
    ) -> Result<(Self, OutputPublish), GpuError> {
        let layout = writer.device_layout().ok_or_else(|| {
            GpuError::Setup(
                "the output ring is in host memory; the CUDA backend writes a ring in device memory".into(),
            )
        })?;
        let control = writer.ring().control();
        let len = crate::output::OutputMemory::len(control);
        debug_assert!(len >= crate::output::layout::SLOT_SEQS_OFFSET);
        // SAFETY: a memfd mapping is page aligned and mapped whole pages; the
        // ring (kept by `_writer`, dropped after `_control`) keeps it mapped.
        let control =
            unsafe { HostRegistration::register(ctx, layout.control_host_ptr, len.next_multiple_of(4096)) }
                .map_err(|e| GpuError::Memory {
                what: "the output ring's control block",
                why: format!("{e}; raise the locked-memory limit (ulimit -l / LimitMEMLOCK=)"),
            })?;
        let control_dptr = control.device_address()?;
        let written = DeviceBuffer::new(ctx, std::mem::size_of::<u64>(), 0)?;
        let publish = OutputPublish {
            slots: layout.slots_dptr,
            ctl: control_dptr,
            samples: 0,
            written: written.dptr(),
            heads: control_dptr + u64::from(layout.heads_offset),
            slot_count: layout.slot_count,
            slot_stride: layout.slot_stride,
            sample_capacity: layout.sample_capacity,
            buffer_capacity: 0,
        };
        Ok((Self { _control: control, _written: written, _writer: writer }, publish))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The kernel source's `OutputPublish` and a kernel that stores the
    /// offset of each of its fields, constants the PTX shows.
    fn offsets_source(fields: &[&str]) -> String {
        let kernel = include_str!("../../kernels/output_publish.cu");
        let start = kernel.find("struct OutputPublish {").expect("the struct in the kernel source");
        let end = start + kernel[start..].find("};").expect("the end of the struct") + 2;
        let mut source = format!("#include \"output_ring.cuh\"\n{}\n", &kernel[start..end]);
        source.push_str(
            "extern \"C\" __global__ void fl_output_publish_offsets(const OutputPublish* base, unsigned long long* out) {\n",
        );
        for (i, field) in fields.iter().enumerate() {
            source.push_str(&format!(
                "  out[{i}] = (unsigned long long)((const char*)&base->{field} - (const char*)base);\n"
            ));
        }
        source.push_str("}\n");
        source
    }

    #[test]
    fn the_kernel_argument_has_the_layout_of_the_cuda_struct() {
        if !crate::gpu::nvrtc_present() {
            assert_ne!(std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref(), Ok("1"), "NVRTC is required");
            eprintln!("NVRTC not present; skipping");
            return;
        }
        let rust = [
            ("slots", offset_of!(OutputPublish, slots)),
            ("ctl", offset_of!(OutputPublish, ctl)),
            ("samples", offset_of!(OutputPublish, samples)),
            ("written", offset_of!(OutputPublish, written)),
            ("heads", offset_of!(OutputPublish, heads)),
            ("slot_count", offset_of!(OutputPublish, slot_count)),
            ("slot_stride", offset_of!(OutputPublish, slot_stride)),
            ("sample_capacity", offset_of!(OutputPublish, sample_capacity)),
            ("buffer_capacity", offset_of!(OutputPublish, buffer_capacity)),
        ];
        let fields: Vec<&str> = rust.iter().map(|(f, _)| *f).collect();
        let ptx = crate::gpu::nvrtc::compile_ptx(
            "output_publish_offsets.cu",
            &offsets_source(&fields),
            "compute_90",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let cuda = crate::gpu::control::parse_ptx_offsets(&ptx).expect("constant offsets in the PTX");
        let rust: Vec<usize> = rust.iter().map(|(_, o)| *o).collect();
        assert_eq!(rust, cuda, "OutputPublish (Rust) against kernels/output_publish.cu, field by field");
    }
}
