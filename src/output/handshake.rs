//! The attach handshake on the output socket, byte by byte (little-endian):
//! the consumer's [`AttachRequest`] and the appliance's [`Hello`], which
//! comes with the region file descriptors (SCM_RIGHTS) when accepted.

use super::layout::{MemoryKind, OUTPUT_LAYOUT_VERSION, OutputGeometry};
use thiserror::Error;

/// Magic of an attach request ("FLOA").
pub const REQUEST_MAGIC: u32 = u32::from_le_bytes(*b"FLOA");
/// Magic of a hello ("FLOH").
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"FLOH");
/// Bytes of an attach request.
pub const REQUEST_BYTES: usize = 16;
/// Bytes of a hello.
pub const HELLO_BYTES: usize = 384;
/// Bytes of a hello's message (a refusal's reason).
const MESSAGE_BYTES: usize = HELLO_BYTES - 132;

/// What a consumer sends first: the layout version it was built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttachRequest {
    pub version: u32,
    pub pid: u32,
}

impl AttachRequest {
    /// This build's request.
    pub fn current() -> Self {
        Self { version: OUTPUT_LAYOUT_VERSION, pid: std::process::id() }
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.version.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b
    }

    /// `None` when the bytes are not an attach request.
    pub fn decode(b: &[u8; REQUEST_BYTES]) -> Option<Self> {
        (u32_at(b, 0) == REQUEST_MAGIC).then(|| Self { version: u32_at(b, 4), pid: u32_at(b, 8) })
    }
}

/// The appliance's answer: the geometry and memory kind (accepted), or a
/// refusal with its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    Accepted {
        version: u32,
        kind: MemoryKind,
        geometry: OutputGeometry,
        device_ordinal: i32,
        /// The consumer's line in the control block.
        consumer_index: u32,
        /// File descriptors sent with the hello: control, then data (host memory only).
        fd_count: u32,
        /// `cuIpcGetMemHandle` bytes of the data region (device memory only).
        ipc_handle: [u8; 64],
    },
    Refused(String),
}

/// Why a hello could not be decoded: the other end of the socket is not a
/// frameloop appliance of this release, or its answer is damaged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HelloError {
    /// The answer does not start with [`HELLO_MAGIC`]: the socket belongs
    /// to something else. Point `--socket` at the appliance's `output.socket`.
    #[error("the socket did not answer with a frameloop output hello; check --socket")]
    NotAHello,
    /// The hello is neither accepted nor refused: the appliance is of
    /// another release. Use a consumer of the appliance's release.
    #[error("the hello has an unknown status {0}")]
    UnknownStatus(u32),
    /// The hello names a memory kind this build does not know: the
    /// appliance is of another release. Use a consumer of its release.
    #[error("the hello names an unknown memory kind {0}")]
    UnknownMemoryKind(u32),
    /// The hello's sizes contradict each other, so nothing is mapped. The
    /// appliance is of another release or the bytes were damaged; restart
    /// the consumer against an appliance of its release.
    #[error("the hello's geometry is inconsistent ({slots} slots, stride {stride}, {capacity} samples)")]
    InconsistentGeometry {
        /// Slots the hello claims.
        slots: usize,
        /// Slot stride (bytes) the hello claims.
        stride: usize,
        /// Samples per slot the hello claims.
        capacity: usize,
    },
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..4].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
        match self {
            Hello::Accepted {
                version,
                kind,
                geometry,
                device_ordinal,
                consumer_index,
                fd_count,
                ipc_handle,
            } => {
                let words = [
                    0,
                    *version,
                    *kind as u32,
                    geometry.slot_count as u32,
                    geometry.slot_stride as u32,
                    geometry.sample_capacity as u32,
                    *device_ordinal as u32,
                    *consumer_index,
                    *fd_count,
                ];
                for (i, w) in words.iter().enumerate() {
                    b[4 + 4 * i..8 + 4 * i].copy_from_slice(&w.to_le_bytes());
                }
                b[40..48].copy_from_slice(&(geometry.control_bytes().unwrap_or(0) as u64).to_le_bytes());
                b[48..56].copy_from_slice(&(geometry.data_bytes().unwrap_or(0) as u64).to_le_bytes());
                b[64..128].copy_from_slice(ipc_handle);
            }
            Hello::Refused(message) => {
                b[4..8].copy_from_slice(&1u32.to_le_bytes());
                b[8..12].copy_from_slice(&OUTPUT_LAYOUT_VERSION.to_le_bytes());
                let mut len = message.len().min(MESSAGE_BYTES);
                while !message.is_char_boundary(len) {
                    len -= 1;
                }
                b[128..132].copy_from_slice(&(len as u32).to_le_bytes());
                b[132..132 + len].copy_from_slice(&message.as_bytes()[..len]);
            }
        }
        b
    }

    /// Decodes a hello; `Err` says what is wrong with it (a hello that lies
    /// about its sizes is refused here, before anything is mapped).
    pub fn decode(b: &[u8; HELLO_BYTES]) -> Result<Self, HelloError> {
        if u32_at(b, 0) != HELLO_MAGIC {
            return Err(HelloError::NotAHello);
        }
        match u32_at(b, 4) {
            0 => {}
            1 => {
                let len = (u32_at(b, 128) as usize).min(MESSAGE_BYTES);
                return Ok(Hello::Refused(String::from_utf8_lossy(&b[132..132 + len]).into_owned()));
            }
            status => return Err(HelloError::UnknownStatus(status)),
        }
        let version = u32_at(b, 8);
        let kind =
            MemoryKind::from_code(u32_at(b, 12)).ok_or(HelloError::UnknownMemoryKind(u32_at(b, 12)))?;
        let (slots, stride, capacity) =
            (u32_at(b, 16) as usize, u32_at(b, 20) as usize, u32_at(b, 24) as usize);
        let geometry = OutputGeometry::new(slots, capacity)
            .filter(|g| g.slot_stride == stride)
            .filter(|g| g.control_bytes().map(|n| n as u64) == Some(u64_at(b, 40)))
            .filter(|g| g.data_bytes().map(|n| n as u64) == Some(u64_at(b, 48)))
            .ok_or(HelloError::InconsistentGeometry { slots, stride, capacity })?;
        Ok(Hello::Accepted {
            version,
            kind,
            geometry,
            device_ordinal: u32_at(b, 28) as i32,
            consumer_index: u32_at(b, 32),
            fd_count: u32_at(b, 36),
            ipc_handle: b[64..128].try_into().expect("64 bytes"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_and_requests_round_trip() {
        let hello = Hello::Accepted {
            version: OUTPUT_LAYOUT_VERSION,
            kind: MemoryKind::CudaDevice,
            geometry: OutputGeometry::new(8, 1000).unwrap(),
            device_ordinal: 1,
            consumer_index: 3,
            fd_count: 1,
            ipc_handle: [9; 64],
        };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
        let refused = Hello::Refused("é".repeat(200));
        let Ok(Hello::Refused(text)) = Hello::decode(&refused.encode()) else { panic!("a refusal") };
        assert_eq!(text, "é".repeat(126), "cut at a character boundary");
        let req = AttachRequest { version: 7, pid: 42 };
        assert_eq!(AttachRequest::decode(&req.encode()), Some(req));
        assert_eq!(AttachRequest::decode(&[0; REQUEST_BYTES]), None);
    }

    #[test]
    fn a_hello_that_lies_about_its_sizes_is_refused() {
        let mut b = Hello::Accepted {
            version: OUTPUT_LAYOUT_VERSION,
            kind: MemoryKind::HostMemfd,
            geometry: OutputGeometry::new(8, 1000).unwrap(),
            device_ordinal: -1,
            consumer_index: 0,
            fd_count: 2,
            ipc_handle: [0; 64],
        }
        .encode();
        b[48..56].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Hello::decode(&b).unwrap_err().to_string().contains("inconsistent"));
        b[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert!(Hello::decode(&b).is_err());
        assert!(Hello::decode(&[0; HELLO_BYTES]).unwrap_err().to_string().contains("--socket"));
    }
}
