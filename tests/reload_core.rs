//! The host loop core switching chains in memory: a chain staged while a
//! frame is in the chain does not touch that frame; the next claim runs the
//! new chain and stamps its generation; a chain staged twice before a claim
//! runs only its latest version.

use frameloop::config::LoopConfig;
use frameloop::host::{LoopControl, LoopCore, Step, Trigger};
use frameloop::ops::{CpuChain, OpSpec, default_chain};
use frameloop::ring::layout::{result_ring_bytes, ring_bytes};
use frameloop::ring::{
    FrameRing, HostMemory, OverrunPolicy, ResultReader, ResultRecord, ResultRing, RingWriter, SlotHeader,
};

const CAPACITY: usize = 256;

fn chain(level: f32, taps: usize) -> Vec<OpSpec> {
    let mut ops = default_chain();
    ops[1] = OpSpec::Fir { taps: vec![1.0 / taps as f32; taps] };
    ops[3] = OpSpec::Threshold { level };
    ops
}

fn publish(writer: &mut RingWriter, frame: u64) -> Vec<u8> {
    let data: Vec<u8> = (0..CAPACITY / 2)
        .map(|i| ((i as u64 * 977 + frame * 4099) % 65536) as u16)
        .flat_map(u16::to_le_bytes)
        .collect();
    let seq = writer.reserve().unwrap();
    writer.payload_mut(seq)[..data.len()].copy_from_slice(&data);
    writer
        .publish(seq, &SlotHeader { frame_seq: frame, payload_len: data.len() as u32, ..Default::default() });
    data
}

fn expect(r: &ResultRecord, ops: &[OpSpec], data: &[u8], generation: u32) {
    let out = CpuChain::new(ops, CAPACITY).unwrap().run(data);
    let stats = out.stats.unwrap();
    assert_eq!(r.param_generation, generation, "generation of frame {}", r.frame_seq);
    assert_eq!((r.sum, r.max, r.output_len as usize), (stats.sum, stats.max, out.output_len));
    assert_eq!((r.detect_count, r.first_detect_index), out.detect.unwrap(), "frame {}", r.frame_seq);
}

#[test]
fn a_staged_chain_runs_from_the_next_claim_never_inside_a_frame() {
    let frames = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(8, CAPACITY).unwrap()).unwrap()),
        8,
        CAPACITY,
        OverrunPolicy::Every,
    )
    .unwrap();
    let result_ring =
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(64).unwrap()).unwrap()), 64).unwrap();
    let (g0, g1, g2, g3) = (chain(8.0, 5), chain(2.0, 5), chain(3.0, 9), chain(4.0, 9));
    let mut core = LoopCore::new(
        frames.reader().unwrap(),
        result_ring.writer().unwrap(),
        CpuChain::new(&g0, CAPACITY).unwrap(),
        LoopConfig::default(),
        Trigger::RingHead,
        LoopControl::new(),
    );
    let mut writer = frames.writer().unwrap();
    let mut results = ResultReader::new(result_ring);
    let switch = std::sync::Arc::clone(core.chain_switch());
    let data: Vec<Vec<u8>> = (1..=4).map(|f| publish(&mut writer, f)).collect();

    // Frame 1 is in the chain when generation 1 is staged: it finishes with 0.
    assert_eq!(core.step(1), Step::Ready);
    assert_eq!(core.process(2), Some(1));
    switch.stage(CpuChain::new(&g1, CAPACITY).unwrap(), 1);
    assert!(switch.is_pending());
    assert_eq!(switch.applied_generation(), 0);
    assert_eq!(core.complete(3), Some(1));
    // Frame 2 is claimed with generation 1.
    assert_eq!(core.step(4), Step::Ready);
    assert_eq!(core.process(5), Some(2));
    assert!(!switch.is_pending());
    assert_eq!(switch.applied_generation(), 1);
    core.complete(6);
    // Two stages before one claim: only the latest (a new shape) ever runs.
    switch.stage(CpuChain::new(&g2, CAPACITY).unwrap(), 2);
    switch.stage(CpuChain::new(&g3, CAPACITY).unwrap(), 3);
    for t in [7, 9] {
        assert_eq!(core.step(t), Step::Ready);
        core.process(t);
        core.complete(t + 1);
    }
    let mut got = Vec::new();
    results.drain(&mut got);
    assert_eq!(got.len(), 4);
    expect(&got[0], &g0, &data[0], 0);
    expect(&got[1], &g1, &data[1], 1);
    expect(&got[2], &g3, &data[2], 3);
    expect(&got[3], &g3, &data[3], 3);
    // The generations' results differ, so the checks above discriminate.
    let frame2_under_g0 = CpuChain::new(&g0, CAPACITY).unwrap().run(&data[1]);
    assert_ne!(frame2_under_g0.detect.unwrap().0, got[1].detect_count);
}
