//! `kernels/output_ring.cuh` agrees with `src/output/layout.rs`: a program of
//! `static_assert`s generated from the Rust sizes, offsets and constants must
//! compile with NVRTC (no GPU needed; skipped where NVRTC cannot be loaded).

use frameloop::gpu::{control, nvrtc, nvrtc_present};
use frameloop::output::layout::*;
use std::mem::{offset_of, size_of};

const HEADER: &str = include_str!("../kernels/output_ring.cuh");

fn facts() -> Vec<(&'static str, usize)> {
    vec![
        ("sizeof(OutputControlHeader)", size_of::<ControlHeader>()),
        ("sizeof(OutputConsumerWord)", size_of::<ConsumerWord>()),
        ("offsetof(OutputControlHeader, slot_stride)", offset_of!(ControlHeader, slot_stride)),
        ("offsetof(OutputControlHeader, sample_capacity)", offset_of!(ControlHeader, sample_capacity)),
        ("offsetof(OutputControlHeader, memory_kind)", offset_of!(ControlHeader, memory_kind)),
        ("offsetof(OutputControlHeader, device_ordinal)", offset_of!(ControlHeader, device_ordinal)),
        ("offsetof(OutputControlHeader, consumers_offset)", offset_of!(ControlHeader, consumers_offset)),
        ("offsetof(OutputControlHeader, data_bytes)", offset_of!(ControlHeader, data_bytes)),
        ("offsetof(OutputControlHeader, heads_offset)", offset_of!(ControlHeader, heads_offset)),
        ("offsetof(OutputControlHeader, head_seq)", offset_of!(ControlHeader, head_seq)),
        ("offsetof(OutputConsumerWord, last_read_seq)", offset_of!(ConsumerWord, last_read_seq)),
        ("offsetof(OutputSlotHead, user)", SLOT_USER_OFFSET),
        ("sizeof(OutputSlotHead)", size_of::<SlotHead>()),
        ("FL_OUT_SLOT_HEAD_BYTES", SLOT_HEAD_BYTES),
        ("FL_OUTPUT_MAGIC", OUTPUT_MAGIC as usize),
        ("FL_OUTPUT_LAYOUT_VERSION", OUTPUT_LAYOUT_VERSION as usize),
        ("FL_OUT_SLOT_SEQS_OFFSET", SLOT_SEQS_OFFSET),
        ("FL_OUT_MAX_CONSUMERS", MAX_CONSUMERS),
        ("FL_OUT_SLOT_USER_OFFSET", SLOT_USER_OFFSET),
        ("FL_OUT_USER_RESULT_WORDS", USER_RESULT_WORDS),
        ("FL_OUT_SLOT_SAMPLES_OFFSET", SLOT_SAMPLES_OFFSET),
        ("FL_OUT_SLOT_ALIGN", OUTPUT_SLOT_ALIGN),
        ("FL_OUT_MEMORY_HOST_MEMFD", MemoryKind::HostMemfd as usize),
        ("FL_OUT_MEMORY_CUDA_DEVICE", MemoryKind::CudaDevice as usize),
    ]
}

/// The header and the checks: sizes and constants by `static_assert`,
/// offsets stored as constants by the kernel `fl_layout_offsets` and read
/// back from its PTX (NVRTC has no constant-expression `offsetof`).
fn check_source(facts: &[(&str, usize)]) -> String {
    let mut s = format!(
        "{HEADER}\n#define FL_OFF(T, f) ((unsigned long long)((const char*)&((const T*)base)->f - (const char*)base))\n"
    );
    let mut stores = String::new();
    for (what, value) in facts {
        match what.strip_prefix("offsetof(").and_then(|r| r.strip_suffix(')')) {
            Some(args) => stores.push_str(&format!("  out[{}] = FL_OFF({args});\n", stores.lines().count())),
            None => s.push_str(&format!("static_assert(({what}) == {value}ull, \"{what}\");\n")),
        }
    }
    s.push_str(
        "extern \"C\" __global__ void fl_layout_offsets(const char* base, unsigned long long* out) {\n",
    );
    s.push_str(&stores);
    s.push_str("}\n");
    s
}

/// The header's publish helpers, used by a kernel.
fn publish_source() -> String {
    format!(
        "{HEADER}\nextern \"C\" __global__ void fl_output_publish_check(OutputControlHeader* ctl, char* slots, uint64_t seq) {{\n\
         fl_output_begin(ctl, 8u, seq);\n\
         reinterpret_cast<OutputSlotHead*>(fl_output_slot(slots, 8u, 512u, seq))->user[0] = 1u;\n\
         fl_output_end(ctl, 8u, seq);\n}}\n"
    )
}

#[test]
fn output_ring_cuh_matches_the_rust_layout_and_a_wrong_fact_is_caught() {
    if !nvrtc_present() {
        eprintln!("skipped: libnvrtc.so.13 is not on the loader path (source scripts/env.sh)");
        return;
    }
    let facts = facts();
    let ptx = nvrtc::compile_ptx("output_layout.cu", &check_source(&facts), "compute_90")
        .unwrap_or_else(|e| panic!("a size or constant differs: {e}"));
    let offsets = control::parse_ptx_offsets(&ptx).expect("constant offsets in the PTX");
    let want: Vec<_> = facts.iter().filter(|(what, _)| what.starts_with("offsetof(")).collect();
    assert_eq!(offsets.len(), want.len());
    for ((what, rust), cuda) in want.iter().zip(&offsets) {
        assert_eq!(rust, cuda, "{what}: Rust {rust}, output_ring.cuh {cuda}");
    }
    nvrtc::compile("output_publish.cu", &publish_source(), "sm_90")
        .unwrap_or_else(|e| panic!("the publish helpers do not compile: {e}"));
    let mut wrong = facts;
    wrong[0].1 += 64;
    let err = nvrtc::compile("output_layout_bad.cu", &check_source(&wrong), "sm_90")
        .expect_err("a wrong size must not compile");
    assert!(err.to_string().contains("sizeof(OutputControlHeader)"), "{err}");
}
