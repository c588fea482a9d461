//! Bringing slot bytes about to be written into the CPU's cache: prefetch
//! hints, and loads for what a hint does not get ahead of.

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

/// Loads one byte of every cache line of `bytes[range]`, so that the lines
/// are in this core's cache when they are written. For writes that are not
/// this thread's own stores (the kernel's copy of a datagram into a slot),
/// which a prefetch hint issued just before does not reliably get ahead
/// of; worth it only when the thread has nothing else to do, since each
/// line's load waits for memory as the write would have. Reads only; the
/// part of `range` past `bytes` is ignored.
pub fn touch_for_write(bytes: &[u8], range: Range<usize>) {
    let end = range.end.min(bytes.len());
    let misalign = bytes.as_ptr() as usize % CACHE_LINE;
    let mut at = range.start;
    while at < end {
        std::hint::black_box(bytes[at]);
        // The first byte of the next line.
        at = ((at + misalign) / CACHE_LINE + 1) * CACHE_LINE - misalign;
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
    fn touch_for_write_changes_no_byte_and_stays_inside_the_slice() {
        let buf = vec![5u8; 1000];
        for offset in [0, 1, 63] {
            let bytes = &buf[offset..900];
            for range in [0..bytes.len(), 10..11, 64..65, 899..5000, 7..7, 5000..6000] {
                touch_for_write(bytes, range);
            }
        }
        assert!(buf.iter().all(|&b| b == 5));
    }

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
