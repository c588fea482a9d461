//! Reading pcap and pcapng captures packet by packet from any `Read`.
//!
//! - pcap: microsecond (`a1b2c3d4`) and nanosecond (`a1b23c4d`) magic, both
//!   byte orders.
//! - pcapng: several sections (each with its own byte order), several
//!   interfaces each with its own link type, `if_tsresol` (decimal or binary)
//!   and `if_tsoffset`; Enhanced, Simple and obsolete Packet Blocks; every
//!   other block is skipped without being held in memory.
//!
//! No length field is trusted for an allocation: a block or record larger
//! than [`MAX_BLOCK_LEN`] is an error, and buffers grow only as bytes
//! actually arrive, so a corrupt length costs at most what the file holds.
//! A file that ends inside a block is [`CaptureError::Truncated`]; one that
//! contradicts itself is [`CaptureError::Corrupt`]; neither panics.

use super::CaptureError;
use super::pcapng::{BLOCK_EPB, BLOCK_IDB, BLOCK_OPB, BLOCK_SHB, BLOCK_SPB, OPT_IF_TSOFFSET, OPT_IF_TSRESOL};
use std::io::{self, Read};

/// Largest block (pcapng) or record (pcap) accepted, in bytes.
pub const MAX_BLOCK_LEN: usize = 16 << 20;
/// Most interfaces one pcapng section may describe.
pub const MAX_INTERFACES: usize = 4096;

/// The container format of a capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic pcap with one link type.
    Pcap { nanosecond: bool, big_endian: bool, link_type: u32 },
    /// pcapng.
    Pcapng,
}

/// One captured packet, borrowed from the reader until the next call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedPacket<'a> {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// Link-layer header type of the packet's interface.
    pub link_type: u32,
    /// Interface index (0 for pcap).
    pub interface: u32,
    /// The captured bytes (possibly cut by the snap length).
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub orig_len: u32,
}

/// Timestamp resolution of a pcapng interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TsResolution {
    /// Units of 10^-n s (n <= 19).
    Decimal(u8),
    /// Units of 2^-n s (n <= 127).
    Binary(u8),
}

impl TsResolution {
    fn to_ns(self, ticks: u64) -> u64 {
        match self {
            TsResolution::Decimal(n) if n <= 9 => ticks.saturating_mul(10u64.pow(9 - n as u32)),
            TsResolution::Decimal(n) => ticks / 10u64.pow(n as u32 - 9),
            TsResolution::Binary(n) => ((ticks as u128 * 1_000_000_000) >> n).min(u64::MAX as u128) as u64,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: u32,
    snaplen: u32,
    resolution: TsResolution,
    /// `if_tsoffset`: seconds added to every timestamp.
    offset_s: i64,
}

/// Reads packets from a pcap or pcapng stream.
pub struct CaptureReader<R: Read> {
    src: R,
    format: CaptureFormat,
    /// Bytes consumed so far (for error messages).
    offset: u64,
    /// Current block body. Invariant: `buf.len() <= MAX_BLOCK_LEN + 12`.
    buf: Vec<u8>,
    /// pcapng: byte order of the current section.
    big_endian: bool,
    /// pcapng: interfaces of the current section.
    interfaces: Vec<Interface>,
    /// Timestamp of the previous packet (Simple Packet Blocks carry none).
    last_ts_ns: u64,
}

impl CaptureReader<io::BufReader<std::fs::File>> {
    /// Opens a capture file.
    pub fn open(path: &std::path::Path) -> Result<Self, CaptureError> {
        let file =
            std::fs::File::open(path).map_err(|source| CaptureError::Open { path: path.into(), source })?;
        Self::new(io::BufReader::with_capacity(1 << 20, file))
    }
}

fn u16_of(b: &[u8], big: bool) -> u16 {
    let a = [b[0], b[1]];
    if big { u16::from_be_bytes(a) } else { u16::from_le_bytes(a) }
}

fn u32_of(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header and detects the format.
    pub fn new(mut src: R) -> Result<Self, CaptureError> {
        let mut magic = [0u8; 4];
        let got = read_up_to(&mut src, &mut magic)?;
        if got < 4 {
            return Err(CaptureError::Truncated { offset: got as u64, what: "file header" });
        }
        let mut r = Self {
            src,
            format: CaptureFormat::Pcapng,
            offset: 4,
            buf: Vec::new(),
            big_endian: false,
            interfaces: Vec::new(),
            last_ts_ns: 0,
        };
        let (nanosecond, big_endian) = match u32::from_le_bytes(magic) {
            BLOCK_SHB => {
                r.read_section_header()?;
                return Ok(r);
            }
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (true, false),
            0xd4c3_b2a1 => (false, true),
            0x4d3c_b2a1 => (true, true),
            _ => return Err(CaptureError::NotACapture { magic }),
        };
        let mut header = [0u8; 20];
        r.read_exact_or(&mut header, "pcap file header")?;
        let major = u16_of(&header[0..], big_endian);
        if major != 2 {
            return Err(CaptureError::Corrupt {
                offset: 4,
                message: format!("pcap version {major}, expected 2"),
            });
        }
        let link_type = u32_of(&header[16..], big_endian) & 0xffff;
        r.format = CaptureFormat::Pcap { nanosecond, big_endian, link_type };
        Ok(r)
    }

    /// The detected format.
    pub fn format(&self) -> CaptureFormat {
        self.format
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn read_exact_or(&mut self, out: &mut [u8], what: &'static str) -> Result<(), CaptureError> {
        let got = read_up_to(&mut self.src, out)?;
        self.offset += got as u64;
        if got < out.len() {
            return Err(CaptureError::Truncated { offset: self.offset, what });
        }
        Ok(())
    }

    /// Reads `len` bytes into `self.buf`, growing it only as bytes arrive.
    fn read_body(&mut self, len: usize, what: &'static str) -> Result<(), CaptureError> {
        debug_assert!(len <= MAX_BLOCK_LEN + 12);
        self.buf.clear();
        let got = (&mut self.src).take(len as u64).read_to_end(&mut self.buf)?;
        self.offset += got as u64;
        if got < len {
            return Err(CaptureError::Truncated { offset: self.offset, what });
        }
        Ok(())
    }

    fn corrupt(&self, message: impl Into<String>) -> CaptureError {
        CaptureError::Corrupt { offset: self.offset, message: message.into() }
    }

    /// The next packet, `Ok(None)` at a clean end of the file.
    pub fn next_packet(&mut self) -> Result<Option<CapturedPacket<'_>>, CaptureError> {
        match self.format {
            CaptureFormat::Pcap { nanosecond, big_endian, link_type } => {
                self.next_pcap(nanosecond, big_endian, link_type)
            }
            CaptureFormat::Pcapng => self.next_pcapng(),
        }
    }

    fn next_pcap(
        &mut self,
        nanosecond: bool,
        big: bool,
        link_type: u32,
    ) -> Result<Option<CapturedPacket<'_>>, CaptureError> {
        let mut h = [0u8; 16];
        let got = read_up_to(&mut self.src, &mut h)?;
        self.offset += got as u64;
        if got == 0 {
            return Ok(None);
        }
        if got < 16 {
            return Err(CaptureError::Truncated { offset: self.offset, what: "pcap record header" });
        }
        let (sec, frac) = (u32_of(&h[0..], big) as u64, u32_of(&h[4..], big) as u64);
        let (incl, orig) = (u32_of(&h[8..], big) as usize, u32_of(&h[12..], big));
        if incl > MAX_BLOCK_LEN {
            return Err(CaptureError::BlockTooLarge {
                offset: self.offset,
                len: incl as u64,
                limit: MAX_BLOCK_LEN,
            });
        }
        self.read_body(incl, "pcap record")?;
        let ts_ns = sec * 1_000_000_000 + if nanosecond { frac } else { frac.saturating_mul(1000) };
        Ok(Some(CapturedPacket { ts_ns, link_type, interface: 0, data: &self.buf, orig_len: orig }))
    }

    /// Called with the block type already read: reads the rest of a section header.
    fn read_section_header(&mut self) -> Result<(), CaptureError> {
        let mut h = [0u8; 8];
        self.read_exact_or(&mut h, "section header block")?;
        self.big_endian = match u32::from_le_bytes([h[4], h[5], h[6], h[7]]) {
            0x1a2b_3c4d => false,
            0x4d3c_2b1a => true,
            other => {
                return Err(self.corrupt(format!("section header byte-order magic {other:#010x} is invalid")));
            }
        };
        let len = u32_of(&h[0..], self.big_endian) as usize;
        if len < 28 || !len.is_multiple_of(4) {
            return Err(self.corrupt(format!("section header block length {len} is invalid")));
        }
        if len > MAX_BLOCK_LEN {
            return Err(CaptureError::BlockTooLarge {
                offset: self.offset,
                len: len as u64,
                limit: MAX_BLOCK_LEN,
            });
        }
        // Body after the byte-order magic, plus the trailing length.
        self.read_body(len - 12, "section header block")?;
        let major = u16_of(&self.buf[0..], self.big_endian);
        if major != 1 {
            return Err(self.corrupt(format!("pcapng major version {major}, expected 1")));
        }
        self.check_trailer(len)?;
        self.interfaces.clear();
        Ok(())
    }

    fn check_trailer(&self, len: usize) -> Result<(), CaptureError> {
        let at = self.buf.len() - 4;
        let trailer = u32_of(&self.buf[at..], self.big_endian) as usize;
        if trailer != len {
            return Err(self.corrupt(format!("block length {len} and trailing length {trailer} differ")));
        }
        Ok(())
    }

    fn next_pcapng(&mut self) -> Result<Option<CapturedPacket<'_>>, CaptureError> {
        loop {
            let mut h = [0u8; 4];
            let got = read_up_to(&mut self.src, &mut h)?;
            self.offset += got as u64;
            if got == 0 {
                return Ok(None);
            }
            if got < 4 {
                return Err(CaptureError::Truncated { offset: self.offset, what: "block header" });
            }
            let block_type = u32_of(&h, self.big_endian);
            if u32::from_le_bytes(h) == BLOCK_SHB {
                self.read_section_header()?;
                continue;
            }
            let mut l = [0u8; 4];
            self.read_exact_or(&mut l, "block header")?;
            let len = u32_of(&l, self.big_endian) as usize;
            if len < 12 || !len.is_multiple_of(4) {
                return Err(self.corrupt(format!("block of type {block_type:#x} has invalid length {len}")));
            }
            if !matches!(block_type, BLOCK_IDB | BLOCK_EPB | BLOCK_SPB | BLOCK_OPB) {
                self.skip_block(len)?;
                continue;
            }
            if len > MAX_BLOCK_LEN {
                return Err(CaptureError::BlockTooLarge {
                    offset: self.offset,
                    len: len as u64,
                    limit: MAX_BLOCK_LEN,
                });
            }
            self.read_body(len - 8, "block")?;
            self.check_trailer(len)?;
            let body_len = len - 12;
            if block_type == BLOCK_IDB {
                self.read_interface(body_len)?;
                continue;
            }
            return self.packet_block(block_type, body_len).map(Some);
        }
    }

    /// Skips an uninteresting block without holding it in memory.
    fn skip_block(&mut self, len: usize) -> Result<(), CaptureError> {
        let rest = (len - 8) as u64;
        let skipped = io::copy(&mut (&mut self.src).take(rest), &mut io::sink())?;
        self.offset += skipped;
        if skipped < rest {
            return Err(CaptureError::Truncated { offset: self.offset, what: "block" });
        }
        Ok(())
    }

    fn read_interface(&mut self, body_len: usize) -> Result<(), CaptureError> {
        let big = self.big_endian;
        if body_len < 8 {
            return Err(self.corrupt("interface description block shorter than 8 bytes"));
        }
        if self.interfaces.len() >= MAX_INTERFACES {
            return Err(self.corrupt(format!("more than {MAX_INTERFACES} interfaces in one section")));
        }
        let mut itf = Interface {
            link_type: u16_of(&self.buf[0..], big) as u32,
            snaplen: u32_of(&self.buf[4..], big),
            resolution: TsResolution::Decimal(6),
            offset_s: 0,
        };
        let mut at = 8;
        while at + 4 <= body_len {
            let code = u16_of(&self.buf[at..], big);
            let olen = u16_of(&self.buf[at + 2..], big) as usize;
            let value = self.buf.get(at + 4..at + 4 + olen).filter(|_| at + 4 + olen <= body_len);
            let Some(value) = value else {
                return Err(self.corrupt(format!("interface option {code} runs past its block")));
            };
            match (code, value) {
                (0, _) => break,
                (OPT_IF_TSRESOL, [v]) => {
                    itf.resolution = if v & 0x80 != 0 {
                        TsResolution::Binary(v & 0x7f)
                    } else if *v <= 19 {
                        TsResolution::Decimal(*v)
                    } else {
                        return Err(
                            self.corrupt(format!("if_tsresol 10^-{v} is finer than this reader supports"))
                        );
                    }
                }
                (OPT_IF_TSOFFSET, v) if v.len() == 8 => {
                    let a: [u8; 8] = v.try_into().unwrap_or_default();
                    itf.offset_s = if big { i64::from_be_bytes(a) } else { i64::from_le_bytes(a) };
                }
                _ => {}
            }
            at += 4 + olen.next_multiple_of(4);
        }
        self.interfaces.push(itf);
        Ok(())
    }

    fn interface(&self, id: u32) -> Result<Interface, CaptureError> {
        self.interfaces.get(id as usize).copied().ok_or_else(|| {
            self.corrupt(format!(
                "packet names interface {id} but the section describes {}",
                self.interfaces.len()
            ))
        })
    }

    fn packet_block(&mut self, block_type: u32, body_len: usize) -> Result<CapturedPacket<'_>, CaptureError> {
        let big = self.big_endian;
        let b = &self.buf;
        let (interface, ticks, caplen, orig_len, data_at) = match block_type {
            BLOCK_SPB => {
                if body_len < 4 {
                    return Err(self.corrupt("simple packet block shorter than 4 bytes"));
                }
                let orig = u32_of(&b[0..], big);
                let itf = self.interface(0)?;
                let snap = if itf.snaplen == 0 { u32::MAX } else { itf.snaplen };
                let caplen = (orig.min(snap) as usize).min(body_len - 4);
                (0, None, caplen, orig, 4)
            }
            BLOCK_EPB | BLOCK_OPB => {
                if body_len < 20 {
                    return Err(self.corrupt("packet block shorter than 20 bytes"));
                }
                let interface =
                    if block_type == BLOCK_EPB { u32_of(&b[0..], big) } else { u16_of(&b[0..], big) as u32 };
                let ticks = (u32_of(&b[4..], big) as u64) << 32 | u32_of(&b[8..], big) as u64;
                let caplen = u32_of(&b[12..], big) as usize;
                if caplen > body_len - 20 {
                    return Err(self.corrupt(format!(
                        "packet block claims {caplen} captured bytes but holds {}",
                        body_len - 20
                    )));
                }
                (interface, Some(ticks), caplen, u32_of(&b[16..], big), 20)
            }
            _ => unreachable!("only packet blocks reach here"),
        };
        let itf = self.interface(interface)?;
        if let Some(ticks) = ticks {
            self.last_ts_ns =
                itf.resolution.to_ns(ticks).saturating_add_signed(itf.offset_s.saturating_mul(1_000_000_000));
        }
        Ok(CapturedPacket {
            ts_ns: self.last_ts_ns,
            link_type: itf.link_type,
            interface,
            data: &self.buf[data_at..data_at + caplen],
            orig_len,
        })
    }
}

/// Reads until `out` is full or the source ends; returns the bytes read.
fn read_up_to<R: Read>(src: &mut R, out: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < out.len() {
        match src.read(&mut out[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(TsResolution::Decimal(6).to_ns(1_500_000), 1_500_000_000);
        assert_eq!(TsResolution::Decimal(9).to_ns(7), 7);
        assert_eq!(TsResolution::Decimal(12).to_ns(7_000), 7);
        assert_eq!(TsResolution::Binary(10).to_ns(1024), 1_000_000_000);
        assert_eq!(TsResolution::Decimal(0).to_ns(u64::MAX), u64::MAX);
    }
}
