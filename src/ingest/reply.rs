//! The reply book: the newest admitted source address of each stream, noted
//! by the UDP receiver for the actuation outputs that answer the sensor
//! (`destination = "reply"`). Only sources `ingest.allow` admits are noted,
//! so a reply never goes where the config does not let frames come from.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Streams the book remembers; past this, new streams share the catch-all entry.
pub const MAX_STREAMS: usize = 1024;

/// The book's entries: `(stream, source)` pairs, and the newest source of
/// any datagram (for datagrams that name no stream, and streams past
/// [`MAX_STREAMS`]).
type Entries = (Vec<(u32, SocketAddr)>, Option<SocketAddr>);

/// Stream to newest source. Written by the receiving thread (a lock only
/// when a stream's source changes), read by the actuation sender.
#[derive(Debug, Default)]
pub struct ReplyBook {
    entries: Mutex<Entries>,
    /// Fingerprint of the pair noted last: the common case (the same sensor
    /// again) costs one load.
    last: AtomicU64,
}

fn fingerprint(stream: Option<u32>, source: SocketAddr) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (stream, source).hash(&mut h);
    h.finish() | 1
}

impl ReplyBook {
    /// Notes that a datagram of `stream` (`None`: the format names none)
    /// came from `source`, which the allowlist admitted.
    pub fn note(&self, stream: Option<u32>, source: SocketAddr) {
        let print = fingerprint(stream, source);
        if self.last.load(Ordering::Relaxed) == print {
            return;
        }
        let mut guard = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (streams, any) = &mut *guard;
        *any = Some(source);
        if let Some(stream) = stream {
            if let Some(entry) = streams.iter_mut().find(|(s, _)| *s == stream) {
                entry.1 = source;
            } else if streams.len() < MAX_STREAMS {
                streams.push((stream, source));
            }
        }
        self.last.store(print, Ordering::Relaxed);
    }

    /// Where a reply for `stream` goes: that stream's newest source, else
    /// the newest source of any datagram; `None` before any came.
    pub fn lookup(&self, stream: u32) -> Option<SocketAddr> {
        let guard = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.iter().find(|(s, _)| *s == stream).map(|(_, a)| *a).or(guard.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stream_keeps_its_newest_source_and_others_fall_back() {
        let book = ReplyBook::default();
        assert_eq!(book.lookup(1), None);
        let a: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let b: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        book.note(Some(1), a);
        book.note(Some(2), b);
        assert_eq!((book.lookup(1), book.lookup(2), book.lookup(9)), (Some(a), Some(b), Some(b)));
        book.note(Some(1), a);
        assert_eq!(book.lookup(9), Some(a), "an unknown stream goes to the newest source");
        book.note(Some(2), a);
        assert_eq!(book.lookup(2), Some(a), "a stream that moved replies to its new source");
        book.note(None, b);
        assert_eq!((book.lookup(1), book.lookup(7)), (Some(a), Some(b)));
    }
}
