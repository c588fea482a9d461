//! Planning a fragment: checks that its operators form one linear chain,
//! fixes their execution order, and applies the port-connection rules to
//! give every port exactly one buffer.
//!
//! The rules, for each flow `from.out -> to.in`:
//! 1. both declare a size: one shared, executor-allocated buffer; the sizes
//!    must match (else an error);
//! 2. one side declares a device pointer: that memory is used; a warning if
//!    the other side declared a size;
//! 3. both declare pointers: the source's wins; an error is logged and
//!    planning continues;
//! 4. one side declares a size, the other nothing: a buffer of that size is
//!    allocated, with a warning;
//! 5. neither declares anything: an error.
//!
//! A pass-through output (`PortMemory::SameAsInput`) brings the memory its
//! input was bound to. It counts as a pointer (the source provides memory,
//! rules 2 and 3), except that a sink declaring exactly that size gets no
//! warning: the two declarations agree. Unconnected ports get their own
//! buffer from their size or pointer; one that declares neither is an error.

use std::collections::HashMap;

use super::FragmentError;
use super::graph::{Flow, Fragment, OperatorId};
use super::operator::{DevicePtr, DeviceRegion, PortBinding, PortDirection, PortMemory};

/// Where a planned buffer's memory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferSource {
    /// The executor allocates it (device memory of `bytes`).
    Allocated,
    /// An operator owns it; `owner` is `"operator.port"`.
    OperatorOwned {
        /// `"operator.port"` of the owner.
        owner: String,
        /// The memory's device address.
        dptr: DevicePtr,
    },
}

/// One buffer of the plan and the ports bound to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBuffer {
    /// Its size.
    pub bytes: usize,
    /// Who provides its memory.
    pub source: BufferSource,
    /// `"operator.port"` of every port bound to this buffer, in plan order.
    pub users: Vec<String>,
}

/// How serious a planning diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Worth a look; the plan is as declared.
    Warning,
    /// The plan still works (rule 3), but a declaration was overridden.
    Error,
}

/// A note produced while applying the connection rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// How serious it is.
    pub severity: Severity,
    /// What was found, naming the operators and ports.
    pub message: String,
}

/// The result of [`Fragment::plan`].
#[derive(Debug, Clone)]
pub struct Plan {
    fragment: String,
    operator_names: Vec<String>,
    order: Vec<OperatorId>,
    buffers: Vec<PlannedBuffer>,
    /// Invariant: indexed by operator id; every binding's buffer index is < `buffers.len()`.
    bindings: Vec<Vec<PortBinding>>,
    diagnostics: Vec<Diagnostic>,
}

impl Plan {
    /// Operators in execution order (head of the chain first).
    pub fn order(&self) -> &[OperatorId] {
        &self.order
    }

    /// The buffers, indexed by [`PortBinding::buffer`](crate::fragment::PortBinding::buffer).
    pub fn buffers(&self) -> &[PlannedBuffer] {
        &self.buffers
    }

    /// Port bindings of one operator.
    pub fn bindings(&self, id: OperatorId) -> &[PortBinding] {
        self.bindings.get(id.0).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Index into [`Plan::buffers`] of one port.
    pub fn port_buffer(&self, id: OperatorId, port: &str, direction: PortDirection) -> Option<usize> {
        self.bindings(id).iter().find(|b| b.port == port && b.direction == direction).map(|b| b.buffer)
    }

    /// Everything the planning noted.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        &self.diagnostics
    }

    /// The diagnostics of [`Severity::Warning`].
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.severity == Severity::Warning)
    }

    /// Total bytes the executor must allocate.
    pub fn allocated_bytes(&self) -> usize {
        self.buffers.iter().filter(|b| b.source == BufferSource::Allocated).map(|b| b.bytes).sum()
    }

    /// Resolves every buffer to device memory: `allocate(bytes)` is called
    /// for each executor-allocated buffer (the caller keeps the allocation
    /// alive); operator-owned buffers keep their pointer.
    pub fn bind_buffers<E>(
        &self,
        mut allocate: impl FnMut(usize) -> Result<DevicePtr, E>,
    ) -> Result<Vec<DeviceRegion>, E> {
        self.buffers
            .iter()
            .map(|b| {
                let dptr = match &b.source {
                    BufferSource::Allocated => allocate(b.bytes)?,
                    BufferSource::OperatorOwned { dptr, .. } => *dptr,
                };
                Ok(DeviceRegion { dptr, bytes: b.bytes })
            })
            .collect()
    }

    pub(crate) fn check_belongs_to(&self, fragment: &Fragment) -> Result<(), FragmentError> {
        let same = self.fragment == fragment.name()
            && self.operator_names.len() == fragment.operators.len()
            && self.operator_names.iter().zip(&fragment.operators).all(|(a, e)| *a == e.name);
        if same {
            Ok(())
        } else {
            Err(FragmentError::PlanMismatch {
                fragment: fragment.name().to_owned(),
                problem: format!(
                    "planned for \"{}\" with operators {:?}",
                    self.fragment, self.operator_names
                ),
            })
        }
    }
}

fn quoted(names: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    names.into_iter().map(|n| format!("\"{}\"", n.as_ref())).collect::<Vec<_>>().join(", ")
}

/// Checks the chain shape and returns the execution order.
fn chain_order(f: &Fragment) -> Result<Vec<OperatorId>, FragmentError> {
    let n = f.operators.len();
    let name = |i: usize| f.operators[i].name.as_str();
    if n == 0 {
        return Err(FragmentError::Empty { fragment: f.name().to_owned() });
    }
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for flow in &f.flows {
        let (a, b) = (flow.from.0, flow.to.0);
        if a == b {
            return Err(FragmentError::Cycle { operators: quoted([name(a)]) });
        }
        if !succs[a].contains(&b) {
            succs[a].push(b);
        }
        if !preds[b].contains(&a) {
            preds[b].push(a);
        }
    }
    for i in 0..n {
        if succs[i].len() > 1 {
            return Err(FragmentError::FanOut {
                operator: name(i).to_owned(),
                targets: quoted(succs[i].iter().map(|&j| name(j))),
            });
        }
        if preds[i].len() > 1 {
            return Err(FragmentError::FanIn {
                operator: name(i).to_owned(),
                sources: quoted(preds[i].iter().map(|&j| name(j))),
            });
        }
    }
    let heads: Vec<usize> = (0..n).filter(|&i| preds[i].is_empty()).collect();
    let Some(&head) = heads.first() else {
        return Err(FragmentError::Cycle { operators: quoted((0..n).map(name)) });
    };
    let mut order = vec![OperatorId(head)];
    let mut at = head;
    while let Some(&next) = succs[at].first() {
        // With at most one predecessor each and a head without one, the walk cannot revisit.
        debug_assert!(!order.contains(&OperatorId(next)));
        order.push(OperatorId(next));
        at = next;
    }
    if order.len() < n {
        let rest: Vec<&str> = (0..n).filter(|i| !order.contains(&OperatorId(*i))).map(name).collect();
        return Err(if heads.len() > 1 {
            FragmentError::Disconnected { fragment: f.name().to_owned(), operators: quoted(rest) }
        } else {
            FragmentError::Cycle { operators: quoted(rest) }
        });
    }
    Ok(order)
}

/// Memory a source port brings to its flow.
enum SourceMemory {
    Nothing,
    Size(usize),
    Pointer(DeviceRegion),
    /// Pass-through of an already bound buffer.
    Bound(usize),
}

struct Planner<'f> {
    f: &'f Fragment,
    buffers: Vec<PlannedBuffer>,
    bindings: Vec<Vec<PortBinding>>,
    diagnostics: Vec<Diagnostic>,
}

impl Planner<'_> {
    fn new_buffer(&mut self, bytes: usize, source: BufferSource) -> usize {
        self.buffers.push(PlannedBuffer { bytes, source, users: Vec::new() });
        self.buffers.len() - 1
    }

    fn owned(&mut self, id: OperatorId, port: &str, region: DeviceRegion) -> usize {
        let owner = format!("{}.{port}", self.f.operators[id.0].name);
        self.new_buffer(region.bytes, BufferSource::OperatorOwned { owner, dptr: region.dptr })
    }

    fn bind(&mut self, id: OperatorId, port: &str, direction: PortDirection, buffer: usize) {
        debug_assert!(buffer < self.buffers.len());
        self.buffers[buffer].users.push(format!("{}.{port}", self.f.operators[id.0].name));
        self.bindings[id.0].push(PortBinding { port: port.to_owned(), direction, buffer });
    }

    fn note(&mut self, severity: Severity, message: String) {
        match severity {
            Severity::Warning => tracing::warn!(fragment = %self.f.name(), "{message}"),
            Severity::Error => tracing::error!(fragment = %self.f.name(), "{message}"),
        }
        self.diagnostics.push(Diagnostic { severity, message });
    }

    /// Buffer of an unconnected port, from its own declaration.
    fn unconnected(
        &mut self,
        id: OperatorId,
        port: &str,
        memory: &PortMemory,
    ) -> Result<usize, FragmentError> {
        match memory {
            PortMemory::Size(bytes) => Ok(self.new_buffer(*bytes, BufferSource::Allocated)),
            PortMemory::Pointer(region) => Ok(self.owned(id, port, *region)),
            PortMemory::SameAsInput(input) => Ok(self.input_buffer(id, input)),
            PortMemory::Unspecified => Err(FragmentError::UnconnectedPortWithoutMemory {
                operator: self.f.operators[id.0].name.clone(),
                port: port.to_owned(),
            }),
        }
    }

    fn input_buffer(&self, id: OperatorId, input: &str) -> usize {
        let b = self.bindings[id.0].iter().find(|b| b.direction == PortDirection::Input && b.port == input);
        b.expect("inputs are bound before outputs and pass-through targets are checked in add_operator")
            .buffer
    }

    /// Applies the five connection rules to one flow and returns its buffer.
    fn connect(&mut self, flow: &Flow) -> Result<usize, FragmentError> {
        let f = self.f;
        let (src, dst) = (&f.operators[flow.from.0], &f.operators[flow.to.0]);
        let src_mem =
            &src.spec.port(&flow.from_port, PortDirection::Output).expect("checked by add_flow").memory;
        let dst_mem =
            &dst.spec.port(&flow.to_port, PortDirection::Input).expect("checked by add_flow").memory;
        let link = format!("{}.{} -> {}.{}", src.name, flow.from_port, dst.name, flow.to_port);
        let source = match src_mem {
            PortMemory::Unspecified => SourceMemory::Nothing,
            PortMemory::Size(s) => SourceMemory::Size(*s),
            PortMemory::Pointer(r) => SourceMemory::Pointer(*r),
            PortMemory::SameAsInput(input) => SourceMemory::Bound(self.input_buffer(flow.from, input)),
        };
        let buffer = match (source, dst_mem) {
            // Rule 1.
            (SourceMemory::Size(s), PortMemory::Size(d)) => {
                if s != *d {
                    return Err(FragmentError::SizeMismatch {
                        from: src.name.clone(),
                        from_port: flow.from_port.clone(),
                        from_bytes: s,
                        to: dst.name.clone(),
                        to_port: flow.to_port.clone(),
                        to_bytes: *d,
                    });
                }
                self.new_buffer(s, BufferSource::Allocated)
            }
            // Rule 2, pointer on the source side.
            (SourceMemory::Pointer(r), PortMemory::Size(d)) => {
                self.note(
                    Severity::Warning,
                    format!(
                        "{link}: the source provides its own memory ({} bytes); the {d} bytes the sink \
                         declared are ignored",
                        r.bytes
                    ),
                );
                self.owned(flow.from, &flow.from_port, r)
            }
            (SourceMemory::Pointer(r), PortMemory::Unspecified) => self.owned(flow.from, &flow.from_port, r),
            // Rule 2, pointer on the sink side.
            (SourceMemory::Size(s), PortMemory::Pointer(q)) => {
                self.note(
                    Severity::Warning,
                    format!(
                        "{link}: the sink provides its own memory ({} bytes); the {s} bytes the source \
                         declared are ignored",
                        q.bytes
                    ),
                );
                self.owned(flow.to, &flow.to_port, *q)
            }
            (SourceMemory::Nothing, PortMemory::Pointer(q)) => self.owned(flow.to, &flow.to_port, *q),
            // Rule 3.
            (SourceMemory::Pointer(r), PortMemory::Pointer(q)) => {
                self.note(
                    Severity::Error,
                    format!(
                        "{link}: both ports provide their own memory; the source's ({:#x}, {} bytes) is \
                         used and the sink's ({:#x}, {} bytes) is ignored",
                        r.dptr, r.bytes, q.dptr, q.bytes
                    ),
                );
                self.owned(flow.from, &flow.from_port, r)
            }
            // Rule 4.
            (SourceMemory::Size(s), PortMemory::Unspecified) => {
                self.note(
                    Severity::Warning,
                    format!("{link}: the sink declares no memory; allocating the source's {s} bytes"),
                );
                self.new_buffer(s, BufferSource::Allocated)
            }
            (SourceMemory::Nothing, PortMemory::Size(d)) => {
                self.note(
                    Severity::Warning,
                    format!("{link}: the source declares no memory; allocating the sink's {d} bytes"),
                );
                self.new_buffer(*d, BufferSource::Allocated)
            }
            // Rule 5.
            (SourceMemory::Nothing, PortMemory::Unspecified) => {
                return Err(FragmentError::NoMemory {
                    from: src.name.clone(),
                    from_port: flow.from_port.clone(),
                    to: dst.name.clone(),
                    to_port: flow.to_port.clone(),
                });
            }
            // Pass-through outputs: the bound buffer is the source's memory.
            (SourceMemory::Bound(b), PortMemory::Size(d)) => {
                let bytes = self.buffers[b].bytes;
                if bytes != *d {
                    self.note(
                        Severity::Warning,
                        format!(
                            "{link}: the source passes through a buffer of {bytes} bytes; the {d} bytes \
                             the sink declared are ignored"
                        ),
                    );
                }
                b
            }
            (SourceMemory::Bound(b), PortMemory::Unspecified) => b,
            (SourceMemory::Bound(b), PortMemory::Pointer(q)) => {
                let r = self.buffers[b].clone();
                self.note(
                    Severity::Error,
                    format!(
                        "{link}: the source passes its input's buffer ({} bytes) through and the sink \
                         provides its own memory ({:#x}, {} bytes); the source's is used",
                        r.bytes, q.dptr, q.bytes
                    ),
                );
                b
            }
            (_, PortMemory::SameAsInput(_)) => unreachable!("inputs cannot pass through (checked in setup)"),
        };
        Ok(buffer)
    }
}

/// See [`Fragment::plan`].
pub(crate) fn plan(f: &Fragment) -> Result<Plan, FragmentError> {
    let order = chain_order(f)?;
    let incoming: HashMap<(usize, &str), &Flow> =
        f.flows.iter().map(|fl| ((fl.to.0, fl.to_port.as_str()), fl)).collect();
    let outgoing: HashMap<(usize, &str), &Flow> =
        f.flows.iter().map(|fl| ((fl.from.0, fl.from_port.as_str()), fl)).collect();
    let mut p = Planner {
        f,
        buffers: Vec::new(),
        bindings: vec![Vec::new(); f.operators.len()],
        diagnostics: Vec::new(),
    };
    for &id in &order {
        let spec = &f.operators[id.0].spec;
        for port in spec.ports().iter().filter(|p| p.direction == PortDirection::Input) {
            // Connected inputs were bound when their source (earlier in the order) was planned.
            if !incoming.contains_key(&(id.0, port.name.as_str())) {
                let b = p.unconnected(id, &port.name, &port.memory)?;
                p.bind(id, &port.name, PortDirection::Input, b);
            }
        }
        for port in spec.ports().iter().filter(|p| p.direction == PortDirection::Output) {
            match outgoing.get(&(id.0, port.name.as_str())) {
                None => {
                    let b = p.unconnected(id, &port.name, &port.memory)?;
                    p.bind(id, &port.name, PortDirection::Output, b);
                }
                Some(flow) => {
                    let b = p.connect(flow)?;
                    p.bind(id, &port.name, PortDirection::Output, b);
                    p.bind(flow.to, &flow.to_port, PortDirection::Input, b);
                }
            }
        }
    }
    Ok(Plan {
        fragment: f.name().to_owned(),
        operator_names: f.operators.iter().map(|e| e.name.clone()).collect(),
        order,
        buffers: p.buffers,
        bindings: p.bindings,
        diagnostics: p.diagnostics,
    })
}
