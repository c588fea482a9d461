//! A set of CPUs in the kernel's list format (`0-7,16-23`), as found in
//! `/sys/devices/system/node/node*/cpulist`.

use serde::{Serialize, Serializer};
use std::fmt;

/// The most CPUs one list may name; a list claiming more is not believed.
const MAX_CPUS: u64 = 1 << 16;

/// CPUs as sorted, disjoint inclusive ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CpuList {
    /// Inclusive `(first, last)` ranges, ascending and non-overlapping.
    ranges: Vec<(u32, u32)>,
}

impl CpuList {
    /// Parses `0-7,16-23` (whitespace around it ignored, empty = no CPUs);
    /// `None` for anything malformed, descending or overlapping, or naming
    /// more than 65536 CPUs.
    pub fn parse(text: &str) -> Option<CpuList> {
        let text = text.trim();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        let mut total: u64 = 0;
        if text.is_empty() {
            return Some(CpuList { ranges });
        }
        for part in text.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
                None => {
                    let cpu = part.trim().parse::<u32>().ok()?;
                    (cpu, cpu)
                }
            };
            if first > last || ranges.last().is_some_and(|&(_, prev)| first <= prev) {
                return None;
            }
            total = total.checked_add(u64::from(last - first) + 1)?;
            if total > MAX_CPUS {
                return None;
            }
            ranges.push((first, last));
        }
        debug_assert!(ranges.windows(2).all(|w| w[0].1 < w[1].0));
        Some(CpuList { ranges })
    }

    /// How many CPUs the list names.
    pub fn count(&self) -> usize {
        self.ranges.iter().map(|&(a, b)| (b - a) as usize + 1).sum()
    }

    /// The CPUs, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.ranges.iter().flat_map(|&(a, b)| a..=b)
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, &(a, b)) in self.ranges.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            if a == b { write!(f, "{sep}{a}")? } else { write!(f, "{sep}{a}-{b}")? }
        }
        Ok(())
    }
}

impl Serialize for CpuList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles_and_prints_them_back() {
        let list = CpuList::parse("0-7,16-23\n").unwrap();
        assert_eq!(list.count(), 16);
        assert_eq!(list.iter().take(9).collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5, 6, 7, 16]);
        assert_eq!(list.to_string(), "0-7,16-23");
        let single = CpuList::parse("3,5-6").unwrap();
        assert_eq!(single.iter().collect::<Vec<_>>(), [3, 5, 6]);
        assert_eq!(single.to_string(), "3,5-6");
        assert_eq!(CpuList::parse("").unwrap().count(), 0);
    }

    #[test]
    fn rejects_lies_and_garbage() {
        for bad in ["7-0", "0-", "a", "0-3,2-5", "4,1", "0-4294967295", "1,,2", "-1"] {
            assert_eq!(CpuList::parse(bad), None, "{bad:?}");
        }
    }
}
