//! Rust user operators in the configured chain: where each goes (after a
//! named or indexed chain entry, or at the end), the main fragment built
//! with them inserted, and the errors a user sees when one does not fit.

use thiserror::Error;

use super::operators::{ChainLayout, PayloadPath, build_main_fragment_around};
use crate::backend::Backend;
use crate::config::FusedChainMode;
use crate::fragment::{ComputeContext, Fragment, FragmentError, GpuResidentOperator, OperatorSpec};
use crate::ops::OpSpec;

/// Where a user operator is inserted in the main fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorPosition {
    /// After the first chain entry of this kind (`"fir"`, `"stats"`).
    After(String),
    /// After the chain entry at this index (`chain[1]`).
    AfterIndex(usize),
    /// After the last configured entry.
    End,
}

/// Why user operators cannot be added to the chain.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ChainBuilderError {
    /// The position names no entry of the configured chain; name one (the message lists them) or
    /// use the end.
    #[error(
        "operator \"{operator}\" goes after \"{name}\", but the configured chain has no such entry \
         (it has: {chain}); name an entry of `chain` in the config or use the end position"
    )]
    NoSuchEntry { operator: String, name: String, chain: String },
    /// The position's index is past the configured chain; use an index below its length.
    #[error(
        "operator \"{operator}\" goes after chain[{index}], but the configured chain has {len} entries; \
         use an index below {len}"
    )]
    IndexOutOfRange { operator: String, index: usize, len: usize },
    /// A Rust GPU operator on the host backend; set `backend = "cuda"`.
    #[error(
        "operator \"{operator}\" is a Rust GPU operator and runs only on the CUDA backend; \
         set `backend = \"cuda\"` in the config (the host backend was picked)"
    )]
    HostBackend { operator: String },
    /// `loop.fused_chain = "on"` with Rust operators; set it to `"auto"` or `"off"`.
    #[error(
        "loop.fused_chain = \"on\" but the Rust operators {operators} run one kernel per operator; \
         set loop.fused_chain to \"auto\" or \"off\""
    )]
    FusedChain { operators: String },
    /// A Rust operator's ports do not fit the chain; declare `in` and `out` of the chain's sample
    /// buffer size.
    #[error(
        "operator \"{operator}\" does not connect {place}: {source}; a Rust operator takes the chain's \
         samples on an input port \"in\" and passes them on from an output port \"out\", both of the \
         chain's sample buffer size there (see gpu::chain_builder::samples_after)"
    )]
    Ports {
        operator: String,
        place: String,
        #[source]
        source: Box<FragmentError>,
    },
    /// The configured chain cannot be built (the source says why and how to fix it).
    #[error("the configured chain cannot be built: {0}")]
    Chain(#[source] Box<FragmentError>),
}

impl From<FragmentError> for ChainBuilderError {
    fn from(e: FragmentError) -> Self {
        ChainBuilderError::Chain(Box::new(e))
    }
}

/// User operators in insertion order, each with its position, until
/// [`UserOperators::into_chain`] puts them into the main fragment.
#[derive(Default)]
pub struct UserOperators {
    entries: Vec<(OperatorPosition, Box<dyn GpuResidentOperator>)>,
}

impl UserOperators {
    /// Adds `operator` at `position`; operators at the same position run in
    /// the order they were added.
    pub fn push(&mut self, position: OperatorPosition, operator: Box<dyn GpuResidentOperator>) {
        self.entries.push((position, operator));
    }

    /// True when no user operator was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The operators' names, for logs and errors.
    fn names(&self) -> String {
        self.entries.iter().map(|(_, op)| format!("\"{}\"", op.name())).collect::<Vec<_>>().join(", ")
    }

    /// Checks, before anything is allocated, that every position exists in
    /// `chain`, that the picked `backend` is CUDA and that the chain is not
    /// required to run fused; the first problem names its operator.
    pub fn check(
        &self,
        chain: &[OpSpec],
        backend: Backend,
        fused: FusedChainMode,
    ) -> Result<(), ChainBuilderError> {
        for (position, op) in &self.entries {
            resolve_position(chain, position, op.name())?;
        }
        match self.entries.first() {
            None => Ok(()),
            Some((_, op)) if backend != Backend::Cuda => {
                Err(ChainBuilderError::HostBackend { operator: op.name().to_string() })
            }
            Some(_) if fused == FusedChainMode::On => {
                Err(ChainBuilderError::FusedChain { operators: self.names() })
            }
            Some(_) => Ok(()),
        }
    }

    /// Builds the main fragment of `chain` for frames of at most
    /// `payload_capacity` bytes with every user operator inserted, linked
    /// `out -> in` like the built-in operators, and planned (so that ports
    /// that do not connect are refused here, naming the operator).
    pub fn into_chain(
        self,
        chain: &[OpSpec],
        payload_capacity: usize,
    ) -> Result<UserChain, ChainBuilderError> {
        let operators = self.names();
        let mut placed = Vec::with_capacity(self.entries.len());
        for (position, op) in self.entries {
            let after = resolve_position(chain, &position, op.name())?;
            placed.push((after, Some(op)));
        }
        let split_after: Vec<usize> = placed.iter().map(|(after, _)| *after).collect();
        let mut places = Vec::with_capacity(placed.len());
        let built = build_main_fragment_around(
            chain,
            payload_capacity,
            ChainLayout::default(),
            PayloadPath::default(),
            &split_after,
            |point, fragment| {
                let mut tail = point.tail;
                for (after, slot) in placed.iter_mut().filter(|(after, _)| *after == point.index) {
                    let Some(op) = slot.take() else { continue };
                    let operator = op.name().to_string();
                    let place = describe_place(chain, *after);
                    places.push((operator.clone(), place.clone()));
                    let ports = |source| ChainBuilderError::Ports {
                        operator: operator.clone(),
                        place: place.clone(),
                        source: Box::new(source),
                    };
                    let id = fragment.add_operator(BoxedOperator(op)).map_err(ports)?;
                    fragment.add_flow(tail, "out", id, "in").map_err(ports)?;
                    tail = id;
                }
                Ok::<_, ChainBuilderError>(tail)
            },
        );
        // The link from a user operator to the next built-in one is made
        // while building, the memory of every link while planning.
        let source = match built.map(|f| f.plan().map(|_| f)) {
            Ok(Ok(fragment)) => {
                debug_assert!(placed.iter().all(|(_, op)| op.is_none()), "every position is in the chain");
                return Ok(UserChain { fragment, payload_capacity, operators });
            }
            Ok(Err(source)) => Box::new(source),
            Err(ChainBuilderError::Chain(source)) => source,
            Err(other) => return Err(other),
        };
        let involved = involved_operators(&source);
        Err(match places.into_iter().find(|(name, _)| involved.contains(&name.as_str())) {
            Some((operator, place)) => ChainBuilderError::Ports { operator, place, source },
            None => ChainBuilderError::Chain(source),
        })
    }
}

/// The main fragment of a configured chain with Rust user operators in it,
/// ready for the CUDA loop (it never runs fused).
pub struct UserChain {
    fragment: Fragment,
    /// The frame size the fragment's buffers were sized for.
    payload_capacity: usize,
    /// The user operators' names, for logs.
    operators: String,
}

impl UserChain {
    /// The user operators' names, for logs.
    pub fn operators(&self) -> &str {
        &self.operators
    }

    /// The fragment, for a frame ring of `payload_capacity` bytes a slot
    /// (the size it was built for; anything else is refused).
    pub(crate) fn into_fragment(self, payload_capacity: usize) -> Result<Fragment, super::GpuError> {
        if payload_capacity != self.payload_capacity {
            return Err(super::GpuError::Setup(format!(
                "the chain with the operators {} was built for {}-byte frames but the frame ring holds \
                 {payload_capacity} bytes a slot; build it with ring.slot_bytes",
                self.operators, self.payload_capacity
            )));
        }
        Ok(self.fragment)
    }
}

/// Samples the chain's buffer holds at `position` (the size in f32s of the
/// `in` and `out` ports of an operator inserted there) for frames of at most
/// `payload_capacity` bytes (`ring.slot_bytes`); `operator` names the
/// operator to be sized in errors.
pub fn samples_after(
    chain: &[OpSpec],
    payload_capacity: usize,
    position: &OperatorPosition,
    operator: &str,
) -> Result<usize, ChainBuilderError> {
    let after = resolve_position(chain, position, operator)?;
    let mut samples = 0;
    build_main_fragment_around(
        chain,
        payload_capacity,
        ChainLayout::default(),
        PayloadPath::default(),
        &[after],
        |point, _| {
            if point.index == after {
                samples = point.samples;
            }
            Ok::<_, ChainBuilderError>(point.tail)
        },
    )?;
    Ok(samples)
}

/// "after chain[1] (fir)", for errors.
fn describe_place(chain: &[OpSpec], after: usize) -> String {
    match chain.get(after) {
        Some(op) => format!("after chain[{after}] ({})", op.name()),
        None => format!("after chain[{after}]"),
    }
}

/// The operators a planning error names.
fn involved_operators(e: &FragmentError) -> Vec<&str> {
    match e {
        FragmentError::SizeMismatch { from, to, .. } | FragmentError::NoMemory { from, to, .. } => {
            vec![from, to]
        }
        FragmentError::UnconnectedPortWithoutMemory { operator, .. }
        | FragmentError::UnknownPort { operator, .. }
        | FragmentError::PortAlreadyConnected { operator, .. }
        | FragmentError::FanOut { operator, .. }
        | FragmentError::FanIn { operator, .. } => vec![operator],
        _ => Vec::new(),
    }
}

/// A boxed user operator as a fragment operator.
struct BoxedOperator(Box<dyn GpuResidentOperator>);

impl GpuResidentOperator for BoxedOperator {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn setup(&mut self, spec: &mut OperatorSpec) {
        self.0.setup(spec)
    }
    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        self.0.compute(ctx)
    }
}

/// The chain index after which an operator named `operator` goes.
fn resolve_position(
    chain: &[OpSpec],
    position: &OperatorPosition,
    operator: &str,
) -> Result<usize, ChainBuilderError> {
    match position {
        OperatorPosition::End if !chain.is_empty() => Ok(chain.len() - 1),
        OperatorPosition::End => {
            Err(ChainBuilderError::IndexOutOfRange { operator: operator.to_string(), index: 0, len: 0 })
        }
        OperatorPosition::AfterIndex(index) if *index < chain.len() => Ok(*index),
        OperatorPosition::AfterIndex(index) => Err(ChainBuilderError::IndexOutOfRange {
            operator: operator.to_string(),
            index: *index,
            len: chain.len(),
        }),
        OperatorPosition::After(name) => {
            chain.iter().position(|op| op.name() == name).ok_or_else(|| ChainBuilderError::NoSuchEntry {
                operator: operator.to_string(),
                name: name.clone(),
                chain: chain.iter().map(OpSpec::name).collect::<Vec<_>>().join(", "),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::{PortDirection, PortMemory};
    use crate::ops::SampleFormat;

    fn chain() -> Vec<OpSpec> {
        vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Fir { taps: vec![1.0] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 1.0 },
        ]
    }

    #[test]
    fn positions_resolve_against_the_chain() {
        let c = chain();
        assert_eq!(resolve_position(&c, &OperatorPosition::After("fir".into()), "gain").unwrap(), 1);
        assert_eq!(resolve_position(&c, &OperatorPosition::AfterIndex(0), "gain").unwrap(), 0);
        assert_eq!(resolve_position(&c, &OperatorPosition::End, "gain").unwrap(), 3);
    }

    #[test]
    fn missing_positions_are_errors_naming_the_operator() {
        let c = chain();
        let err = resolve_position(&c, &OperatorPosition::After("fft".into()), "gain").unwrap_err();
        assert!(matches!(&err, ChainBuilderError::NoSuchEntry { name, .. } if name == "fft"));
        assert!(err.to_string().contains("unpack, fir, stats, threshold"), "{err}");
        let err = resolve_position(&c, &OperatorPosition::AfterIndex(4), "gain").unwrap_err();
        assert!(
            matches!(&err, ChainBuilderError::IndexOutOfRange { operator, index: 4, len: 4 } if operator == "gain"),
            "{err}"
        );
    }

    /// Passes `in` to `out` (ports of `bytes` each, or undeclared memory on `in`).
    struct Pass {
        name: &'static str,
        bytes: Option<usize>,
    }

    impl GpuResidentOperator for Pass {
        fn name(&self) -> &str {
            self.name
        }
        fn setup(&mut self, spec: &mut OperatorSpec) {
            match self.bytes {
                Some(b) => spec.input("in", PortMemory::Size(b)).output("out", PortMemory::Size(b)),
                None => spec.input("in", PortMemory::Unspecified).output("x", PortMemory::Size(4)),
            };
        }
        fn compute(&mut self, _ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
            Ok(())
        }
    }

    fn op_names(f: &Fragment) -> Vec<String> {
        let plan = f.plan().unwrap();
        plan.order().iter().map(|&id| f.operator_name(id).unwrap().to_owned()).collect()
    }

    #[test]
    fn host_backend_and_fused_chains_refuse_rust_operators_by_name() {
        let c = chain();
        let mut ops = UserOperators::default();
        ops.check(&c, Backend::Host, FusedChainMode::On).unwrap();
        ops.push(OperatorPosition::End, Box::new(Pass { name: "gain", bytes: Some(4) }));
        ops.check(&c, Backend::Cuda, FusedChainMode::Auto).unwrap();
        let err = ops.check(&c, Backend::Host, FusedChainMode::Auto).unwrap_err();
        assert!(matches!(&err, ChainBuilderError::HostBackend { operator } if operator == "gain"));
        assert!(err.to_string().contains("backend = \"cuda\""), "{err}");
        let err = ops.check(&c, Backend::Cuda, FusedChainMode::On).unwrap_err();
        assert!(
            err.to_string().contains("\"gain\"") && err.to_string().contains("loop.fused_chain"),
            "{err}"
        );
        ops.push(OperatorPosition::After("fft".into()), Box::new(Pass { name: "late", bytes: Some(4) }));
        let err = ops.check(&c, Backend::Host, FusedChainMode::Auto).unwrap_err();
        assert!(
            matches!(&err, ChainBuilderError::NoSuchEntry { operator, .. } if operator == "late"),
            "{err}"
        );
    }

    #[test]
    fn operators_go_in_after_their_entry_and_split_a_fused_reduction() {
        let c = chain();
        let bytes = samples_after(&c, 8192, &OperatorPosition::After("stats".into()), "gain").unwrap() * 4;
        assert_eq!(bytes, 4096 * 4);
        let mut ops = UserOperators::default();
        ops.push(
            OperatorPosition::After("stats".into()),
            Box::new(Pass { name: "gain", bytes: Some(bytes) }),
        );
        ops.push(OperatorPosition::AfterIndex(1), Box::new(Pass { name: "a", bytes: Some(bytes) }));
        ops.push(OperatorPosition::AfterIndex(1), Box::new(Pass { name: "b", bytes: Some(bytes) }));
        ops.push(OperatorPosition::End, Box::new(Pass { name: "last", bytes: Some(bytes) }));
        let built = ops.into_chain(&c, 8192).unwrap();
        assert_eq!(built.operators(), "\"gain\", \"a\", \"b\", \"last\"");
        let f = built.into_fragment(8192).unwrap();
        assert_eq!(
            op_names(&f),
            ["unpack[0]", "fir[1]", "a", "b", "stats[2]", "gain", "threshold[3]", "last"]
        );
        assert!(f.plan().unwrap().diagnostics().is_empty());

        // Without an operator between them, the reductions stay one kernel.
        let mut ops = UserOperators::default();
        ops.push(OperatorPosition::End, Box::new(Pass { name: "last", bytes: Some(bytes) }));
        let f = ops.into_chain(&c, 8192).unwrap().into_fragment(8192).unwrap();
        assert_eq!(op_names(&f), ["unpack[0]", "fir[1]", "stats+threshold[2]", "last"]);
    }

    #[test]
    fn ports_that_do_not_connect_name_the_operator_and_where_it_goes() {
        let c = chain();
        let mut ops = UserOperators::default();
        ops.push(OperatorPosition::After("fir".into()), Box::new(Pass { name: "gain", bytes: Some(100) }));
        let err = ops.into_chain(&c, 8192).err().expect("sizes differ");
        let ChainBuilderError::Ports { operator, place, source } = &err else { panic!("{err}") };
        assert_eq!((operator.as_str(), place.as_str()), ("gain", "after chain[1] (fir)"));
        assert!(
            matches!(**source, FragmentError::SizeMismatch { from_bytes: 16384, to_bytes: 100, .. }),
            "{source}"
        );
        assert!(std::error::Error::source(&err).is_some());

        let mut ops = UserOperators::default();
        ops.push(OperatorPosition::AfterIndex(0), Box::new(Pass { name: "odd", bytes: None }));
        let err = ops.into_chain(&c, 8192).err().expect("no out port");
        let ChainBuilderError::Ports { operator, source, .. } = &err else { panic!("{err}") };
        assert_eq!(operator, "odd");
        assert!(
            matches!(&**source, FragmentError::UnknownPort { port, direction, .. } if port == "out" && *direction == PortDirection::Output.as_str()),
            "{source}"
        );
        assert!(err.to_string().contains("output port \"out\""), "{err}");
    }

    #[test]
    fn a_chain_is_used_only_with_the_frame_size_it_was_built_for() {
        let mut ops = UserOperators::default();
        ops.push(OperatorPosition::End, Box::new(Pass { name: "last", bytes: Some(4096 * 4) }));
        let err = ops.into_chain(&chain(), 8192).unwrap().into_fragment(4096).unwrap_err();
        assert!(err.to_string().contains("ring.slot_bytes"), "{err}");
    }
}
