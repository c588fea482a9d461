//! Where Rust user operators go in the configured chain: a position
//! (after a named or indexed chain entry, or at the end) resolved against
//! the chain, and the errors a user sees when it does not fit.

use thiserror::Error;

use crate::fragment::GpuResidentOperator;
use crate::ops::OpSpec;

/// Where a user operator is inserted in the main fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorPosition {
    /// After the first chain entry of this kind (`"fir"`, `"stats"`).
    After(String),
    /// After the chain entry at this index (`chain[1]`).
    AfterIndex(usize),
    /// After the last configured entry, before the end marker.
    End,
}

/// Why user operators cannot be added to the chain.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ChainBuilderError {
    #[error(
        "operator \"{operator}\" goes after \"{name}\", but the configured chain has no such entry \
         (it has: {chain}); name an entry of `chain` in the config or use the end position"
    )]
    NoSuchEntry { operator: String, name: String, chain: String },
    #[error(
        "operator \"{operator}\" goes after chain[{index}], but the configured chain has {len} entries; \
         use an index below {len}"
    )]
    IndexOutOfRange { operator: String, index: usize, len: usize },
    #[error(
        "operator \"{operator}\" is a Rust GPU operator and runs only on the CUDA backend; \
         set `backend = \"cuda\"` in the config (the host backend was picked)"
    )]
    HostBackend { operator: String },
}

/// User operators in insertion order, each with its position; owned by the
/// executor for the loop's lifetime once the appliance starts.
#[derive(Default)]
pub struct UserOperators {
    entries: Vec<(OperatorPosition, Box<dyn GpuResidentOperator>)>,
}

impl UserOperators {
    /// Adds `operator` at `position`.
    pub fn push(&mut self, position: OperatorPosition, operator: Box<dyn GpuResidentOperator>) {
        self.entries.push((position, operator));
    }

    /// True when no user operator was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Refuses user operators unless the picked backend is CUDA, naming the first.
    pub fn check_backend(&self, backend: &str) -> Result<(), ChainBuilderError> {
        match self.entries.first() {
            Some((_, op)) if backend != "cuda" => {
                Err(ChainBuilderError::HostBackend { operator: op.name().to_string() })
            }
            _ => Ok(()),
        }
    }
}

/// The chain index after which an operator named `operator` goes.
pub fn resolve_position(
    chain: &[OpSpec],
    position: &OperatorPosition,
    operator: &str,
) -> Result<usize, ChainBuilderError> {
    match position {
        OperatorPosition::End => Ok(chain.len().saturating_sub(1)),
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
    use crate::ops::SampleFormat;

    fn chain() -> Vec<OpSpec> {
        vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Fir { taps: vec![1.0] },
            OpSpec::Stats,
        ]
    }

    #[test]
    fn positions_resolve_against_the_chain() {
        let c = chain();
        assert_eq!(resolve_position(&c, &OperatorPosition::After("fir".into()), "gain"), Ok(1));
        assert_eq!(resolve_position(&c, &OperatorPosition::AfterIndex(0), "gain"), Ok(0));
        assert_eq!(resolve_position(&c, &OperatorPosition::End, "gain"), Ok(2));
    }

    #[test]
    fn missing_positions_are_errors_naming_the_operator() {
        let c = chain();
        let err = resolve_position(&c, &OperatorPosition::After("fft".into()), "gain").unwrap_err();
        assert!(matches!(&err, ChainBuilderError::NoSuchEntry { name, .. } if name == "fft"));
        assert!(err.to_string().contains("unpack, fir, stats"), "{err}");
        let err = resolve_position(&c, &OperatorPosition::AfterIndex(3), "gain").unwrap_err();
        assert_eq!(err, ChainBuilderError::IndexOutOfRange { operator: "gain".into(), index: 3, len: 3 });
    }

    struct Gain;

    impl GpuResidentOperator for Gain {
        fn name(&self) -> &str {
            "gain"
        }
        fn setup(&mut self, _spec: &mut crate::fragment::OperatorSpec) {}
        fn compute(
            &mut self,
            _ctx: &mut crate::fragment::ComputeContext<'_>,
        ) -> Result<(), crate::fragment::FragmentError> {
            Ok(())
        }
    }

    #[test]
    fn host_backend_refuses_rust_operators_by_name() {
        let mut ops = UserOperators::default();
        assert_eq!(ops.check_backend("host"), Ok(()));
        ops.push(OperatorPosition::End, Box::new(Gain));
        assert_eq!(ops.check_backend("cuda"), Ok(()));
        let err = ops.check_backend("host").unwrap_err();
        assert_eq!(err, ChainBuilderError::HostBackend { operator: "gain".into() });
        assert!(err.to_string().contains("backend = \"cuda\""), "{err}");
    }
}
