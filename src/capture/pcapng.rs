//! The pcapng writer frameloop records with: one section, one interface of
//! link type `LINKTYPE_RAW` with nanosecond timestamps (`if_tsresol` = 9),
//! and one Enhanced Packet Block per UDP datagram carrying synthetic IPv4 or
//! IPv6 and UDP headers (see [`super::net::encode_ip_udp`]), so that
//! tcpdump, tshark and Wireshark show each datagram with its addresses and
//! ports. All blocks are little-endian.

use super::net::{encode_ip_udp, linktype};
use std::io::{self, Write};
use std::net::SocketAddr;

/// Section Header Block type.
pub const BLOCK_SHB: u32 = 0x0a0d_0d0a;
/// Interface Description Block type.
pub const BLOCK_IDB: u32 = 1;
/// Obsolete Packet Block type (read only).
pub const BLOCK_OPB: u32 = 2;
/// Simple Packet Block type (read only).
pub const BLOCK_SPB: u32 = 3;
/// Enhanced Packet Block type.
pub const BLOCK_EPB: u32 = 6;
/// Byte-order magic of a section header.
pub const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;
/// Option codes used here.
pub const OPT_ENDOFOPT: u16 = 0;
pub const OPT_SHB_USERAPPL: u16 = 4;
pub const OPT_IF_NAME: u16 = 2;
pub const OPT_IF_TSRESOL: u16 = 9;
pub const OPT_IF_TSOFFSET: u16 = 14;
/// Snap length recorded in the interface description (the largest UDP datagram fits).
pub const SNAPLEN: u32 = 262_144;

fn push_option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    body.resize(body.len().next_multiple_of(4), 0);
}

/// Writes pcapng blocks of UDP datagrams to `W`.
pub struct PcapngWriter<W: Write> {
    out: W,
    /// Reused block body buffer.
    body: Vec<u8>,
    /// Reused IP packet buffer.
    packet: Vec<u8>,
    packets: u64,
}

impl<W: Write> PcapngWriter<W> {
    /// Writes the section header and the interface description.
    pub fn new(out: W) -> io::Result<Self> {
        let mut w =
            Self { out, body: Vec::with_capacity(70_000), packet: Vec::with_capacity(70_000), packets: 0 };
        w.body.clear();
        w.body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        w.body.extend_from_slice(&1u16.to_le_bytes());
        w.body.extend_from_slice(&0u16.to_le_bytes());
        w.body.extend_from_slice(&(-1i64).to_le_bytes());
        let app = format!("frameloop {}", env!("CARGO_PKG_VERSION"));
        push_option(&mut w.body, OPT_SHB_USERAPPL, app.as_bytes());
        push_option(&mut w.body, OPT_ENDOFOPT, &[]);
        w.write_block(BLOCK_SHB)?;
        w.body.clear();
        w.body.extend_from_slice(&(linktype::RAW as u16).to_le_bytes());
        w.body.extend_from_slice(&0u16.to_le_bytes());
        w.body.extend_from_slice(&SNAPLEN.to_le_bytes());
        push_option(&mut w.body, OPT_IF_NAME, b"frameloop");
        push_option(&mut w.body, OPT_IF_TSRESOL, &[9]);
        push_option(&mut w.body, OPT_ENDOFOPT, &[]);
        w.write_block(BLOCK_IDB)?;
        Ok(w)
    }

    fn write_block(&mut self, block_type: u32) -> io::Result<()> {
        debug_assert!(self.body.len().is_multiple_of(4));
        let total = (self.body.len() + 12) as u32;
        self.out.write_all(&block_type.to_le_bytes())?;
        self.out.write_all(&total.to_le_bytes())?;
        self.out.write_all(&self.body)?;
        self.out.write_all(&total.to_le_bytes())
    }

    /// Appends one datagram received at `ts_ns` (ns since the Unix epoch).
    /// Returns `Ok(false)`, writing nothing, for a payload too large for one IP packet.
    pub fn write_udp(
        &mut self,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
        ts_ns: u64,
    ) -> io::Result<bool> {
        let mut packet = std::mem::take(&mut self.packet);
        let fits = encode_ip_udp(src, dst, payload, &mut packet);
        let result = if fits { self.write_packet(ts_ns, &packet) } else { Ok(()) };
        self.packet = packet;
        result.map(|()| fits)
    }

    /// Appends one raw IP packet captured at `ts_ns`.
    pub fn write_packet(&mut self, ts_ns: u64, ip_packet: &[u8]) -> io::Result<()> {
        self.body.clear();
        self.body.extend_from_slice(&0u32.to_le_bytes());
        self.body.extend_from_slice(&((ts_ns >> 32) as u32).to_le_bytes());
        self.body.extend_from_slice(&(ts_ns as u32).to_le_bytes());
        self.body.extend_from_slice(&(ip_packet.len() as u32).to_le_bytes());
        self.body.extend_from_slice(&(ip_packet.len() as u32).to_le_bytes());
        self.body.extend_from_slice(ip_packet);
        self.body.resize(self.body.len().next_multiple_of(4), 0);
        self.write_block(BLOCK_EPB)?;
        self.packets += 1;
        Ok(())
    }

    /// Packets written so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flushes buffered bytes to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}
