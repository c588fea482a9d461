//! Every embedded CUDA source compiles through NVRTC, and `handlers/ring.cuh`
//! agrees with the Rust layouts (a program of `static_assert`s generated from
//! the Rust sizes and offsets must compile). Needs only libnvrtc, no GPU; the
//! tests skip with a message where NVRTC cannot be loaded, and fail instead
//! when FRAMELOOP_REQUIRE_NVRTC=1 (as scripts/env.sh sets it for CI).

use frameloop::gpu::{control, nvrtc, nvrtc_present, sources};

/// Architectures the kernels must build for (Turing, the oldest CUDA 13 supports, to Hopper).
const ARCHES: &[&str] = &["sm_75", "sm_80", "sm_90"];

/// True when NVRTC loads; false (the test skips) when it does not, unless
/// FRAMELOOP_REQUIRE_NVRTC=1, where a missing NVRTC fails the test.
fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        return true;
    }
    let fix = "run scripts/setup.sh (it installs the nvidia-cuda-nvrtc wheel) and source scripts/env.sh \
               (it puts libnvrtc on LD_LIBRARY_PATH)";
    if std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!("FRAMELOOP_REQUIRE_NVRTC=1 but libnvrtc.so.13 cannot be loaded: {fix}");
    }
    eprintln!("skipped: libnvrtc.so.13 is not on the loader path ({fix})");
    false
}

#[test]
fn every_source_compiles_for_every_arch() {
    if !nvrtc_or_skip() {
        return;
    }
    let mut compiled = 0;
    for arch in ARCHES {
        for (file, source) in sources::all_sources() {
            let cubin =
                nvrtc::compile(file, source, arch).unwrap_or_else(|e| panic!("{file} for {arch}: {e}"));
            assert_eq!(&cubin[..4], b"\x7fELF", "{file} for {arch} is not a cubin");
            compiled += 1;
        }
    }
    assert!(compiled >= 2 * ARCHES.len());
}

#[test]
fn ring_cuh_matches_the_rust_layout() {
    if !nvrtc_or_skip() {
        return;
    }
    let source = control::layout_check_source();
    assert!(source.matches("static_assert").count() >= 20, "too few sizes and constants checked");
    let ptx = nvrtc::compile_ptx("layout_check.cu", &source, "compute_90")
        .unwrap_or_else(|e| panic!("a size or constant differs: {e}"));
    let got = control::parse_ptx_offsets(&ptx).expect("constant stores of fl_layout_offsets in the PTX");
    let want = control::expected_offsets();
    assert!(want.len() > 80, "too few offsets checked");
    assert_eq!(got.len(), want.len());
    for ((what, rust), cuda) in want.iter().zip(&got) {
        assert_eq!(rust, cuda, "{what}: Rust {rust}, ring.cuh {cuda}");
    }
}

#[test]
fn a_wrong_layout_fact_is_caught() {
    if !nvrtc_or_skip() {
        return;
    }
    let bad = "#include \"ring.cuh\"\nstatic_assert(sizeof(ResultRecord) == 200, \"ResultRecord size\");\n";
    let err = nvrtc::compile("layout_bad.cu", bad, "sm_90").expect_err("a wrong size must not compile");
    assert!(err.to_string().contains("ResultRecord size"), "{err}");
    let ptx = "mov.u64 %rd3, 0;\nst.global.u64 [%rd2], %rd3;\nmov.u64 %rd4, 64;\n\
               st.global.u64 [%rd2+16], %rd4;\nst.global.u64 [%rd2+8], %rd3;\n";
    assert_eq!(control::parse_ptx_offsets(ptx), Some(vec![0, 0, 64]));
    assert_eq!(control::parse_ptx_offsets("st.global.u64 [%rd2], %rd9;"), None);
}

#[test]
fn cubin_cache_round_trips() {
    if !nvrtc_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = nvrtc::Compiler::new("sm_90", nvrtc::CacheDir::At(dir.path().to_path_buf())).unwrap();
    let (file, source) = sources::HANDLER_SOURCES[0];
    let path = c.cache_path(file, source).unwrap();
    assert!(!path.exists());
    let first = c.cubin(file, source).unwrap();
    assert!(path.exists(), "cubin was not cached at {}", path.display());
    std::fs::write(&path, b"not a cubin").unwrap();
    let again = c.cubin(file, source).unwrap();
    assert_eq!(first.len(), again.len(), "a corrupt cache entry must be recompiled");
    let other = c.cache_path(file, &format!("{source}\n// changed")).unwrap();
    assert_ne!(path, other, "the key must depend on the source");
}

#[test]
fn reduce_scratch_and_constants_match_the_rust_side() {
    if !nvrtc_or_skip() {
        return;
    }
    use frameloop::gpu::operators::{
        REDUCE_BLOCK_SAMPLES, REDUCE_MAX_BLOCKS, REDUCE_ONE_BLOCK_SAMPLES, REDUCE_SCRATCH_BYTES,
        REDUCE_THREADS,
    };
    let facts = |scratch: usize| {
        format!(
            "#include \"reduce.cuh\"\n\
             static_assert(sizeof(FlReduceScratch) == {scratch}, \"FlReduceScratch size\");\n\
             static_assert(FL_REDUCE_THREADS == {REDUCE_THREADS}, \"FL_REDUCE_THREADS\");\n\
             static_assert(FL_REDUCE_BLOCK_SAMPLES == {REDUCE_BLOCK_SAMPLES}, \"FL_REDUCE_BLOCK_SAMPLES\");\n\
             static_assert(FL_REDUCE_ONE_BLOCK_SAMPLES == {REDUCE_ONE_BLOCK_SAMPLES}u, \"FL_REDUCE_ONE_BLOCK_SAMPLES\");\n\
             static_assert(FL_REDUCE_MAX_BLOCKS == {REDUCE_MAX_BLOCKS}u, \"FL_REDUCE_MAX_BLOCKS\");\n"
        )
    };
    nvrtc::compile("reduce_layout.cu", &facts(REDUCE_SCRATCH_BYTES), "sm_90")
        .unwrap_or_else(|e| panic!("reduce.cuh and src/gpu/operators/reduce.rs disagree: {e}"));
    let err = nvrtc::compile("reduce_layout_bad.cu", &facts(REDUCE_SCRATCH_BYTES - 8), "sm_90")
        .expect_err("a wrong scratch size must not compile");
    assert!(err.to_string().contains("FlReduceScratch size"), "{err}");
}

/// The embedded text of kernels/fused_tiled.cu.
fn tiled_source() -> &'static str {
    sources::OPERATOR_SOURCES
        .iter()
        .find(|(name, _)| *name == "fused_tiled.cu")
        .map(|(_, text)| *text)
        .expect("fused_tiled.cu is embedded")
}

#[test]
fn phase_mark_words_match_the_tiled_kernel() {
    if !nvrtc_or_skip() {
        return;
    }
    use frameloop::gpu::test_rings::{PHASE_MARKS, PhaseMark, SLOT_BYTES_MARK, SM_CLOCK_MARK};
    let tiled = tiled_source();
    let facts = |marks: &[PhaseMark]| {
        let mut text = tiled.to_string();
        for m in marks {
            text.push_str(&format!("\nstatic_assert({} == {}, \"{}\");", m.define, m.word, m.define));
        }
        text
    };
    let all: Vec<PhaseMark> = PHASE_MARKS.iter().copied().chain([SLOT_BYTES_MARK, SM_CLOCK_MARK]).collect();
    nvrtc::compile("phase_marks.cu", &facts(&all), "sm_90").unwrap_or_else(|e| {
        panic!("src/gpu/test_rings.rs and kernels/fused_tiled.cu disagree on a mark: {e}")
    });
    let wrong = PhaseMark { word: SM_CLOCK_MARK.word + 1, ..SM_CLOCK_MARK };
    let err = nvrtc::compile("phase_marks_bad.cu", &facts(&[wrong]), "sm_90")
        .expect_err("a wrong mark word must not compile");
    assert!(err.to_string().contains("FL_MARK_SM_CLOCK_MHZ"), "{err}");
}

/// The claimed frame the tiled kernel's block 0 hands to the other blocks
/// (`FlTiledClaim::handed`, kernels/fused_tiled.cu) packs verdict, bank,
/// payload length, sequence and pulled words into two tagged words: every
/// field must come back out as it went in, at its limits, and the sequence
/// must be rebuilt from any claim up to 2^28 frames before it.
#[test]
fn handed_claim_words_round_trip() {
    if !nvrtc_or_skip() {
        return;
    }
    let tiled = tiled_source();
    const SEQ_SPAN: u64 = 1 << 28;
    // (tag, verdict, bank, detect ns, payload length, sequence, pulled words)
    let mut cases: Vec<(u32, u32, u32, u64, u32, u64, u64)> = vec![
        (0, 0, 0, 0, 0, 1, 0),
        (255, 2, 1, u64::MAX, 1 << 30, u64::MAX - 7, (1 << 26) - 1),
        (0x1ff, 1, 1, 123_456_789, 786_432, SEQ_SPAN, 49_152),
        (1, 1, 0, 15, 8192, SEQ_SPAN - 1, 512),
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..12 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let tag = (x >> 40) as u32 & 0x3ff;
        let len = (x >> 8) as u32 & ((1 << 30) - 1);
        cases.push((
            tag,
            (x % 3) as u32,
            (x >> 3) as u32 & 1,
            x >> 5,
            len,
            x >> 1,
            (x >> 20) & ((1 << 26) - 1),
        ));
    }
    let mut text = tiled.to_string();
    let mut n = 0;
    for (i, &(tag, verdict, bank, detect, len, seq, pulled)) in cases.iter().enumerate() {
        let h = format!(
            "fl_handed_make({tag}u, {verdict}u, {bank}u, {detect}ull, {len}u, {seq}ull, {pulled}ull)"
        );
        let mut check = |expr: String, want: String| {
            text.push_str(&format!("\nstatic_assert({expr} == {want}, \"case {i}: {expr}\");"));
            n += 1;
        };
        check(format!("{h}.tag0()"), format!("{}u", tag & 0xff));
        check(format!("{h}.tag1()"), format!("{}u", tag & 0xff));
        check(format!("{h}.verdict()"), format!("{verdict}u"));
        check(format!("{h}.bank()"), format!("{bank}u"));
        check(format!("{h}.detect_units()"), format!("{}u", (detect / 16) & 0xffff));
        check(format!("{h}.payload_len()"), format!("{len}u"));
        check(format!("{h}.pulled_words()"), format!("{pulled}ull"));
        for back in [0, 1, 5, SEQ_SPAN - 1] {
            check(format!("fl_handed_seq({h}, {}ull)", seq.wrapping_sub(back)), format!("{seq}ull"));
        }
    }
    assert!(n > 100, "too few facts checked");
    nvrtc::compile("handed.cu", &text, "sm_90")
        .unwrap_or_else(|e| panic!("the handed claim words lost a field: {e}"));
    // A wrong fact must fail to compile, or the checks above prove nothing.
    let wrong = format!(
        "{tiled}\nstatic_assert(fl_handed_make(3u, 1u, 0u, 0ull, 10u, 42ull, 0ull).payload_len() == 11u, \"wrong\");"
    );
    assert!(nvrtc::compile("handed_bad.cu", &wrong, "sm_90").is_err(), "a false static_assert compiled");
}

#[test]
fn the_actuation_former_compiles_for_every_arch() {
    if !nvrtc_or_skip() {
        return;
    }
    let probe = "#include \"actuation.cuh\"\n\
                 extern \"C\" __global__ void fl_actuate_probe(TxState* tx, const ResultRecord* r, \
                 const float* samples, uint32_t n) {\n\
                   if (blockIdx.x == 0 && threadIdx.x == 0) fl_actuate(tx, *r, samples, n);\n\
                 }\n";
    for arch in ARCHES {
        let cubin = nvrtc::compile("actuation_probe.cu", probe, arch)
            .unwrap_or_else(|e| panic!("actuation.cuh for {arch}: {e}"));
        assert_eq!(&cubin[..4], b"\x7fELF");
    }
}
