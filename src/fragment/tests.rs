//! Planning tests: topology checks, the five connection rules, pass-through
//! ports and buffer sizing. No GPU involved.

use super::*;

/// An operator with whatever ports a test declares; compute is never called here.
struct Probe {
    name: String,
    ports: Ports,
}

impl GpuResidentOperator for Probe {
    fn name(&self) -> &str {
        &self.name
    }
    fn setup(&mut self, spec: &mut OperatorSpec) {
        for (dir, name, mem) in &self.ports {
            match dir {
                PortDirection::Input => spec.input(name, mem.clone()),
                PortDirection::Output => spec.output(name, mem.clone()),
            };
        }
    }
    fn compute(&mut self, _ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        unreachable!("planning tests never enqueue")
    }
}

use PortDirection::{Input as In, Output as Out};

/// Ports a [`Probe`] declares.
type Ports = Vec<(PortDirection, &'static str, PortMemory)>;

fn probe(name: &str, ports: Ports) -> Probe {
    Probe { name: name.to_owned(), ports }
}

fn ptr(dptr: u64, bytes: usize) -> PortMemory {
    PortMemory::Pointer(DeviceRegion { dptr, bytes })
}

/// Two operators a.out -> b.in with the given memories.
fn pair(src: PortMemory, dst: PortMemory) -> (Fragment, OperatorId, OperatorId) {
    let mut f = Fragment::new("main");
    let a = f.add_operator(probe("a", vec![(Out, "out", src)])).unwrap();
    let b = f.add_operator(probe("b", vec![(In, "in", dst)])).unwrap();
    f.add_flow(a, "out", b, "in").unwrap();
    (f, a, b)
}

fn shared(plan: &Plan, a: OperatorId, b: OperatorId) -> &PlannedBuffer {
    let x = plan.port_buffer(a, "out", Out).unwrap();
    assert_eq!(plan.port_buffer(b, "in", In), Some(x), "both ends of the flow share one buffer");
    &plan.buffers()[x]
}

#[test]
fn rule1_equal_sizes_share_one_allocated_buffer() {
    let (f, a, b) = pair(PortMemory::Size(4096), PortMemory::Size(4096));
    let plan = f.plan().unwrap();
    assert_eq!(plan.buffers().len(), 1);
    let buf = shared(&plan, a, b);
    assert_eq!((buf.bytes, &buf.source), (4096, &BufferSource::Allocated));
    assert_eq!(buf.users, vec!["a.out", "b.in"]);
    assert!(plan.diagnostics().is_empty());
    assert_eq!(plan.allocated_bytes(), 4096);
}

#[test]
fn rule1_different_sizes_are_an_error_naming_both_ports() {
    let (f, ..) = pair(PortMemory::Size(4096), PortMemory::Size(2048));
    let err = f.plan().unwrap_err();
    assert!(matches!(err, FragmentError::SizeMismatch { from_bytes: 4096, to_bytes: 2048, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("a.out -> b.in") && msg.contains("declare the same size"), "{msg}");
}

#[test]
fn rule2_source_pointer_is_used_and_a_sink_size_warns() {
    let (f, a, b) = pair(ptr(0x1000, 512), PortMemory::Size(256));
    let plan = f.plan().unwrap();
    let buf = shared(&plan, a, b);
    assert_eq!(buf.bytes, 512);
    assert_eq!(buf.source, BufferSource::OperatorOwned { owner: "a.out".into(), dptr: 0x1000 });
    assert_eq!(plan.warnings().count(), 1);
    assert!(plan.diagnostics()[0].message.contains("256 bytes the sink declared are ignored"));
    assert_eq!(plan.allocated_bytes(), 0);

    let (f, a, b) = pair(ptr(0x1000, 512), PortMemory::Unspecified);
    let plan = f.plan().unwrap();
    assert_eq!(shared(&plan, a, b).bytes, 512);
    assert!(plan.diagnostics().is_empty(), "no size on the other side, nothing to warn about");
}

#[test]
fn rule2_sink_pointer_is_used_and_a_source_size_warns() {
    let (f, a, b) = pair(PortMemory::Size(128), ptr(0x2000, 64));
    let plan = f.plan().unwrap();
    let buf = shared(&plan, a, b);
    assert_eq!(buf.source, BufferSource::OperatorOwned { owner: "b.in".into(), dptr: 0x2000 });
    assert_eq!(buf.bytes, 64);
    assert_eq!(plan.warnings().count(), 1);

    let (f, a, b) = pair(PortMemory::Unspecified, ptr(0x2000, 64));
    let plan = f.plan().unwrap();
    assert_eq!(shared(&plan, a, b).bytes, 64);
    assert!(plan.diagnostics().is_empty());
}

#[test]
fn rule3_both_pointers_source_wins_with_an_error_and_planning_continues() {
    let (f, a, b) = pair(ptr(0x1000, 512), ptr(0x2000, 512));
    let plan = f.plan().unwrap();
    let buf = shared(&plan, a, b);
    assert_eq!(buf.source, BufferSource::OperatorOwned { owner: "a.out".into(), dptr: 0x1000 });
    assert_eq!(plan.diagnostics().len(), 1);
    assert_eq!(plan.diagnostics()[0].severity, Severity::Error);
    assert!(plan.diagnostics()[0].message.contains("0x2000"));
    let regions = plan.bind_buffers::<()>(|_| panic!("nothing to allocate")).unwrap();
    assert_eq!(regions, vec![DeviceRegion { dptr: 0x1000, bytes: 512 }]);
}

#[test]
fn rule4_one_size_and_nothing_allocates_with_a_warning() {
    for (src, dst, bytes) in [
        (PortMemory::Size(300), PortMemory::Unspecified, 300),
        (PortMemory::Unspecified, PortMemory::Size(700), 700),
    ] {
        let (f, a, b) = pair(src, dst);
        let plan = f.plan().unwrap();
        let buf = shared(&plan, a, b);
        assert_eq!((buf.bytes, &buf.source), (bytes, &BufferSource::Allocated));
        assert_eq!(plan.warnings().count(), 1);
        assert!(plan.diagnostics()[0].message.contains("declares no memory"));
    }
}

#[test]
fn rule5_nothing_on_both_sides_is_an_error() {
    let (f, ..) = pair(PortMemory::Unspecified, PortMemory::Unspecified);
    let err = f.plan().unwrap_err();
    assert!(matches!(err, FragmentError::NoMemory { .. }));
    assert!(err.to_string().contains("a.out -> b.in: neither port declares memory"), "{err}");
}

fn passthrough_chain(sink: PortMemory) -> (Fragment, [OperatorId; 3]) {
    let mut f = Fragment::new("main");
    let a = f.add_operator(probe("src", vec![(Out, "out", PortMemory::Size(1024))])).unwrap();
    let b = f
        .add_operator(probe(
            "stats",
            vec![(In, "in", PortMemory::Size(1024)), (Out, "out", PortMemory::SameAsInput("in".into()))],
        ))
        .unwrap();
    let c = f.add_operator(probe("sink", vec![(In, "in", sink)])).unwrap();
    f.add_flow(a, "out", b, "in").unwrap();
    f.add_flow(b, "out", c, "in").unwrap();
    (f, [a, b, c])
}

#[test]
fn pass_through_shares_the_input_buffer_silently_when_sizes_agree() {
    let (f, [a, b, c]) = passthrough_chain(PortMemory::Size(1024));
    let plan = f.plan().unwrap();
    assert_eq!(plan.buffers().len(), 1);
    let x = plan.port_buffer(a, "out", Out).unwrap();
    for (id, port, dir) in [(b, "in", In), (b, "out", Out), (c, "in", In)] {
        assert_eq!(plan.port_buffer(id, port, dir), Some(x));
    }
    assert!(plan.diagnostics().is_empty());
    assert_eq!(plan.buffers()[0].users, vec!["src.out", "stats.in", "stats.out", "sink.in"]);
}

#[test]
fn pass_through_with_a_different_sink_size_warns_and_keeps_the_buffer() {
    let (f, [a, _, c]) = passthrough_chain(PortMemory::Size(512));
    let plan = f.plan().unwrap();
    assert_eq!(plan.port_buffer(c, "in", In), plan.port_buffer(a, "out", Out));
    assert_eq!(plan.warnings().count(), 1);
}

#[test]
fn pass_through_into_a_sink_pointer_keeps_the_source_with_an_error() {
    let (f, [a, _, c]) = passthrough_chain(ptr(0x4000, 1024));
    let plan = f.plan().unwrap();
    assert_eq!(plan.port_buffer(c, "in", In), plan.port_buffer(a, "out", Out));
    assert_eq!(plan.diagnostics()[0].severity, Severity::Error);
}

#[test]
fn unconnected_ports_get_their_own_buffers_or_an_error() {
    let mut f = Fragment::new("main");
    let a = f
        .add_operator(probe(
            "a",
            vec![
                (In, "cfg", ptr(0x9000, 16)),
                (In, "scratch", PortMemory::Size(64)),
                (Out, "out", PortMemory::Size(32)),
            ],
        ))
        .unwrap();
    let plan = f.plan().unwrap();
    assert_eq!(plan.buffers().len(), 3);
    assert_eq!(plan.allocated_bytes(), 96);
    let cfg = plan.port_buffer(a, "cfg", In).unwrap();
    assert_eq!(
        plan.buffers()[cfg].source,
        BufferSource::OperatorOwned { owner: "a.cfg".into(), dptr: 0x9000 }
    );
    let mut next = 0x10_0000u64;
    let regions = plan
        .bind_buffers::<()>(|bytes| {
            next += 0x1000;
            assert!(bytes == 64 || bytes == 32);
            Ok(next)
        })
        .unwrap();
    assert_eq!(regions[cfg], DeviceRegion { dptr: 0x9000, bytes: 16 });
    assert_eq!(regions[plan.port_buffer(a, "out", Out).unwrap()].bytes, 32);

    let mut f = Fragment::new("main");
    f.add_operator(probe("a", vec![(Out, "out", PortMemory::Unspecified)])).unwrap();
    let err = f.plan().unwrap_err();
    assert!(
        matches!(err, FragmentError::UnconnectedPortWithoutMemory { ref port, .. } if port == "out"),
        "{err}"
    );
}

#[test]
fn buffer_sizing_of_a_four_stage_chain() {
    // unpack -> fir -> stats (pass-through) -> threshold (pass-through), 4096 samples.
    let bytes = 4096 * 4;
    let mut f = Fragment::new("main");
    let sized = PortMemory::Size(bytes);
    let through = PortMemory::SameAsInput("in".into());
    let ids = [
        f.add_operator(probe("unpack", vec![(Out, "out", sized.clone())])).unwrap(),
        f.add_operator(probe("fir", vec![(In, "in", sized.clone()), (Out, "out", sized.clone())])).unwrap(),
        f.add_operator(probe("stats", vec![(In, "in", sized.clone()), (Out, "out", through.clone())]))
            .unwrap(),
        f.add_operator(probe("threshold", vec![(In, "in", sized.clone()), (Out, "out", through)])).unwrap(),
    ];
    for w in ids.windows(2) {
        f.add_flow(w[0], "out", w[1], "in").unwrap();
    }
    let plan = f.plan().unwrap();
    assert_eq!(plan.order(), &ids);
    assert_eq!(plan.buffers().len(), 2, "unpack->fir and fir->(stats, threshold)");
    assert_eq!(plan.allocated_bytes(), 2 * bytes);
    let last = plan.port_buffer(ids[3], "out", Out).unwrap();
    assert_eq!(Some(last), plan.port_buffer(ids[1], "out", Out));
    assert!(plan.diagnostics().is_empty());
}

fn chain_of(names: &[&str]) -> (Fragment, Vec<OperatorId>) {
    let mut f = Fragment::new("main");
    let ids = names
        .iter()
        .map(|n| {
            f.add_operator(probe(
                n,
                vec![
                    (In, "in", PortMemory::Size(8)),
                    (In, "in2", PortMemory::Size(8)),
                    (Out, "out", PortMemory::Size(8)),
                    (Out, "out2", PortMemory::Size(8)),
                ],
            ))
            .unwrap()
        })
        .collect();
    (f, ids)
}

#[test]
fn execution_order_follows_the_flows_not_insertion() {
    let (mut f, ids) = chain_of(&["c", "a", "b"]);
    f.add_flow(ids[1], "out", ids[2], "in").unwrap();
    f.add_flow(ids[2], "out", ids[0], "in").unwrap();
    // A second flow between the same pair keeps the chain linear.
    f.add_flow(ids[2], "out2", ids[0], "in2").unwrap();
    let plan = f.plan().unwrap();
    assert_eq!(plan.order(), &[ids[1], ids[2], ids[0]]);
}

#[test]
fn cycles_are_rejected() {
    let (mut f, ids) = chain_of(&["a", "b"]);
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    f.add_flow(ids[1], "out", ids[0], "in").unwrap();
    let err = f.plan().unwrap_err();
    assert!(matches!(err, FragmentError::Cycle { .. }), "{err}");
    assert!(err.to_string().contains("\"a\", \"b\""), "{err}");

    let (mut f, ids) = chain_of(&["a"]);
    f.add_flow(ids[0], "out", ids[0], "in").unwrap();
    assert!(matches!(f.plan().unwrap_err(), FragmentError::Cycle { .. }));

    // A lone head plus a separate loop: the loop is named.
    let (mut f, ids) = chain_of(&["head", "x", "y"]);
    f.add_flow(ids[1], "out", ids[2], "in").unwrap();
    f.add_flow(ids[2], "out", ids[1], "in").unwrap();
    let err = f.plan().unwrap_err();
    assert!(matches!(err, FragmentError::Cycle { ref operators } if operators == "\"x\", \"y\""), "{err}");
}

#[test]
fn cycle_hanging_off_a_chain_is_a_fan_in() {
    let (mut f, ids) = chain_of(&["a", "b", "c"]);
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    f.add_flow(ids[1], "out", ids[2], "in").unwrap();
    f.add_flow(ids[2], "out", ids[1], "in2").unwrap();
    let err = f.plan().unwrap_err();
    assert!(matches!(err, FragmentError::FanIn { ref operator, .. } if operator == "b"), "{err}");
}

#[test]
fn fan_out_and_fan_in_are_rejected_naming_the_operators() {
    let (mut f, ids) = chain_of(&["a", "b", "c"]);
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    f.add_flow(ids[0], "out2", ids[2], "in").unwrap();
    let err = f.plan().unwrap_err();
    assert!(
        matches!(err, FragmentError::FanOut { ref operator, ref targets } if operator == "a" && targets == "\"b\", \"c\""),
        "{err}"
    );

    let (mut f, ids) = chain_of(&["a", "b", "c"]);
    f.add_flow(ids[0], "out", ids[2], "in").unwrap();
    f.add_flow(ids[1], "out", ids[2], "in2").unwrap();
    let err = f.plan().unwrap_err();
    assert!(
        matches!(err, FragmentError::FanIn { ref operator, ref sources } if operator == "c" && sources == "\"a\", \"b\""),
        "{err}"
    );
}

#[test]
fn disconnected_operators_are_rejected() {
    let (mut f, ids) = chain_of(&["a", "b", "lonely"]);
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    let err = f.plan().unwrap_err();
    assert!(
        matches!(err, FragmentError::Disconnected { ref operators, .. } if operators == "\"lonely\""),
        "{err}"
    );

    let (mut f, ids) = chain_of(&["a", "b", "c", "d"]);
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    f.add_flow(ids[2], "out", ids[3], "in").unwrap();
    let err = f.plan().unwrap_err();
    assert!(
        matches!(err, FragmentError::Disconnected { ref operators, .. } if operators == "\"c\", \"d\""),
        "{err}"
    );

    assert!(matches!(Fragment::new("e").plan().unwrap_err(), FragmentError::Empty { .. }));
}

#[test]
fn add_flow_checks_ports_and_ids() {
    let (mut f, ids) = chain_of(&["a", "b"]);
    let err = f.add_flow(ids[0], "nope", ids[1], "in").unwrap_err();
    assert!(matches!(err, FragmentError::UnknownPort { direction: "output", .. }), "{err}");
    assert!(err.to_string().contains("its output ports: out, out2"), "{err}");
    // An input used as a source is an unknown output.
    assert!(matches!(f.add_flow(ids[0], "in", ids[1], "in"), Err(FragmentError::UnknownPort { .. })));
    assert!(matches!(
        f.add_flow(ids[0], "out", OperatorId(7), "in"),
        Err(FragmentError::UnknownOperatorId { id: 7, .. })
    ));
    f.add_flow(ids[0], "out", ids[1], "in").unwrap();
    let err = f.add_flow(ids[0], "out", ids[1], "in2").unwrap_err();
    assert!(
        matches!(err, FragmentError::PortAlreadyConnected { ref port, ref other, .. } if port == "out" && other == "b.in"),
        "{err}"
    );
    let err = f.add_flow(ids[0], "out2", ids[1], "in").unwrap_err();
    assert!(
        matches!(err, FragmentError::PortAlreadyConnected { ref port, ref other, .. } if port == "in" && other == "a.out"),
        "{err}"
    );
}

#[test]
fn operator_and_port_declarations_are_checked() {
    let mut f = Fragment::new("main");
    f.add_operator(probe("a", vec![])).unwrap();
    assert!(matches!(f.add_operator(probe("a", vec![])), Err(FragmentError::DuplicateOperator { .. })));
    assert!(matches!(f.add_operator(probe("", vec![])), Err(FragmentError::EmptyOperatorName)));
    let bad: [(Ports, &str); 6] = [
        (vec![(Out, "out", PortMemory::Size(0))], "at least 1 byte"),
        (vec![(Out, "out", ptr(0, 8))], "null"),
        (vec![(Out, "out", ptr(0x10, 0))], "0 bytes"),
        (vec![(Out, "x", PortMemory::Size(4)), (In, "x", PortMemory::Size(4))], "declared twice"),
        (vec![(Out, "out", PortMemory::SameAsInput("in".into()))], "not declared"),
        (vec![(In, "in", PortMemory::SameAsInput("other".into()))], "on an output"),
    ];
    for (i, (ports, expect)) in bad.into_iter().enumerate() {
        let err = f.add_operator(probe(&format!("bad{i}"), ports)).unwrap_err();
        assert!(matches!(err, FragmentError::PortDeclaration { .. }), "{err}");
        assert!(err.to_string().contains(expect), "{err} should mention {expect}");
    }
    assert_eq!(f.len(), 1, "rejected operators are not added");
}

#[test]
fn data_ready_handler_registration() {
    let mut main = Fragment::new("main");
    let mut handler = Fragment::new("handler");
    handler.add_operator(probe("detect", vec![])).unwrap();
    assert!(handler.plan().unwrap().buffers().is_empty());
    main.register_data_ready_handler(handler).unwrap();
    assert_eq!(main.data_ready_handler().unwrap().name(), "handler");
    assert_eq!(main.data_ready_handler_mut().unwrap().len(), 1);
    assert!(matches!(
        main.register_data_ready_handler(Fragment::new("second")),
        Err(FragmentError::HandlerAlreadyRegistered { .. })
    ));
    let mut nested = Fragment::new("nested");
    nested.register_data_ready_handler(Fragment::new("inner")).unwrap();
    let mut other = Fragment::new("other");
    assert!(matches!(other.register_data_ready_handler(nested), Err(FragmentError::NestedHandler { .. })));
}

#[test]
fn a_plan_only_fits_the_fragment_it_was_made_for() {
    let (f, ids) = chain_of(&["a"]);
    let plan = f.plan().unwrap();
    plan.check_belongs_to(&f).unwrap();
    let (g, _) = chain_of(&["b"]);
    assert!(matches!(plan.check_belongs_to(&g), Err(FragmentError::PlanMismatch { .. })));
    assert_eq!(plan.bindings(ids[0]).len(), 4);
}

/// An operator whose kernel can claim the frames itself.
struct Claimer;

impl GpuResidentOperator for Claimer {
    fn name(&self) -> &str {
        "claimer"
    }
    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.output("scratch", PortMemory::Size(64));
    }
    fn compute(&mut self, _ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        unreachable!("planning tests never enqueue")
    }
    fn can_claim_frames(&self) -> bool {
        true
    }
}

#[test]
fn only_a_lone_operator_that_offers_it_claims_the_frames() {
    let mut alone = Fragment::new("main");
    alone.add_operator(Claimer).unwrap();
    assert!(alone.can_claim_frames());
    let mut two = Fragment::new("main");
    two.add_operator(Claimer).unwrap();
    two.add_operator(probe("after", vec![])).unwrap();
    assert!(!two.can_claim_frames(), "a second operator would have to run after the claim");
    let mut plain = Fragment::new("main");
    plain.add_operator(probe("plain", vec![])).unwrap();
    assert!(!plain.can_claim_frames(), "the default is the handler and IF body");
    assert!(!Fragment::new("empty").can_claim_frames());
}
