//! Frames a program supplies itself (its own samples, not a sender
//! pattern), sent to an appliance in the native wire format by the sender's
//! transmitter: what the Python module's `Appliance.send(frames)` uses.

use super::AppError;
use crate::clock::{monotonic_ns, realtime_ns};
use crate::sender::{FrameBuffer, FrameGeometry, FrameSent, GsoMode, SendErrorCounts, Transmitter};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;

/// A connected UDP socket that sends whole frames, each as the datagrams of
/// `packet_bytes` bytes (header included) the sender would send.
pub struct FrameFeed {
    tx: Transmitter,
    packet_bytes: usize,
    /// The last frame's buffer, reused while frames keep their size.
    buffer: Option<FrameBuffer>,
    errors: SendErrorCounts,
    /// Never raised: a send retries transient refusals until it is done.
    stop: AtomicBool,
    frames: u64,
}

impl FrameFeed {
    /// Opens a socket connected to `to` (the appliance's `ingest.bind`).
    pub fn connect(to: SocketAddr, packet_bytes: usize) -> Result<Self, AppError> {
        let socket = crate::sender::open_socket(to, None).map_err(AppError::Sender)?;
        let tx = Transmitter::new(socket, GsoMode::Auto, packet_bytes).map_err(AppError::Sender)?;
        Ok(Self {
            tx,
            packet_bytes,
            buffer: None,
            errors: SendErrorCounts::default(),
            stop: AtomicBool::new(false),
            frames: 0,
        })
    }

    /// Sends `payload` as frame `seq` of stream `stream`, stamped with the
    /// time of the send.
    pub fn send(&mut self, stream: u32, seq: u64, payload: &[u8]) -> Result<FrameSent, AppError> {
        let same_size =
            self.buffer.as_ref().is_some_and(|b| b.geometry().frame_bytes() as usize == payload.len());
        if !same_size {
            let geometry =
                FrameGeometry::new(payload.len() as u64, self.packet_bytes).map_err(AppError::Sender)?;
            self.buffer = Some(FrameBuffer::new(geometry));
        }
        let Some(buffer) = self.buffer.as_mut() else { unreachable!("made above") };
        buffer.payload_mut().copy_from_slice(payload);
        buffer.write_headers(stream, seq, realtime_ns());
        let sent = self
            .tx
            .send_frame(buffer, None, monotonic_ns(), &self.stop, &mut self.errors)
            .map_err(AppError::Sender)?;
        self.frames += 1;
        Ok(sent)
    }

    /// Frames sent so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Transient refusals retried, and packets that could not be delivered.
    pub fn errors(&self) -> SendErrorCounts {
        self.errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::native;

    #[test]
    fn a_supplied_frame_goes_out_as_the_senders_datagrams() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let mut feed = FrameFeed::connect(rx.local_addr().unwrap(), 100).unwrap();
        let payload: Vec<u8> = (0..150u32).map(|i| (i * 7) as u8).collect();
        let sent = feed.send(3, 42, &payload).unwrap();
        assert_eq!(sent.packets, 3, "52 payload bytes per 100-byte datagram");
        let mut got = vec![0u8; 150];
        for _ in 0..3 {
            let mut d = [0u8; 200];
            let n = rx.recv(&mut d).unwrap();
            let (h, part) = native::parse(&d[..n]).unwrap();
            assert_eq!((h.stream_id, h.frame_seq, h.frame_len), (3, 42, 150));
            let at = h.payload_offset as usize;
            got[at..at + part.len()].copy_from_slice(part);
        }
        assert_eq!(got, payload);
        assert_eq!(feed.frames(), 1);
    }
}
