//! Rust operators in the appliance's chain through the public API, without
//! a GPU: a position that is not in the configured chain and the host
//! backend are refused by `Appliance::builder(..).start()` naming the
//! operator; ports that do not connect are refused when the chain is built;
//! `samples_after` sizes the ports so that they connect.

mod appliance_support;

use appliance_support::{host_config, one_at_a_time};
use frameloop::app::{AppError, Appliance};
use frameloop::backend::Backend;
use frameloop::config::FusedChainMode;
use frameloop::gpu::chain_builder::UserOperators;
use frameloop::gpu::{
    ChainBuilderError, ComputeContext, FragmentError, GpuResidentOperator, OperatorPosition, OperatorSpec,
    PortMemory, samples_after,
};
use frameloop::ops::{OpSpec, default_chain};

/// Declares `in` and `out` of `bytes` each; never runs here.
struct Gain {
    name: &'static str,
    bytes: usize,
}

impl GpuResidentOperator for Gain {
    fn name(&self) -> &str {
        self.name
    }
    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(self.bytes)).output("out", PortMemory::Size(self.bytes));
    }
    fn compute(&mut self, _ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        panic!("{} is never enqueued without a GPU", self.name)
    }
}

fn gain(bytes: usize) -> Gain {
    Gain { name: "gain", bytes }
}

fn start_error(position: OperatorPosition) -> ChainBuilderError {
    let cfg = host_config(default_chain());
    match Appliance::builder(&cfg).operator(position, gain(4)).start() {
        Ok(app) => {
            let _ = app.stop();
            panic!("an appliance with a Rust operator started on the host backend")
        }
        Err(AppError::Operators(e)) => e,
        Err(other) => panic!("not an operator error: {other}"),
    }
}

#[test]
fn a_position_outside_the_configured_chain_is_refused_naming_the_operator() {
    let err = start_error(OperatorPosition::After("fft".into()));
    assert!(
        matches!(&err, ChainBuilderError::NoSuchEntry { operator, name, .. } if operator == "gain" && name == "fft")
    );
    let text = err.to_string();
    assert!(text.contains("\"gain\"") && text.contains("unpack, fir, stats, threshold"), "{text}");

    let len = default_chain().len();
    let err = start_error(OperatorPosition::AfterIndex(len));
    assert!(
        matches!(&err, ChainBuilderError::IndexOutOfRange { operator, index, len: l } if operator == "gain" && *index == len && *l == len),
        "{err}"
    );
}

#[test]
fn the_host_backend_refuses_rust_operators_naming_them() {
    let err = start_error(OperatorPosition::After("fir".into()));
    assert!(matches!(&err, ChainBuilderError::HostBackend { operator } if operator == "gain"), "{err}");
    assert!(err.to_string().contains("backend = \"cuda\""), "{err}");

    // The same config starts without the operator.
    let _serial = one_at_a_time();
    let cfg = host_config(default_chain());
    let app = Appliance::builder(&cfg).start().expect("the host appliance starts without Rust operators");
    assert_eq!(app.backend().name(), "host");
    app.stop().expect("it stops");
}

#[test]
fn a_fused_chain_cannot_take_rust_operators() {
    let mut ops = UserOperators::default();
    ops.push(OperatorPosition::End, Box::new(gain(4)));
    ops.check(&default_chain(), Backend::Cuda, FusedChainMode::Auto).expect("auto falls back to the IF body");
    let err = ops.check(&default_chain(), Backend::Cuda, FusedChainMode::On).unwrap_err();
    assert!(matches!(&err, ChainBuilderError::FusedChain { operators } if operators == "\"gain\""), "{err}");
}

#[test]
fn ports_sized_by_samples_after_connect_and_others_are_refused() {
    let chain = default_chain();
    let slot_bytes = 8192;
    let at = OperatorPosition::After("fir".into());
    let OpSpec::Unpack { format, .. } = chain[0] else { panic!("unpack first") };
    let samples = samples_after(&chain, slot_bytes, &at, "gain").unwrap();
    assert_eq!(samples, format.samples_in(slot_bytes), "the FIR keeps the unpacked sample count");

    let mut ops = UserOperators::default();
    ops.push(at.clone(), Box::new(gain(samples * 4)));
    let built = ops.into_chain(&chain, slot_bytes).expect("ports of the chain's size connect");
    assert_eq!(built.operators(), "\"gain\"");

    let mut ops = UserOperators::default();
    ops.push(at, Box::new(gain(samples * 4 + 4)));
    let err = ops.into_chain(&chain, slot_bytes).err().expect("a port of another size does not connect");
    let ChainBuilderError::Ports { operator, place, source } = &err else { panic!("{err}") };
    assert_eq!((operator.as_str(), place.as_str()), ("gain", "after chain[1] (fir)"));
    assert!(matches!(**source, FragmentError::SizeMismatch { .. }), "{source}");
    assert!(err.to_string().contains("samples_after"), "{err}");
}
