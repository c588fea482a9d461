//! Cache-line prefetch hints for slot bytes about to be written.

use std::ops::Range;

/// Bytes of a CPU cache line, the step of [`prefetch_for_write`].
const CACHE_LINE: usize = 64;

/// Hints that `bytes[range]` will be written soon: asks the CPU to bring
/// their cache lines in now, so that the write does not wait for memory (the
/// slot of a large ring is rarely still in the cache). A hint only: nothing
/// is read or written, and the part of `range` past `bytes` is ignored.
pub fn prefetch_for_write(bytes: &[u8], range: Range<usize>) {
    let end = range.end.min(bytes.len());
    let mut at = range.start & !(CACHE_LINE - 1);
    while at < end {
        prefetch_line(bytes.as_ptr().wrapping_add(at));
        at += CACHE_LINE;
    }
}

/// Asks the CPU to load the cache line holding `p` (never faults).
#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint: it reads no memory architecturally
        // and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefetch_for_write_changes_no_byte_even_past_the_slice() {
        let slots = [vec![7u8; 200], vec![9u8; 200]];
        for range in [0..200, 150..10_000, 300..400, 5..5, usize::MAX - 64..usize::MAX] {
            prefetch_for_write(&slots[0], range);
        }
        for (slot, byte) in slots.iter().zip([7u8, 9]) {
            assert!(slot.iter().all(|&x| x == byte), "slot of {byte}s kept its bytes");
        }
    }
}
