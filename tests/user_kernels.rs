//! User CUDA kernels and handlers (`tests/fixtures/user_kernels/`,
//! `handlers/hsb_ready.cu`): NVRTC compiles the good ones against
//! `kernels/frameloop.cuh`, reports a planted syntax error with its file and
//! line and an entry that does not exist by name, the parameter layout agrees
//! with the C compiler's, the host backend refuses a chain with a user kernel
//! and the CUDA backend plans one as graph operators. Needs only libnvrtc,
//! no GPU; fails instead of skipping without it under FRAMELOOP_REQUIRE_NVRTC=1.
//! `validate_cli_reports_the_planted_error_with_its_line` needs `frameloop
//! validate` to call `gpu::user::source::check_user_code`.

use frameloop::config::{self, LoopConfig};
use frameloop::gpu::fused::{FusedChain, NotFused};
use frameloop::gpu::operators::{ChainLayout, build_main_fragment};
use frameloop::gpu::user::source::{EntryKind, UserCodeError, check_source, check_user_code, kernel_cubin};
use frameloop::gpu::{control, nvrtc, nvrtc_present};
use frameloop::host::{HostError, HostLoop};
use frameloop::ops::OpSpec;
use frameloop::ops::user_kernel::UserKernelSpec;
use frameloop::ring::layout::{result_ring_bytes, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy, ResultRing};
use std::path::{Path, PathBuf};
use std::process::Command;

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        return true;
    }
    let fix = "install it with `pip install nvidia-cuda-nvrtc==13.0.88` and put its \
               site-packages/nvidia/cu13/lib on LD_LIBRARY_PATH (`. scripts/env.sh`)";
    if std::env::var("FRAMELOOP_REQUIRE_NVRTC").as_deref() == Ok("1") {
        panic!("FRAMELOOP_REQUIRE_NVRTC=1 but libnvrtc.so.13 cannot be loaded: {fix}");
    }
    eprintln!("skipped: libnvrtc.so.13 cannot be loaded ({fix})");
    false
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/user_kernels").join(name)
}

fn check_file(path: &Path, entry: &str, kind: EntryKind) -> Vec<UserCodeError> {
    let text = std::fs::read_to_string(path).unwrap();
    check_source(&path.display().to_string(), &text, entry, kind)
}

#[test]
fn good_kernels_compile_and_join_the_cubin_cache() {
    if !nvrtc_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let compiler = nvrtc::Compiler::new("sm_90", nvrtc::CacheDir::At(dir.path().to_path_buf())).unwrap();
    for (file, entry) in [("gain_offset.cu", "gain_offset"), ("moving_sum.cu", "moving_sum")] {
        let path = fixture(file);
        let problems = check_file(&path, entry, EntryKind::Kernel);
        assert!(problems.is_empty(), "{file}: {problems:?}");
        let text = std::fs::read_to_string(&path).unwrap();
        let cubin = kernel_cubin(&compiler, file, &text, entry).unwrap_or_else(|e| panic!("{file}: {e:?}"));
        assert_eq!(&cubin[..4], b"\x7fELF");
        let wrong = kernel_cubin(&compiler, file, &text, "scale").unwrap_err();
        assert_eq!(wrong[0].key(), "entry", "{wrong:?}");
    }
    let cached = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cubin"))
        .count();
    assert_eq!(cached, 2, "both user kernels' cubins are cached");
}

#[test]
fn a_syntax_error_is_reported_with_file_and_line() {
    if !nvrtc_or_skip() {
        return;
    }
    let path = fixture("syntax_error.cu");
    let problems = check_file(&path, "broken", EntryKind::Kernel);
    assert_eq!(problems.len(), 1, "{problems:?}");
    match &problems[0] {
        UserCodeError::Compile { file, line, message } => {
            assert_eq!((file.as_str(), *line), (path.display().to_string().as_str(), 9));
            assert!(message.contains("expected a \")\""), "{message}");
        }
        other => panic!("not a compile error: {other}"),
    }
    assert!(
        problems[0].to_string().ends_with("syntax_error.cu(9): error: expected a \")\""),
        "{}",
        problems[0]
    );
}

#[test]
fn a_missing_entry_is_named() {
    if !nvrtc_or_skip() {
        return;
    }
    let problems = check_file(&fixture("missing_entry.cu"), "beamform", EntryKind::Kernel);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let text = problems[0].to_string();
    assert_eq!(problems[0].key(), "entry");
    assert!(
        text.contains("defines no extern \"C\" __global__ function \"beamform\" (it defines scale)"),
        "{text}"
    );
}

#[test]
fn a_wrong_signature_or_linkage_is_named() {
    if !nvrtc_or_skip() {
        return;
    }
    let wrong =
        "#include \"frameloop.cuh\"\nextern \"C\" __global__ void k(const float* in, float* out) {}\n";
    let p = check_source("wrong.cu", wrong, "k", EntryKind::Kernel);
    assert!(matches!(&p[..], [UserCodeError::WrongSignature { .. }]), "{p:?}");
    assert!(
        p[0].to_string().contains("declare it extern \"C\" __global__ void k(const fl_frame* frame"),
        "{}",
        p[0]
    );
    let mangled = "#include \"frameloop.cuh\"\n__global__ void k(const fl_frame* f, const float* in, float* out, \
                   const void* params, fl_user_result* user) {}\n";
    let p = check_source("mangled.cu", mangled, "k", EntryKind::Kernel);
    assert!(p[0].to_string().contains("without extern \"C\""), "{p:?}");
    let no_include = "extern \"C\" __global__ void k() {}\n";
    let p = check_source("bare.cu", no_include, "k", EntryKind::Kernel);
    assert!(matches!(&p[..], [UserCodeError::WrongSignature { .. }]), "{p:?}");
}

#[test]
fn the_hsb_handler_compiles_and_is_checked() {
    if !nvrtc_or_skip() {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("handlers/hsb_ready.cu");
    let problems = check_file(&path, "hsb_ready", EntryKind::Handler);
    assert!(problems.is_empty(), "{problems:?}");
    let missing = check_file(&path, "sensor_ready", EntryKind::Handler);
    assert!(
        missing[0].to_string().contains("defines no __device__ function \"sensor_ready\""),
        "{missing:?}"
    );
    // A kernel is not a handler.
    let kernel = check_file(&fixture("gain_offset.cu"), "gain_offset", EntryKind::Handler);
    assert!(matches!(&kernel[..], [UserCodeError::WrongSignature { .. }]), "{kernel:?}");
}

#[test]
fn the_abi_agrees_with_the_ring_layout() {
    if !nvrtc_or_skip() {
        return;
    }
    let check = "#include \"ring.cuh\"\n#include \"frameloop.cuh\"\n\
        static_assert(FL_FRAME_COMPLETE == FL_SLOT_COMPLETE && FL_FRAME_INCOMPLETE == FL_SLOT_INCOMPLETE \
                      && FL_FRAME_TIMED_OUT == FL_SLOT_TIMED_OUT, \"flags\");\n\
        static_assert(sizeof(((fl_user_result*)0)->words) == sizeof(((ResultRecord*)0)->user), \"user words fit the record\");\n\
        static_assert(sizeof(fl_user_result) == sizeof(((ResultRecord*)0)->user) + 4, \"then the actuation request\");\n\
        static_assert(FL_SLOT_META_WORDS * 4 == FL_SLOT_PAYLOAD_OFFSET, \"metadata is the slot header\");\n";
    nvrtc::compile_ptx("abi_check.cu", check, "compute_75").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_parameter_layout_is_the_c_compilers() {
    if !nvrtc_or_skip() {
        return;
    }
    let spec: UserKernelSpec = toml::from_str(
        "source = 'x.cu'\nentry = 'k'\nparams = { a = 1, b = 2, c = 3, d = 4, e = 5, f = 6, g = 7 }\n\
         param_types = ['a: f32', 'b: f64', 'c: i32', 'd: u64', 'e: u32', 'f: i64', 'g: f32']",
    )
    .unwrap();
    let layout = spec.layout().unwrap();
    // Offsets as the compiler computes them, read back from the PTX's constant stores.
    let mut src = format!(
        "#include \"frameloop.cuh\"\n{}static_assert(sizeof(P) == {}, \"size\");\n\
         extern \"C\" __global__ void fl_layout_offsets(const char* base, unsigned long long* out) {{\n",
        layout.c_struct("P"),
        layout.size
    );
    for (i, f) in layout.fields.iter().enumerate() {
        src.push_str(&format!(
            "  out[{i}] = (unsigned long long)((const char*)&((const P*)base)->{} - base);\n",
            f.name
        ));
    }
    src.push_str("}\n");
    let ptx = nvrtc::compile_ptx("layout.cu", &src, "compute_90").unwrap_or_else(|e| panic!("{src}\n{e}"));
    let got = control::parse_ptx_offsets(&ptx).expect("constant stores in the PTX");
    let want: Vec<usize> = layout.fields.iter().map(|f| f.offset).collect();
    assert_eq!(got, want, "{src}");
    assert_eq!(want, [0, 8, 16, 24, 32, 40, 48]);
    assert_eq!(spec.param_block().unwrap().len(), layout.size);
}

#[test]
fn check_user_code_reports_every_problem_of_a_config() {
    if !nvrtc_or_skip() {
        return;
    }
    let good = fixture("gain.toml");
    let cfg = config::load(&good).unwrap();
    assert_eq!(cfg.chain.iter().filter(|o| matches!(o, OpSpec::Kernel(_))).count(), 2);
    assert_eq!(check_user_code(&cfg, &good), vec![]);

    let broken = fixture("broken.toml");
    let cfg = config::load(&broken).unwrap();
    let problems = check_user_code(&cfg, &broken);
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["chain[1].source", "chain[2].entry"], "{problems:?}");
    assert!(problems[0].message.ends_with("syntax_error.cu(9): error: expected a \")\""), "{}", problems[0]);
    assert!(problems[1].message.contains("\"beamform\""), "{}", problems[1]);

    let mut cfg = config::load(&good).unwrap();
    let OpSpec::Kernel(k) = &mut cfg.chain[1] else { panic!() };
    k.source = "no_such_kernel.cu".into();
    let problems = check_user_code(&cfg, &good);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].key, "chain[1].source");
    assert!(problems[0].message.contains("no_such_kernel.cu"), "{}", problems[0]);

    let OpSpec::Kernel(k) = &mut cfg.chain[1] else { panic!() };
    k.source = "/dev/zero".into();
    let problems = check_user_code(&cfg, &good);
    assert!(problems[0].message.starts_with("/dev/zero is not a CUDA source"), "{problems:?}");
}

/// Passes once `frameloop validate` calls `gpu::user::source::check_user_code`.
#[test]
fn validate_cli_reports_the_planted_error_with_its_line() {
    if !nvrtc_or_skip() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["validate", "--config"])
        .arg(fixture("broken.toml"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "validate accepted a kernel that does not compile:\n{text}");
    assert!(text.contains("chain[1].source: "), "{text}");
    assert!(text.contains("syntax_error.cu(9): error: expected a \")\""), "{text}");
    assert!(text.contains("chain[2].entry: "), "{text}");
    let ok = Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["validate", "--config"])
        .arg(fixture("gain.toml"))
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

#[test]
fn the_host_backend_refuses_a_user_kernel() {
    let cfg = config::load(&fixture("gain.toml")).unwrap();
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(4, 4096).unwrap()).unwrap()),
        4,
        4096,
        OverrunPolicy::Every,
    )
    .unwrap();
    let results =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(16).unwrap()).unwrap()), 16).unwrap();
    let err = HostLoop::new(frames, results, cfg.chain, 4096, LoopConfig::default()).err().expect("refused");
    assert!(matches!(err, HostError::Chain(_)));
    assert!(
        err.to_string().contains(
            "chain[1] (kernel \"gain_offset\"): user kernels run only on the CUDA backend; use backend = \"cuda\" on a machine with a GPU"
        ),
        "{err}"
    );
}

#[test]
fn config_lists_every_parameter_problem_at_once() {
    let text = r#"
        [[chain]]
        op = "unpack"
        format = "u8"
        [[chain]]
        op = "stats"
        [[chain]]
        op = "kernel"
        source = "beamform.cu"
        entry = "beamform"
        params = { gain = 1e40, channels = 64.5, extra = 1 }
        param_types = ["gain: f32", "channels: u32", "taps: u16"]
        threads = 4096
    "#;
    let err = config::parse(text).unwrap_err();
    let messages: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    for want in ["chain[2].param_types[2]: unknown type \"u16\"", "chain[2].threads: 4096 is out of range"] {
        assert!(messages.iter().any(|m| m.contains(want)), "no {want:?} in {messages:#?}");
    }
    let text = text.replace("\"taps: u16\"", "\"taps: u32\"");
    let err = config::parse(&text).unwrap_err();
    let messages: Vec<String> = err.problems().iter().map(|p| p.to_string()).collect();
    for want in [
        "chain[2].params.gain: 1e40 is not a finite f32",
        "chain[2].params.channels: 64.5 is a float but the parameter is u32",
        "chain[2].params.taps: missing",
        "chain[2].params.extra: not declared in param_types",
        "chain[2].threads: 4096 is out of range",
    ] {
        assert!(messages.iter().any(|m| m.contains(want)), "no {want:?} in {messages:#?}");
    }
    let err = config::parse(&text.replace("1e40", "\"loud\"")).unwrap_err();
    let want = "chain[2].params.gain: is the string \"loud\"; write a number (the parameter is f32)";
    assert!(err.problems().iter().any(|p| p.message == want), "{err}");
}

#[test]
fn the_cuda_backend_builds_user_kernels_as_graph_operators() {
    let cfg = config::load(&fixture("gain.toml")).unwrap();
    let fused = FusedChain::encode(&cfg.chain, 4096).unwrap_err();
    assert_eq!(fused, NotFused::UserKernel("gain_offset".into()));
    let fragment = build_main_fragment(&cfg.chain, 4096, ChainLayout::default()).unwrap();
    let plan = fragment.plan().unwrap();
    let names: Vec<&str> = plan.order().iter().map(|&id| fragment.operator_name(id).unwrap()).collect();
    assert_eq!(
        names,
        ["unpack[0]", "chain[1] kernel \"gain_offset\"", "chain[2] kernel \"moving_sum\"", "stats[3]"]
    );
    assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
    // Three sample buffers (unpack -> gain_offset -> moving_sum -> stats) and
    // each user kernel's own frame port: its 64-byte fl_frame, then the
    // entry kernel's block ticket on 64 bytes of its own.
    let mut sizes: Vec<usize> = plan.buffers().iter().map(|b| b.bytes).collect();
    sizes.sort();
    assert_eq!(sizes, [128, 128, 2048 * 4, 2048 * 4, 2048 * 4]);
}
