//! Extended RTP sequence numbers: the 32-bit number of RFC 4175 (payload
//! header high half, RTP header low half), duplicate and reorder detection in
//! a window of recent numbers, and gap counting.
//!
//! Some senders leave the payload's high half at zero. Until a non-zero high
//! half is seen, the 16-bit RTP number is unwrapped instead (the number
//! closest to the newest one wins), so such senders keep working across the
//! 16-bit wrap; after that the sender's own 32-bit number is trusted.

/// Sequence numbers remembered behind the newest one (for duplicates and reordering).
pub const REORDER_WINDOW: u32 = 1024;
/// A forward jump larger than this restarts the tracking instead of counting a gap.
pub const MAX_FORWARD_JUMP: u32 = 1 << 20;
/// This many stale numbers in a row restart the tracking (the sender restarted).
pub const STALE_RUN_RESYNC: u32 = 32;

/// What one sequence number is, relative to those seen before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqVerdict {
    /// Newer than every number seen; `gap` numbers in between were skipped.
    Newer { gap: u32 },
    /// Older than the newest, inside the window, not seen before.
    Reordered,
    /// Seen before.
    Duplicate,
    /// Older than the window.
    Stale,
    /// First number, or the tracking restarted on it.
    Restart,
}

impl SeqVerdict {
    /// True when the packet should be used.
    pub fn accepted(self) -> bool {
        !matches!(self, SeqVerdict::Duplicate | SeqVerdict::Stale)
    }
}

/// Tracks one stream's extended sequence numbers.
#[derive(Debug, Clone)]
pub struct SeqTracker {
    /// Newest number seen; `None` before the first.
    highest: Option<u32>,
    /// Bit `s % REORDER_WINDOW` is set when `s` was seen, for
    /// `highest - REORDER_WINDOW < s <= highest`.
    window: [u64; (REORDER_WINDOW / 64) as usize],
    /// The sender fills the high half of the extended number.
    sender_extends: bool,
    stale_run: u32,
}

impl Default for SeqTracker {
    fn default() -> Self {
        Self {
            highest: None,
            window: [0; (REORDER_WINDOW / 64) as usize],
            sender_extends: false,
            stale_run: 0,
        }
    }
}

impl SeqTracker {
    /// Forgets everything (a new stream).
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    fn bit(&self, s: u32) -> bool {
        let i = s % REORDER_WINDOW;
        self.window[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    fn set(&mut self, s: u32, on: bool) {
        let i = s % REORDER_WINDOW;
        let word = &mut self.window[(i / 64) as usize];
        if on {
            *word |= 1 << (i % 64);
        } else {
            *word &= !(1 << (i % 64));
        }
    }

    /// The extended number of a packet with RTP number `seq` and payload high half `high`.
    pub fn extend(&mut self, seq: u16, high: u16) -> u32 {
        if high != 0 {
            self.sender_extends = true;
        }
        match self.highest {
            Some(h) if !self.sender_extends => {
                let base = (h & 0xffff_0000) | seq as u32;
                [base.wrapping_sub(0x1_0000), base, base.wrapping_add(0x1_0000)]
                    .into_iter()
                    .min_by_key(|c| (c.wrapping_sub(h) as i32).unsigned_abs())
                    .unwrap_or(base)
            }
            _ => (high as u32) << 16 | seq as u32,
        }
    }

    fn restart(&mut self, s: u32) -> SeqVerdict {
        let sender_extends = self.sender_extends;
        self.reset();
        self.sender_extends = sender_extends;
        self.highest = Some(s);
        self.set(s, true);
        SeqVerdict::Restart
    }

    /// Classifies extended number `s` and records it.
    pub fn observe(&mut self, s: u32) -> SeqVerdict {
        let Some(h) = self.highest else { return self.restart(s) };
        let d = s.wrapping_sub(h) as i32;
        if d > 0 {
            self.stale_run = 0;
            if d as u32 > MAX_FORWARD_JUMP {
                return self.restart(s);
            }
            if d as u32 >= REORDER_WINDOW {
                self.window = [0; (REORDER_WINDOW / 64) as usize];
            } else {
                for k in 1..=d as u32 {
                    self.set(h.wrapping_add(k), false);
                }
            }
            self.set(s, true);
            self.highest = Some(s);
            return SeqVerdict::Newer { gap: d as u32 - 1 };
        }
        if d == 0 {
            return SeqVerdict::Duplicate;
        }
        if d.unsigned_abs() < REORDER_WINDOW {
            self.stale_run = 0;
            if self.bit(s) {
                return SeqVerdict::Duplicate;
            }
            self.set(s, true);
            return SeqVerdict::Reordered;
        }
        self.stale_run += 1;
        if self.stale_run >= STALE_RUN_RESYNC {
            return self.restart(s);
        }
        SeqVerdict::Stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut SeqTracker, seq: u16, high: u16) -> (u32, SeqVerdict) {
        let s = t.extend(seq, high);
        (s, t.observe(s))
    }

    #[test]
    fn counts_gaps_reorder_and_duplicates() {
        let mut t = SeqTracker::default();
        assert_eq!(feed(&mut t, 10, 0), (10, SeqVerdict::Restart));
        assert_eq!(feed(&mut t, 11, 0).1, SeqVerdict::Newer { gap: 0 });
        assert_eq!(feed(&mut t, 14, 0).1, SeqVerdict::Newer { gap: 2 });
        assert_eq!(feed(&mut t, 12, 0).1, SeqVerdict::Reordered);
        assert_eq!(feed(&mut t, 12, 0).1, SeqVerdict::Duplicate);
        assert_eq!(feed(&mut t, 14, 0).1, SeqVerdict::Duplicate);
        assert_eq!(feed(&mut t, 13, 0).1, SeqVerdict::Reordered);
    }

    #[test]
    fn unwraps_16_bits_when_the_sender_leaves_the_high_half_zero() {
        let mut t = SeqTracker::default();
        feed(&mut t, 0xfffe, 0);
        assert_eq!(feed(&mut t, 0xffff, 0), (0xffff, SeqVerdict::Newer { gap: 0 }));
        assert_eq!(feed(&mut t, 1, 0), (0x1_0001, SeqVerdict::Newer { gap: 1 }));
        assert_eq!(feed(&mut t, 0, 0), (0x1_0000, SeqVerdict::Reordered));
    }

    #[test]
    fn trusts_the_senders_high_half() {
        let mut t = SeqTracker::default();
        feed(&mut t, 0xffff, 4);
        assert_eq!(feed(&mut t, 0, 5), (0x5_0000, SeqVerdict::Newer { gap: 0 }));
        // A loss of more than 65536 packets is counted exactly.
        assert_eq!(feed(&mut t, 0, 6).1, SeqVerdict::Newer { gap: 0xffff });
        // A jump past MAX_FORWARD_JUMP is a restart, not a loss of millions of packets.
        assert_eq!(feed(&mut t, 0, 0x7000).1, SeqVerdict::Restart);
    }

    #[test]
    fn stale_numbers_are_dropped_then_resync() {
        let mut t = SeqTracker::default();
        feed(&mut t, 5000, 0);
        for i in 0..STALE_RUN_RESYNC - 1 {
            assert_eq!(feed(&mut t, 100 + i as u16, 0).1, SeqVerdict::Stale);
        }
        assert_eq!(feed(&mut t, 200, 0).1, SeqVerdict::Restart);
        assert_eq!(feed(&mut t, 201, 0).1, SeqVerdict::Newer { gap: 0 });
    }
}
