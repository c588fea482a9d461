//! Frame payload patterns: every byte is a pure function of (stream, frame
//! sequence, offset), so a receiver can recompute and verify any frame.
//!
//! The payload is a sequence of little-endian 64-bit words; word `w` covers
//! frame bytes `8w..8w+8` (the last word is cut at the frame length).
//! - `counter`: word `w` = `w | stream << 32 | (seq & 0xffff) << 48`, so each
//!   word names its own position and a misplaced packet is visible.
//! - `random`: word `w` = splitmix64 of a seed derived from (stream, seq) and
//!   `w`, incompressible data with the same random access.

/// How the sender fills frame payloads.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Each 8-byte word holds its word index, the stream id and the low 16
    /// bits of the frame sequence.
    #[default]
    Counter,
    /// Pseudo-random words seeded by stream and frame sequence (splitmix64).
    Random,
    /// Every frame of every stream carries frame 0 of stream 0's `counter`
    /// payload, written once: a load generator that spends nothing per frame
    /// on content (for throughput runs where no receiver checks the bytes).
    Static,
}

const WORD: usize = 8;

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pattern {
    /// The 64-bit word at word index `word` of frame (`stream`, `seq`).
    pub fn word(self, stream: u32, seq: u64, word: u64) -> u64 {
        match self {
            Pattern::Counter => (word & 0xffff_ffff) | (stream as u64 & 0xffff) << 32 | (seq & 0xffff) << 48,
            Pattern::Static => Pattern::Counter.word(0, 0, word),
            Pattern::Random => {
                let seed = splitmix64(seq ^ (stream as u64).rotate_left(40));
                splitmix64(seed.wrapping_add(word.wrapping_mul(0xD1B5_4A32_D192_ED03)))
            }
        }
    }

    /// The byte at `offset` of frame (`stream`, `seq`).
    pub fn byte(self, stream: u32, seq: u64, offset: u64) -> u8 {
        self.word(stream, seq, offset / WORD as u64).to_le_bytes()[(offset % WORD as u64) as usize]
    }

    /// Fills `out` with the frame bytes `[offset, offset + out.len())` of
    /// frame (`stream`, `seq`).
    pub fn fill(self, stream: u32, seq: u64, offset: u64, out: &mut [u8]) {
        // Unaligned head, whole words, then the tail.
        let head = ((WORD as u64 - offset % WORD as u64) % WORD as u64).min(out.len() as u64) as usize;
        for (i, b) in out[..head].iter_mut().enumerate() {
            *b = self.byte(stream, seq, offset + i as u64);
        }
        let first_word = (offset + head as u64) / WORD as u64;
        let total = out.len();
        let mut chunks = out[head..].chunks_exact_mut(WORD);
        for (i, chunk) in (&mut chunks).enumerate() {
            chunk.copy_from_slice(&self.word(stream, seq, first_word + i as u64).to_le_bytes());
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let tail_start = offset + (total - tail.len()) as u64;
            let bytes = self.word(stream, seq, tail_start / WORD as u64).to_le_bytes();
            tail.copy_from_slice(&bytes[..tail.len()]);
        }
    }

    /// The whole payload of a frame of `len` bytes.
    pub fn frame(self, stream: u32, seq: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(stream, seq, 0, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_frames_are_all_frame_zero_of_stream_zero() {
        for (stream, seq) in [(0, 0), (3, 77), (9, 1 << 40)] {
            assert_eq!(Pattern::Static.frame(stream, seq, 100), Pattern::Counter.frame(0, 0, 100));
        }
    }

    #[test]
    fn fill_agrees_with_byte_at_any_alignment() {
        for pattern in [Pattern::Counter, Pattern::Random] {
            for offset in 0..17u64 {
                for len in [0usize, 1, 5, 8, 9, 31, 64] {
                    let mut buf = vec![0xAA; len];
                    pattern.fill(3, 77, offset, &mut buf);
                    for (i, &b) in buf.iter().enumerate() {
                        assert_eq!(
                            b,
                            pattern.byte(3, 77, offset + i as u64),
                            "{pattern:?} {offset} {len} {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn counter_words_name_their_position_stream_and_sequence() {
        let f = Pattern::Counter.frame(5, 0x1_0002, 24);
        let w2 = u64::from_le_bytes(f[16..24].try_into().unwrap());
        assert_eq!(w2 & 0xffff_ffff, 2);
        assert_eq!((w2 >> 32) & 0xffff, 5);
        assert_eq!(w2 >> 48, 2);
    }

    #[test]
    fn frames_differ_between_streams_and_sequences() {
        for pattern in [Pattern::Counter, Pattern::Random] {
            let a = pattern.frame(0, 1, 256);
            assert_ne!(a, pattern.frame(1, 1, 256));
            assert_ne!(a, pattern.frame(0, 2, 256));
            assert_eq!(a, pattern.frame(0, 1, 256));
        }
    }
}
