//! One-copy receive: where the reassembler expects the next datagrams'
//! payloads to go (a ring slot and an offset in it), grouped per receive
//! buffer, and what the kernel left at each of those places.
//!
//! The receiver lays each receive buffer out as `[header][payload]` pairs,
//! the headers in its own memory and the payloads straight in the ring
//! slots the reassembler predicted, followed by an ordinary buffer for
//! whatever the prediction did not cover; so a datagram that arrives where it
//! was expected is copied once, by the kernel. A wrong prediction costs
//! what every datagram cost before: one copy, from where the kernel put the
//! payload to where it belongs. Payloads the kernel wrote into a slot but the
//! reassembler has not yet handled are moved out of the way ([`Landed::Spilled`])
//! before anything else is written over them.

use crate::wire::native::HEADER_LEN;

/// The largest receive buffer the kernel fills (one datagram or a GRO
/// buffer of several): a group of targets never spans more.
pub const GROUP_BYTES: usize = 65536;

/// What a plan covers: `buffers` receive buffers, each expected to hold at
/// most `datagrams_per_buffer` datagrams. The kernel puts several
/// datagrams in one buffer only when UDP GRO coalesced them (a sender's
/// burst, a GSO send); datagrams that arrive apart (a sensor pacing them on
/// its link) come one per buffer even when many wait in the socket. A plan
/// shaped for one case costs the other a copy of every datagram after the
/// first buffer's, so the receiver shapes each plan after what its last
/// receive call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LandingShape {
    pub buffers: usize,
    pub datagrams_per_buffer: usize,
}

impl LandingShape {
    /// `buffers` receive buffers, each filled as far as a GRO buffer goes.
    pub fn coalesced(buffers: usize) -> Self {
        Self { buffers, datagrams_per_buffer: usize::MAX }
    }
}

/// One predicted datagram: its header goes to the receiver's memory, its
/// payload to `len` bytes at `offset` in the payload of ring slot `ring_seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LandingTarget {
    pub ring_seq: u64,
    pub offset: usize,
    pub len: usize,
}

impl LandingTarget {
    /// Bytes of the whole datagram (header and payload).
    pub fn datagram_bytes(&self) -> usize {
        HEADER_LEN + self.len
    }
}

/// What is at a target's place in its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// Nothing the reassembler still needs.
    Empty,
    /// A payload of this many bytes, not yet handled, in the slot.
    InSlot(usize),
    /// That payload, moved to `spill[at..at + len]` before its place was written.
    Spilled { at: usize, len: usize },
}

/// The targets of one receive batch, in groups of one receive buffer each,
/// with the base address of each payload and what landed there.
#[derive(Debug, Default)]
pub struct LandingPlan {
    targets: Vec<LandingTarget>,
    /// Address of each target's payload in its slot (for the receive call).
    addrs: Vec<*mut u8>,
    /// End (exclusive index into `targets`) of each group.
    group_ends: Vec<usize>,
    landed: Vec<Landed>,
    /// Payloads moved out of their slots, back to back.
    spill: Vec<u8>,
}

// SAFETY: the addresses point into ring slots reserved by the writer that
// owns this plan; the plan moves between threads only together with it.
unsafe impl Send for LandingPlan {}

impl LandingPlan {
    /// Forgets every target (a new batch starts).
    pub fn clear(&mut self) {
        self.targets.clear();
        self.addrs.clear();
        self.group_ends.clear();
        self.landed.clear();
        self.spill.clear();
    }

    /// Adds a target whose payload lives at `addr`. Targets must come in
    /// increasing `(ring_seq, offset)` order and must not overlap.
    pub fn push(&mut self, target: LandingTarget, addr: *mut u8) {
        debug_assert!(
            self.targets
                .last()
                .is_none_or(|t| (t.ring_seq, t.offset + t.len) <= (target.ring_seq, target.offset)),
            "landing targets out of order or overlapping"
        );
        self.targets.push(target);
        self.addrs.push(addr);
        self.landed.push(Landed::Empty);
    }

    /// Ends the current group (the next target starts a new receive buffer).
    pub fn end_group(&mut self) {
        if self.group_ends.last().copied().unwrap_or(0) < self.targets.len() {
            self.group_ends.push(self.targets.len());
        }
    }

    /// Bytes the current (unfinished) group already takes.
    pub fn open_group_bytes(&self) -> usize {
        let start = self.group_ends.last().copied().unwrap_or(0);
        self.targets[start..].iter().map(LandingTarget::datagram_bytes).sum()
    }

    /// Targets the current (unfinished) group already holds.
    pub fn open_group_targets(&self) -> usize {
        self.targets.len() - self.group_ends.last().copied().unwrap_or(0)
    }

    /// Number of finished groups.
    pub fn groups(&self) -> usize {
        self.group_ends.len()
    }

    /// The target indices of group `g`.
    pub fn group(&self, g: usize) -> std::ops::Range<usize> {
        let start = if g == 0 { 0 } else { self.group_ends[g - 1] };
        start..self.group_ends[g]
    }

    pub fn target(&self, k: usize) -> LandingTarget {
        self.targets[k]
    }

    pub fn addr(&self, k: usize) -> *mut u8 {
        self.addrs[k]
    }

    pub fn landed(&self, k: usize) -> Landed {
        self.landed[k]
    }

    /// Records that the kernel left a payload of `len` bytes at target `k`.
    pub fn set_arrived(&mut self, k: usize, len: usize) {
        debug_assert!(len <= self.targets[k].len);
        self.landed[k] = Landed::InSlot(len);
    }

    /// Writes `payload` at target `k`'s place and records it arrived, as a
    /// receive that put it there does (for driving the reassembler in memory:
    /// tests and benchmarks).
    ///
    /// # Safety
    /// Target `k`'s address must still be valid for its length and not be
    /// accessed otherwise during the call: its slot reserved by the plan's
    /// writer and not yet published, as between a plan and the next.
    ///
    /// # Panics
    /// If `payload` is longer than the target.
    pub unsafe fn land(&mut self, k: usize, payload: &[u8]) {
        assert!(payload.len() <= self.targets[k].len, "payload longer than landing target {k}");
        // SAFETY: the caller guarantees the address is valid for the
        // target's length, which covers the payload (checked above).
        unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), self.addrs[k], payload.len()) };
        self.set_arrived(k, payload.len());
    }

    /// Takes what landed at target `k`, leaving it empty.
    pub fn take(&mut self, k: usize) -> Landed {
        std::mem::replace(&mut self.landed[k], Landed::Empty)
    }

    /// The spilled payload at `at..at + len`.
    pub fn spilled(&self, at: usize, len: usize) -> &[u8] {
        &self.spill[at..at + len]
    }

    /// Whether `other` lays receive buffers out as this plan does: the same
    /// targets, at the same addresses, in the same groups (what landed
    /// aside).
    pub fn same_layout(&self, other: &LandingPlan) -> bool {
        self.targets == other.targets && self.addrs == other.addrs && self.group_ends == other.group_ends
    }

    /// Takes `other`'s targets, addresses and groups (nothing landed yet).
    pub fn copy_layout(&mut self, other: &LandingPlan) {
        self.clear();
        self.targets.extend_from_slice(&other.targets);
        self.addrs.extend_from_slice(&other.addrs);
        self.group_ends.extend_from_slice(&other.group_ends);
        self.landed.resize(self.targets.len(), Landed::Empty);
    }

    /// Targets holding an unhandled payload in slot `ring_seq` that overlaps
    /// payload bytes `range` of it.
    pub fn pending_in(
        &self,
        ring_seq: u64,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = usize> + '_ {
        let first =
            self.targets.partition_point(|t| (t.ring_seq, t.offset + t.len) <= (ring_seq, range.start));
        (first..self.targets.len())
            .take_while(move |&k| self.targets[k].ring_seq == ring_seq && self.targets[k].offset < range.end)
            .filter(|&k| matches!(self.landed[k], Landed::InSlot(_)))
    }

    /// Moves target `k`'s unhandled payload (`bytes`, read from its slot by
    /// the caller) to the spill area.
    pub fn spill(&mut self, k: usize, bytes: &[u8]) {
        debug_assert_eq!(self.landed[k], Landed::InSlot(bytes.len()));
        let at = self.spill.len();
        self.spill.extend_from_slice(bytes);
        self.landed[k] = Landed::Spilled { at, len: bytes.len() };
    }
}

/// Where one receive buffer's datagrams fell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageLayout {
    /// The message's first `landed` targets hold one datagram each (header
    /// and payload where predicted; every payload its target's length except
    /// the last landed one, `last_payload` bytes), and the first `tail` bytes
    /// of its plain buffer hold the datagrams after them, whole.
    Aligned { landed: usize, last_payload: usize, tail: usize },
    /// The datagrams do not line up with the targets (another size, another
    /// header length): the message must be gathered back into one buffer.
    Gather,
}

/// The layout of a receive buffer of `len` bytes (GRO segments of
/// `gro_segment` bytes, the last maybe shorter) over targets of
/// `predicted` datagram bytes each, `head(j)` being target `j`'s header as
/// received. A datagram lines up with its target when it has the target's
/// size (or, the buffer's last, is shorter but holds a header) and a plain
/// 48-byte header. An empty buffer (a zero-length datagram) lines up with
/// nothing: it is gathered, so that the receiver hands it over as the one
/// (empty) datagram it is and it is counted like any other.
pub fn message_layout(
    len: usize,
    gro_segment: Option<usize>,
    predicted: impl Iterator<Item = usize>,
    head: impl Fn(usize) -> [u8; HEADER_LEN],
) -> MessageLayout {
    if len == 0 {
        return MessageLayout::Gather;
    }
    let segment = gro_segment.filter(|&g| g > 0 && g < len).unwrap_or(len.max(1));
    let count = len.div_ceil(segment);
    let (mut landed, mut last_payload, mut used) = (0, 0, 0);
    for (j, bytes) in predicted.enumerate() {
        if j == count {
            break;
        }
        let datagram = if j + 1 < count { segment } else { len - (count - 1) * segment };
        let fits = datagram == bytes || (j + 1 == count && (HEADER_LEN..bytes).contains(&datagram));
        if !fits || u16::from_le_bytes([head(j)[6], head(j)[7]]) as usize != HEADER_LEN {
            return MessageLayout::Gather;
        }
        landed += 1;
        last_payload = datagram - HEADER_LEN;
        used += datagram;
    }
    if landed < count && used != landed * segment {
        return MessageLayout::Gather;
    }
    MessageLayout::Aligned { landed, last_payload, tail: len - used }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(len: u16) -> impl Fn(usize) -> [u8; HEADER_LEN] {
        move |_| {
            let mut h = [0; HEADER_LEN];
            h[6..8].copy_from_slice(&len.to_le_bytes());
            h
        }
    }

    #[test]
    fn layouts_of_receive_buffers() {
        let plain = || head(HEADER_LEN as u16);
        let d = 1000 + HEADER_LEN;
        // Seven full datagrams over seven targets.
        assert_eq!(
            message_layout(7 * d, Some(d), [d; 7].into_iter(), plain()),
            MessageLayout::Aligned { landed: 7, last_payload: 1000, tail: 0 }
        );
        // Three of seven (the GRO buffer ended early).
        assert_eq!(
            message_layout(3 * d, Some(d), [d; 7].into_iter(), plain()),
            MessageLayout::Aligned { landed: 3, last_payload: 1000, tail: 0 }
        );
        // Two full then a short last datagram over a full target.
        assert_eq!(
            message_layout(2 * d + 548, Some(d), [d; 7].into_iter(), plain()),
            MessageLayout::Aligned { landed: 3, last_payload: 500, tail: 0 }
        );
        // More datagrams than targets: the rest are whole in the tail.
        assert_eq!(
            message_layout(5 * d, Some(d), [d; 2].into_iter(), plain()),
            MessageLayout::Aligned { landed: 2, last_payload: 1000, tail: 3 * d }
        );
        // No targets: the plain buffer holds everything.
        assert_eq!(
            message_layout(5 * d, Some(d), std::iter::empty(), plain()),
            MessageLayout::Aligned { landed: 0, last_payload: 0, tail: 5 * d }
        );
        // Another datagram size, an extended header, a runt: gather.
        assert_eq!(message_layout(3 * 900, Some(900), [d; 7].into_iter(), plain()), MessageLayout::Gather);
        assert_eq!(message_layout(2 * d, Some(d), [d; 7].into_iter(), head(64)), MessageLayout::Gather);
        assert_eq!(message_layout(20, None, [d; 7].into_iter(), plain()), MessageLayout::Gather);
        // A short predicted datagram followed by more in the same buffer.
        assert_eq!(message_layout(3 * d, Some(d), [d, 548, d].into_iter(), plain()), MessageLayout::Gather);
        // An empty datagram, and a one-byte one, over targets: gathered, so
        // that each is handed over and counted.
        assert_eq!(message_layout(0, None, [d; 7].into_iter(), plain()), MessageLayout::Gather);
        assert_eq!(message_layout(0, Some(d), std::iter::empty(), plain()), MessageLayout::Gather);
        assert_eq!(message_layout(1, None, [d; 7].into_iter(), plain()), MessageLayout::Gather);
        // A GRO buffer whose last datagram is one byte, past the targets.
        assert_eq!(
            message_layout(2 * d + 1, Some(d), [d; 2].into_iter(), plain()),
            MessageLayout::Aligned { landed: 2, last_payload: 1000, tail: 1 }
        );
    }

    /// The datagrams the receiver hands over for a buffer of `len` bytes laid
    /// out as `layout`: the landed ones and those of the tail, or, gathered,
    /// every datagram of the buffer.
    fn handed_over(layout: MessageLayout, len: usize, gro_segment: Option<usize>) -> usize {
        use crate::ingest::batch::datagram_count;
        match layout {
            MessageLayout::Aligned { landed, tail, .. } => {
                landed + if tail > 0 { datagram_count(tail, gro_segment) } else { 0 }
            }
            MessageLayout::Gather => datagram_count(len, gro_segment),
        }
    }

    proptest::proptest! {
        /// Whatever a receive buffer holds (empty, one byte, GRO buffers of
        /// any segment size, over any targets), its layout accounts for
        /// exactly the datagrams the buffer holds: none is lost between the
        /// landed ones and the tail.
        #[test]
        fn a_layout_accounts_for_every_datagram_of_its_buffer(
            len in proptest::prop_oneof![0usize..3, 0usize..8000],
            gro_segment in proptest::option::of(0usize..3000),
            predicted in proptest::collection::vec(0usize..3000, 0..8),
            header_len in proptest::prop_oneof![proptest::strategy::Just(HEADER_LEN as u16), 0u16..100],
        ) {
            let layout = message_layout(len, gro_segment, predicted.into_iter(), head(header_len));
            let holds = crate::ingest::batch::datagram_count(len, gro_segment);
            proptest::prop_assert_eq!(handed_over(layout, len, gro_segment), holds, "{:?}", layout);
        }
    }

    fn plan(targets: &[(u64, usize, usize)]) -> LandingPlan {
        let mut p = LandingPlan::default();
        for &(ring_seq, offset, len) in targets {
            p.push(LandingTarget { ring_seq, offset, len }, std::ptr::null_mut());
        }
        p.end_group();
        p
    }

    #[test]
    fn pending_finds_exactly_the_unhandled_overlapping_targets() {
        let mut p = plan(&[(3, 0, 100), (3, 100, 100), (3, 200, 50), (4, 0, 100), (4, 100, 100)]);
        for k in 0..5 {
            p.set_arrived(k, p.target(k).len);
        }
        let found =
            |p: &LandingPlan, seq, r: std::ops::Range<usize>| p.pending_in(seq, r).collect::<Vec<_>>();
        assert_eq!(found(&p, 3, 0..1), vec![0]);
        assert_eq!(found(&p, 3, 99..101), vec![0, 1]);
        assert_eq!(found(&p, 3, 100..200), vec![1]);
        assert_eq!(found(&p, 3, 250..400), Vec::<usize>::new());
        assert_eq!(found(&p, 4, 50..150), vec![3, 4]);
        assert_eq!(found(&p, 5, 0..1000), Vec::<usize>::new());
        p.take(1);
        assert_eq!(found(&p, 3, 0..250), vec![0, 2]);
        p.spill(2, &[7; 50]);
        assert_eq!(found(&p, 3, 0..250), vec![0]);
        assert_eq!(p.landed(2), Landed::Spilled { at: 0, len: 50 });
        assert_eq!(p.spilled(0, 50), &[7; 50][..]);
    }

    #[test]
    fn layouts_compare_targets_addresses_and_groups() {
        let a = plan(&[(3, 0, 100), (3, 100, 100)]);
        let mut b = LandingPlan::default();
        assert!(!b.same_layout(&a));
        b.copy_layout(&a);
        assert!(b.same_layout(&a) && a.same_layout(&b));
        assert_eq!((b.groups(), b.target(1), b.landed(1)), (1, a.target(1), Landed::Empty));
        // Another length, another address, or another grouping is another layout.
        assert!(!plan(&[(3, 0, 100), (3, 100, 99)]).same_layout(&a));
        let mut moved = LandingPlan::default();
        moved.push(LandingTarget { ring_seq: 3, offset: 0, len: 100 }, std::ptr::null_mut());
        moved.push(LandingTarget { ring_seq: 3, offset: 100, len: 100 }, 8 as *mut u8);
        moved.end_group();
        assert!(!moved.same_layout(&a));
        let mut split = LandingPlan::default();
        split.push(a.target(0), std::ptr::null_mut());
        split.end_group();
        split.push(a.target(1), std::ptr::null_mut());
        split.end_group();
        assert!(!split.same_layout(&a));
    }

    #[test]
    fn groups_split_the_targets_in_order() {
        let mut p = LandingPlan::default();
        for i in 0..5 {
            p.push(LandingTarget { ring_seq: 1, offset: i * 10, len: 10 }, std::ptr::null_mut());
            if i == 1 {
                p.end_group();
            }
        }
        assert_eq!(p.open_group_bytes(), 3 * (HEADER_LEN + 10));
        p.end_group();
        p.end_group();
        assert_eq!(p.groups(), 2);
        assert_eq!((p.group(0), p.group(1)), (0..2, 2..5));
    }
}
