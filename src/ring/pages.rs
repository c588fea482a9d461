//! The pages under ring memory: an anonymous mapping, optionally aligned to
//! and advised for 2 MiB transparent huge pages, and how much of it the
//! kernel actually backed with them.
//!
//! The receiver's kernel copies every datagram into a slot the core has not
//! touched since the ring last went round; with 4 KiB pages each 9 KB
//! datagram also crosses two or three pages whose translations are not in
//! the TLB, and in a virtual machine each of those misses walks two sets of
//! page tables. A slot in 2 MiB pages costs one translation for hundreds of
//! datagrams.

use memmap2::{Advice, MmapMut, MmapOptions};
use std::io;

/// The size of a transparent huge page on x86-64 and most arm64 kernels.
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Zeroed, page-aligned anonymous memory, every page faulted in at creation
/// (except [`RingPages::lazy`]'s).
pub struct RingPages {
    /// Invariant: `map.as_ptr() + offset` is `ptr`, and `offset + len <=
    /// map.len()`; `ptr` is 2 MiB aligned when huge pages were asked for.
    ptr: *mut u8,
    len: usize,
    offset: usize,
    huge_requested: bool,
    map: MmapMut,
}

// SAFETY: plain memory owned by the value; access is governed by the ring
// protocols built on top, which hand out disjoint regions.
unsafe impl Send for RingPages {}
// SAFETY: as above.
unsafe impl Sync for RingPages {}

impl RingPages {
    /// Maps `len` bytes (rounded up to a page, at least one) and faults every
    /// page in, so that the receiver's first pass over the ring takes no page
    /// faults. With `huge`, the range is aligned to [`HUGE_PAGE_BYTES`], rounded
    /// up to a multiple of it and advised `MADV_HUGEPAGE` before it is touched;
    /// whether the kernel honours that (`/sys/kernel/mm/transparent_hugepage`)
    /// is what [`RingPages::huge_page_bytes`] reports.
    pub fn new(len: usize, huge: bool) -> io::Result<Self> {
        let (mut map, offset, len) = resident_mapping(len, huge)?;
        let ptr = map[offset..].as_mut_ptr();
        debug_assert!((ptr as usize).is_multiple_of(if huge { HUGE_PAGE_BYTES } else { 4096 }));
        Ok(Self { ptr, len, offset, huge_requested: huge, map })
    }

    /// Maps `len` bytes (rounded up to a page, at least one) in base pages,
    /// faulted in lazily as they are first touched.
    pub fn lazy(len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(4096);
        let mut map = MmapOptions::new().len(len).map_anon()?;
        let ptr = map.as_mut_ptr();
        Ok(Self { ptr, len, offset: 0, huge_requested: false, map })
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        debug_assert_eq!(self.ptr as usize, self.map.as_ptr() as usize + self.offset);
        self.ptr
    }

    /// Length in bytes (the requested length rounded up to the page size used).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: at least one page is mapped).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether huge pages were asked for.
    pub fn huge_requested(&self) -> bool {
        self.huge_requested
    }

    /// How many of the bytes the kernel backs with huge pages now, from
    /// `/proc/self/smaps`.
    pub fn huge_page_bytes(&self) -> io::Result<usize> {
        huge_page_bytes_in(self.ptr as usize, self.len)
    }
}

/// An anonymous mapping of `len` bytes (rounded up to a page, at least one)
/// with every page faulted in; with `huge`, the range starts on a
/// [`HUGE_PAGE_BYTES`] boundary, is rounded up to a multiple of it and is
/// advised `MADV_HUGEPAGE` before it is touched. Returns the mapping, where
/// the range starts in it and the range's length.
fn resident_mapping(len: usize, huge: bool) -> io::Result<(MmapMut, usize, usize)> {
    let len = len.max(1).next_multiple_of(if huge { HUGE_PAGE_BYTES } else { 4096 });
    if !huge {
        return Ok((MmapOptions::new().len(len).populate().map_anon()?, 0, len));
    }
    let padded = len.checked_add(HUGE_PAGE_BYTES).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a mapping of {len} bytes overflows the address space"),
        )
    })?;
    let mut map = MmapOptions::new().len(padded).map_anon()?;
    let base = map.as_mut_ptr() as usize;
    let offset = base.next_multiple_of(HUGE_PAGE_BYTES) - base;
    // EINVAL: a kernel built without transparent huge pages; the memory
    // is then served in base pages, which huge_page_bytes() says.
    match map.advise_range(Advice::HugePage, offset, len) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
        Err(e) => return Err(e),
    }
    // Touching one byte per base page faults the whole range in (a huge
    // page at a time where the kernel gives them); the bytes stay zero.
    for page in map[offset..offset + len].chunks_mut(4096) {
        page[0] = 0;
    }
    Ok((map, offset, len))
}

/// Zeroed, resident memory owned by one user, for buffers the process alone
/// reads and writes (the UDP receiver's receive batches): the pages of
/// [`RingPages::new`], reached as plain slices.
pub struct OwnedPages {
    /// Invariant: `offset + len <= map.len()`.
    map: MmapMut,
    offset: usize,
    len: usize,
}

impl OwnedPages {
    /// `len` zeroed bytes, every page faulted in, starting on a page
    /// boundary; with `huge`, on a [`HUGE_PAGE_BYTES`] boundary and advised
    /// for huge pages, as [`RingPages::new`] does.
    pub fn new(len: usize, huge: bool) -> io::Result<Self> {
        // The mapping's range is `len` rounded up, so it holds `len`.
        let (map, offset, mapped) = resident_mapping(len, huge)?;
        debug_assert!(len <= mapped && offset + mapped <= map.len());
        Ok(Self { map, offset, len })
    }

    /// The `len` bytes asked for.
    pub fn bytes(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }

    /// The `len` bytes asked for, to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map[self.offset..self.offset + self.len]
    }
}

/// The kernel's setting for transparent huge pages ("always", "madvise" or
/// "never", the bracketed word of `/sys/kernel/mm/transparent_hugepage/enabled`);
/// `None` where the kernel has none.
pub fn transparent_huge_page_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = s.find('[')? + 1;
    Some(s[start..start + s[start..].find(']')?].to_string())
}

/// Whether the kernel's setting ([`transparent_huge_page_mode`]) gives a
/// ring that asks for them huge pages: "always" or "madvise".
pub fn huge_pages_enabled(mode: Option<&str>) -> bool {
    matches!(mode, Some("always" | "madvise"))
}

/// What pages a ring will get: `requested` is `ring.huge_pages`, `mode` the
/// kernel's setting ([`transparent_huge_page_mode`]). For `frameloop
/// validate`, before any memory is mapped; what the kernel then gives is
/// [`RingPages::huge_page_bytes`] (fragmented memory can leave some of a
/// ring in base pages even so).
pub fn expected_paging(requested: bool, mode: Option<&str>) -> String {
    match (requested, mode) {
        (false, _) => "base pages (ring.huge_pages = false)".to_string(),
        (true, Some(m)) if huge_pages_enabled(mode) => {
            format!("2 MiB huge pages (transparent huge pages: {m})")
        }
        (true, Some(m)) => format!(
            "base pages: transparent huge pages are \"{m}\" on this machine; enable them with \
             echo madvise > /sys/kernel/mm/transparent_hugepage/enabled, or set ring.huge_pages = false"
        ),
        (true, None) => {
            "base pages: this kernel has no transparent huge pages (set ring.huge_pages = false)".to_string()
        }
    }
}

/// The `AnonHugePages` of the mappings in `/proc/self/smaps` that lie inside
/// `[start, start + len)` (a ring's mapping is its own, so the whole of it).
pub fn huge_page_bytes_in(start: usize, len: usize) -> io::Result<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    Ok(anon_huge_bytes(&smaps, start, start + len))
}

/// Sums `AnonHugePages` over the smaps entries whose range overlaps
/// `[start, end)`, each counted only for the overlap.
fn anon_huge_bytes(smaps: &str, start: usize, end: usize) -> usize {
    let mut total = 0usize;
    let mut inside: Option<usize> = None;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((lo, hi)) = range.split_once('-')
            && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        {
            let overlap = hi.min(end).saturating_sub(lo.max(start));
            inside = (overlap > 0).then_some(overlap);
            continue;
        }
        if let (Some(overlap), Some(rest)) = (inside, line.strip_prefix("AnonHugePages:")) {
            let kib: usize = rest.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            total += (kib * 1024).min(overlap);
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_rings_are_aligned_zeroed_and_backed_where_the_kernel_allows() {
        let pages = RingPages::new(5 << 20, true).unwrap();
        assert_eq!(pages.len(), 6 << 20, "rounded up to whole huge pages");
        assert!((pages.as_ptr() as usize).is_multiple_of(HUGE_PAGE_BYTES));
        // SAFETY: the mapping holds len() bytes and nothing else uses it.
        let bytes = unsafe { std::slice::from_raw_parts(pages.as_ptr(), pages.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        let huge = pages.huge_page_bytes().unwrap();
        assert!(huge <= pages.len());
        if huge_pages_enabled(transparent_huge_page_mode().as_deref()) {
            // With THP on, an aligned, advised, touched range gets huge pages
            // unless memory is too fragmented to compact; most of it must.
            assert!(huge >= 4 << 20, "{huge} bytes in huge pages");
        } else {
            assert_eq!(huge, 0);
        }
    }

    #[test]
    fn base_page_rings_take_no_huge_pages_unless_the_kernel_gives_them_to_all() {
        let pages = RingPages::new(3 << 20, false).unwrap();
        assert_eq!(pages.len(), 3 << 20);
        assert!((pages.as_ptr() as usize).is_multiple_of(4096));
        assert!(!pages.huge_requested());
        if transparent_huge_page_mode().as_deref() != Some("always") {
            assert_eq!(pages.huge_page_bytes().unwrap(), 0);
        }
    }

    #[test]
    fn the_expected_paging_follows_the_setting_and_says_how_to_change_it() {
        assert!(huge_pages_enabled(Some("always")) && huge_pages_enabled(Some("madvise")));
        assert!(!huge_pages_enabled(Some("never")) && !huge_pages_enabled(None));
        assert!(expected_paging(true, Some("madvise")).starts_with("2 MiB huge pages"));
        assert!(expected_paging(true, Some("always")).starts_with("2 MiB huge pages"));
        let never = expected_paging(true, Some("never"));
        assert!(never.starts_with("base pages") && never.contains("transparent_hugepage/enabled"), "{never}");
        assert!(expected_paging(true, None).contains("ring.huge_pages = false"));
        assert!(expected_paging(false, Some("always")).starts_with("base pages"));
    }

    #[test]
    fn smaps_sums_count_only_the_overlap_with_the_range() {
        let smaps = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0
Size:               4096 kB
AnonHugePages:      4096 kB
7f0000400000-7f0000600000 rw-p 00000000 00:00 0
AnonHugePages:      2048 kB
7f0000600000-7f0000800000 rw-p 00000000 00:00 0
AnonHugePages:         0 kB
";
        let base = 0x7f00_0000_0000usize;
        assert_eq!(anon_huge_bytes(smaps, base, base + (8 << 20)), 6 << 20);
        assert_eq!(anon_huge_bytes(smaps, base + (4 << 20), base + (6 << 20)), 2 << 20);
        assert_eq!(anon_huge_bytes(smaps, base, base + (1 << 20)), 1 << 20, "capped at the overlap");
        assert_eq!(anon_huge_bytes(smaps, base + (8 << 20), base + (9 << 20)), 0);
        assert_eq!(anon_huge_bytes("garbage\nAnonHugePages: x kB\n", base, base + 1), 0);
    }
}
