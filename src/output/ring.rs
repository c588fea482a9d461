//! The output ring: the writer side. One [`OutputWriter`] (taken once)
//! publishes each frame's final samples, its [`ResultRecord`] and the user
//! result words into the next slot, seqlock style, and never waits for the
//! consumers; they detect a slot rewritten under them (see `consumer.rs`).
//!
//! Publishing sequence `s` into slot `i`: store `slot_seq[i] =
//! writing_word(s)`, a release fence, the slot head (in the control block's
//! head table and at the start of the data slot) and the samples,
//! `slot_seq[i] = written_word(s)` (release), `head_seq = s` (release).

use super::OutputError;
use super::layout::*;
use super::memory::{OutputMemory, SharedHostMemory};
use crate::ring::ResultRecord;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// An output ring: the control block and the data region.
pub struct OutputRing {
    /// Invariant: at least `geometry.control_bytes()` bytes, header initialised.
    control: SharedHostMemory,
    /// Invariant: at least `geometry.data_bytes()` bytes.
    data: Box<dyn OutputMemory>,
    geometry: OutputGeometry,
    writer_taken: AtomicBool,
}

impl OutputRing {
    /// An output ring of `slots` slots of `sample_capacity` samples in
    /// shared host memory (the host backend's region).
    pub fn host(slots: usize, sample_capacity: usize) -> Result<Arc<Self>, OutputError> {
        let geometry = OutputGeometry::new(slots, sample_capacity)
            .ok_or(OutputError::BadGeometry { slots, sample_capacity })?;
        let bytes = geometry.data_bytes().ok_or(OutputError::BadGeometry { slots, sample_capacity })?;
        let data = SharedHostMemory::create("frameloop-output-data", bytes)?;
        Self::new(Box::new(data), slots, sample_capacity)
    }

    /// Lays an output ring out over initialised `data` (host or device memory).
    pub fn new(
        data: Box<dyn OutputMemory>,
        slots: usize,
        sample_capacity: usize,
    ) -> Result<Arc<Self>, OutputError> {
        let bad = OutputError::BadGeometry { slots, sample_capacity };
        let geometry = OutputGeometry::new(slots, sample_capacity).ok_or(bad)?;
        let (Some(data_bytes), Some(control_bytes), Some(consumers_offset), Some(heads_offset)) = (
            geometry.data_bytes(),
            geometry.control_bytes(),
            geometry.consumers_offset(),
            geometry.heads_offset(),
        ) else {
            return Err(OutputError::BadGeometry { slots, sample_capacity });
        };
        if data.len() < data_bytes {
            return Err(OutputError::TooSmall { needed: data_bytes, available: data.len() });
        }
        let control = SharedHostMemory::create("frameloop-output-control", control_bytes)?;
        let ordinal = data.device_ptr().map_or(-1, |(_, ordinal)| ordinal);
        // SAFETY: the control block is `control_bytes >= 128` bytes of fresh,
        // page-aligned memory nobody else references yet.
        unsafe {
            let h = control.as_ptr() as *mut ControlHeader;
            (*h).magic = OUTPUT_MAGIC;
            (*h).version = OUTPUT_LAYOUT_VERSION;
            (*h).slot_count = geometry.slot_count as u32;
            (*h).slot_stride = geometry.slot_stride as u32;
            (*h).sample_capacity = geometry.sample_capacity as u32;
            (*h).memory_kind = data.kind() as u32;
            (*h).device_ordinal = ordinal;
            (*h).consumers_offset = consumers_offset as u32;
            (*h).data_bytes = data_bytes as u64;
            (*h).heads_offset = heads_offset as u32;
        }
        Ok(Arc::new(Self { control, data, geometry, writer_taken: AtomicBool::new(false) }))
    }

    pub fn geometry(&self) -> OutputGeometry {
        self.geometry
    }

    /// The data region (what the attach server shares).
    pub fn data(&self) -> &dyn OutputMemory {
        &*self.data
    }

    /// The control block (what the attach server shares).
    pub fn control(&self) -> &SharedHostMemory {
        &self.control
    }

    fn header(&self) -> &ControlHeader {
        // SAFETY: the control block starts with a header initialised in `new`;
        // the fields changed after that are atomics.
        unsafe { &*(self.control.as_ptr() as *const ControlHeader) }
    }

    /// Newest published output sequence (0: none yet).
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    fn slot_seq(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < self.geometry.slot_count);
        // SAFETY: `index < slot_count` and the control block holds
        // `slot_count` aligned words at SLOT_SEQS_OFFSET (control_bytes).
        unsafe { &*(self.control.as_ptr().add(SLOT_SEQS_OFFSET) as *const AtomicU64).add(index) }
    }

    /// The control block's slot head of slot `index`.
    fn slot_head(&self, index: usize) -> *mut SlotHead {
        debug_assert!(index < self.geometry.slot_count);
        let offset = self.header().heads_offset as usize;
        // SAFETY: `index < slot_count` and the control block holds
        // `slot_count` 256-byte-aligned heads at `heads_offset` (control_bytes).
        unsafe { (self.control.as_ptr().add(offset) as *mut SlotHead).add(index) }
    }

    /// The consumer line `index` (< [`MAX_CONSUMERS`]).
    pub(crate) fn consumer_word(&self, index: usize) -> &ConsumerWord {
        assert!(index < MAX_CONSUMERS, "consumer index {index} out of range");
        let offset = self.header().consumers_offset as usize;
        // SAFETY: `index < MAX_CONSUMERS` and the control block holds
        // MAX_CONSUMERS 64-byte-aligned words at `consumers_offset`.
        unsafe { &*(self.control.as_ptr().add(offset) as *const ConsumerWord).add(index) }
    }

    /// Takes the single writer; `Err(WriterTaken)` if it was taken before.
    pub fn writer(self: &Arc<Self>) -> Result<OutputWriter, OutputError> {
        if self.writer_taken.swap(true, Ordering::AcqRel) {
            return Err(OutputError::WriterTaken);
        }
        Ok(OutputWriter { ring: Arc::clone(self) })
    }
}

/// A copy of the newest output, taken by the seqlock protocol (the slot's
/// sequence word read before and after the copy).
#[derive(Debug, Clone, PartialEq)]
pub struct NewestOutput {
    /// The output sequence (1 for the first output).
    pub sequence: u64,
    pub record: ResultRecord,
    pub samples: Vec<f32>,
}

/// How a reader outside the writer copies slots: straight from host
/// memory, or through its own non-blocking device stream.
pub struct SlotReader {
    device: Option<crate::cuda::CopyStream>,
}

/// Tries a reader makes before giving up on a ring rewritten under it.
const NEWEST_TRIES: usize = 4;

impl OutputRing {
    /// A reader for [`OutputRing::copy_newest`] (for a device-memory ring
    /// it creates a copy stream, so call it once and keep it).
    pub fn slot_reader(&self) -> Result<SlotReader, OutputError> {
        Ok(SlotReader { device: self.data.copy_stream().transpose()? })
    }

    /// Copies the newest output, never waiting for the writer: `Ok(None)`
    /// when nothing was published yet or the writer rewrote the slot during
    /// every try. The writer is not slowed (it never looks at readers).
    pub fn copy_newest(&self, reader: &mut SlotReader) -> Result<Option<NewestOutput>, OutputError> {
        let g = self.geometry;
        for _ in 0..NEWEST_TRIES {
            let seq = self.head();
            if seq == 0 {
                return Ok(None);
            }
            let index = g.slot_index(seq);
            if self.slot_seq(index).load(Ordering::Acquire) != written_word(seq) {
                continue;
            }
            // SAFETY: the head of slot `index` lies inside the control block;
            // a concurrent rewrite is detected by the re-check below and the
            // copy then discarded.
            let head = unsafe { std::ptr::read_volatile(self.slot_head(index)) };
            let len = (head.record.output_len as usize).min(g.sample_capacity);
            let mut bytes = vec![0u8; len * 4];
            let offset = g.slot_offset(seq) + SLOT_SAMPLES_OFFSET;
            match &mut reader.device {
                Some(stream) => stream.read(offset, &mut bytes).map_err(OutputError::NewestCopy)?,
                // SAFETY: host memory (no copy stream): `offset + len * 4`
                // lies inside the data region (`len <= sample_capacity`); a
                // rewrite during the copy is detected below.
                None => unsafe {
                    std::ptr::copy_nonoverlapping(
                        self.data.as_ptr().add(offset),
                        bytes.as_mut_ptr(),
                        bytes.len(),
                    )
                },
            }
            fence(Ordering::Acquire);
            if self.slot_seq(index).load(Ordering::Relaxed) != written_word(seq) {
                continue;
            }
            let samples =
                bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
            return Ok(Some(NewestOutput { sequence: seq, record: head.record, samples }));
        }
        Ok(None)
    }
}

/// Where the GPU side writes: the device-side description of an output ring
/// whose data region is device memory, laid out as `kernels/output_ring.cuh`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceOutputRing {
    /// Device address of slot 0.
    pub slots_dptr: u64,
    /// Host address of the control block's slot sequence words; the device
    /// writes them (and the head) once this memory is registered with
    /// `cuMemHostRegister` and addressed through its device pointer.
    pub control_host_ptr: *mut u8,
    /// Byte offset of the slot-head table in the control block (the device
    /// writes each output's head there too).
    pub heads_offset: u32,
    pub slot_count: u32,
    pub slot_stride: u32,
    pub sample_capacity: u32,
    pub device_ordinal: i32,
}

/// The single producer of an [`OutputRing`]. The host loop publishes
/// through it; the GPU executor keeps it for as long as the device writes.
pub struct OutputWriter {
    ring: Arc<OutputRing>,
}

impl OutputWriter {
    pub fn ring(&self) -> &Arc<OutputRing> {
        &self.ring
    }

    /// The device-side layout for a device-resident ring, `None` when the
    /// data region is host memory (then [`OutputWriter::publish`] writes it).
    pub fn device_layout(&self) -> Option<DeviceOutputRing> {
        let (slots_dptr, device_ordinal) = self.ring.data.device_ptr()?;
        let g = self.ring.geometry;
        Some(DeviceOutputRing {
            slots_dptr,
            control_host_ptr: self.ring.control.as_ptr(),
            heads_offset: self.ring.header().heads_offset,
            slot_count: g.slot_count as u32,
            slot_stride: g.slot_stride as u32,
            sample_capacity: g.sample_capacity as u32,
            device_ordinal,
        })
    }

    /// Publishes one output: `record` (its `output_len` set to the samples
    /// kept), `user` result words and `samples`, of which at most the
    /// slot's capacity are kept. Returns the output sequence. Never waits.
    ///
    /// # Errors
    /// [`OutputError::DeviceOnly`] when the data region is device memory.
    pub fn publish(
        &mut self,
        record: &ResultRecord,
        user: &[u32; USER_RESULT_WORDS],
        samples: &[f32],
    ) -> Result<u64, OutputError> {
        let ring = &*self.ring;
        let base = ring.data.as_ptr();
        if ring.data.kind() != MemoryKind::HostMemfd || base.is_null() {
            return Err(OutputError::DeviceOnly);
        }
        let g = ring.geometry;
        let seq = ring.header().head_seq.load(Ordering::Relaxed) + 1;
        let kept = samples.len().min(g.sample_capacity);
        let mut r = *record;
        r.output_len = kept as u32;
        let word = ring.slot_seq(g.slot_index(seq));
        word.store(writing_word(seq), Ordering::Relaxed);
        // Orders the odd word before every slot store below: a consumer that
        // sees one of those stores sees the odd word on its re-check.
        fence(Ordering::Release);
        let head = SlotHead { record: r, user: *user, _pad: [0; 4] };
        // SAFETY: this handle is the only writer (taken once); the slot lies
        // inside the data region (`new` checked `data_bytes`), its head at 0
        // and `kept <= sample_capacity` samples at 256 fit the stride; the
        // control block's head of this slot lies inside the control block.
        // Consumers only read, and discard what they read while the word is
        // not `written_word(seq)`.
        unsafe {
            std::ptr::write_volatile(ring.slot_head(g.slot_index(seq)), head);
            let slot = base.add(g.slot_offset(seq));
            std::ptr::write_volatile(slot as *mut SlotHead, head);
            std::ptr::copy_nonoverlapping(samples.as_ptr(), slot.add(SLOT_SAMPLES_OFFSET) as *mut f32, kept);
        }
        word.store(written_word(seq), Ordering::Release);
        ring.header().head_seq.store(seq, Ordering::Release);
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_is_taken_once_and_publishes_in_sequence() {
        let ring = OutputRing::host(4, 16).unwrap();
        let mut w = ring.writer().unwrap();
        assert!(matches!(ring.writer(), Err(OutputError::WriterTaken)));
        assert_eq!(w.device_layout(), None, "host memory has no device layout");
        let samples: Vec<f32> = (0..20).map(|i| i as f32).collect();
        assert_eq!(w.publish(&ResultRecord::default(), &[7; 12], &samples).unwrap(), 1);
        assert_eq!(w.publish(&ResultRecord::default(), &[8; 12], &samples[..3]).unwrap(), 2);
        assert_eq!(ring.head(), 2);
        assert_eq!(ring.slot_seq(0).load(Ordering::Relaxed), written_word(1));
        assert_eq!(ring.slot_seq(1).load(Ordering::Relaxed), written_word(2));
        // SAFETY: slot 0 is inside the data region; no writer runs now.
        let (rec, first) = unsafe {
            let slot = ring.data.as_ptr();
            (
                (slot as *const ResultRecord).read(),
                (slot.add(SLOT_SAMPLES_OFFSET + 15 * 4) as *const f32).read(),
            )
        };
        assert_eq!(rec.output_len, 16, "samples past the capacity are not kept");
        assert_eq!(first, 15.0);
        // SAFETY: slot 1's head lies in the control block; no writer runs now.
        let mirrored = unsafe { ring.slot_head(1).read() };
        assert_eq!((mirrored.record.output_len, mirrored.user), (3, [8; 12]), "the control block's head");
        let mut reader = ring.slot_reader().unwrap();
        let newest = ring.copy_newest(&mut reader).unwrap().unwrap();
        assert_eq!((newest.sequence, newest.samples), (2, vec![0.0, 1.0, 2.0]), "the newest output copied");
    }

    #[test]
    fn the_control_header_describes_the_ring() {
        let ring = OutputRing::host(3, 100).unwrap();
        let h = ring.header();
        assert_eq!(
            (h.magic, h.version, h.slot_count, h.sample_capacity),
            (OUTPUT_MAGIC, OUTPUT_LAYOUT_VERSION, 3, 100)
        );
        assert_eq!(h.slot_stride as usize, ring.geometry().slot_stride);
        assert_eq!(Some(h.heads_offset as usize), ring.geometry().heads_offset());
        assert_eq!((h.memory_kind, h.device_ordinal), (MemoryKind::HostMemfd as u32, -1));
        assert!(matches!(OutputRing::host(0, 10), Err(OutputError::BadGeometry { .. })));
    }
}
