//! What the reassembler remembers of frames it has finished: their keys,
//! to tell a `late` packet from one that starts a new frame (rule 3 of
//! [`super::reassembly`]), and each stream's high-water mark, to tell a
//! restarted sender from reordering (rule 7).

/// A frame's identity: `(stream_id, frame_seq)`.
pub(super) type FrameKey = (u32, u64);

/// How many finished frame keys are remembered to tell `late` packets apart.
pub const RECENT_FRAMES: usize = 4096;
/// How many streams have a high-water mark for restart detection; later
/// streams are reassembled as usual but a restart of theirs is not detected.
pub const TRACKED_STREAMS: usize = 256;

/// How a remembered frame ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// No frame of that key is remembered.
    Empty,
    /// Published, complete or not.
    Published,
    /// Dropped whole (too large, or the ring was full).
    Dropped,
}

/// Direct-mapped memory of recently finished frames (published or dropped).
pub(super) struct RecentFrames {
    entries: Box<[(FrameKey, Outcome)]>,
}

impl RecentFrames {
    pub(super) fn new() -> Self {
        Self { entries: vec![((0, 0), Outcome::Empty); RECENT_FRAMES].into_boxed_slice() }
    }
    fn index(key: FrameKey) -> usize {
        // Consecutive sequences of one stream take consecutive entries.
        let mixed = key.1 ^ (key.0 as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed % RECENT_FRAMES as u64) as usize
    }
    pub(super) fn insert(&mut self, key: FrameKey, outcome: Outcome) {
        self.entries[Self::index(key)] = (key, outcome);
    }
    pub(super) fn get(&self, key: FrameKey) -> Outcome {
        match self.entries[Self::index(key)] {
            (k, outcome) if k == key => outcome,
            _ => Outcome::Empty,
        }
    }
    /// Forgets every finished frame of `stream_id` (after a restart).
    pub(super) fn forget_stream(&mut self, stream_id: u32) {
        for e in self.entries.iter_mut().filter(|e| e.0.0 == stream_id) {
            *e = ((0, 0), Outcome::Empty);
        }
    }
}

/// The high-water mark (highest frame sequence that started a frame) of each
/// tracked stream, in a vector allocated once.
pub(super) struct HighWaterMarks {
    /// `(stream_id, high-water mark)`. Invariant: `len() <= TRACKED_STREAMS`.
    marks: Vec<(u32, u64)>,
}

impl HighWaterMarks {
    pub(super) fn new() -> Self {
        Self { marks: Vec::with_capacity(TRACKED_STREAMS) }
    }
    pub(super) fn get(&self, stream_id: u32) -> Option<u64> {
        self.marks.iter().find(|m| m.0 == stream_id).map(|m| m.1)
    }
    /// Sets the stream's mark to `seq` (`raise`: to the larger of the two);
    /// an untracked stream is tracked while there is room.
    pub(super) fn update(&mut self, stream_id: u32, seq: u64, raise: bool) {
        if let Some(m) = self.marks.iter_mut().find(|m| m.0 == stream_id) {
            m.1 = if raise { m.1.max(seq) } else { seq };
        } else if self.marks.len() < TRACKED_STREAMS {
            self.marks.push((stream_id, seq));
        }
        debug_assert!(self.marks.len() <= TRACKED_STREAMS);
    }
}
