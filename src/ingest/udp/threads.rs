//! Thread orchestration of `ingest.assembly_thread`: the assembly thread
//! and the further reading threads (`ingest.reading_threads`) started,
//! placed by their start hooks, joined, and their errors reported.

use super::UdpReceiver;
use crate::ingest::assembler::FrameAssembler;
use crate::ingest::assembly_thread::{AssemblyStage, HandingOver, Shared};
use crate::ingest::error::{IngestError, ThreadStartError};
use crate::ingest::handoff::{self, HANDOFF_BATCH_BUFFERS, HANDOFF_BATCHES};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Sets its flag when dropped (a thread's end, however it ends).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// What the assembly thread runs first; see [`UdpReceiver::on_assembly_thread_start`].
pub type OnAssemblyStart = Box<dyn FnOnce() -> Result<(), ThreadStartError> + Send>;

/// What each reading thread after the first runs first, given its index
/// (1 for the second); see [`UdpReceiver::on_reading_thread_start`].
pub type OnReadingThreadStart = Arc<dyn Fn(usize) -> Result<(), ThreadStartError> + Send + Sync>;

/// The name of the assembly thread (`ingest.assembly_thread`).
pub const ASSEMBLY_THREAD_NAME: &str = "frameloop-asm";

/// The name of the reading threads after the first (`ingest.reading_threads`),
/// followed by their index.
pub const READING_THREAD_NAME: &str = "frameloop-rx";

/// The second thread of `ingest.assembly_thread`.
#[derive(Default)]
pub(super) struct AssemblyThread {
    /// Run on that thread before it assembles anything (placing it on a
    /// core); an error stops the receiver with it.
    pub(super) on_start: Option<OnAssemblyStart>,
    /// Run on each reading thread after the first before it reads.
    pub(super) on_reading_start: Option<OnReadingThreadStart>,
}

impl<A: FrameAssembler> UdpReceiver<A> {
    /// [`UdpReceiver::run`] with `ingest.assembly_thread`: this thread (and
    /// with `ingest.reading_threads` more, one per socket) reads into the
    /// batches of a [`handoff::pool`] and a second one assembles them into
    /// frames, in the order read.
    pub(super) fn run_with_assembly_thread(&mut self, stop: &AtomicBool) -> Result<(), IngestError> {
        let (on_start, on_reading_start) = match self.assembly.as_mut() {
            Some(a) => (a.on_start.take(), a.on_reading_start.clone()),
            None => (None, None),
        };
        let readers = 1 + self.more_readers.len();
        let (reading, assembling) =
            handoff::pool(readers, HANDOFF_BATCHES, self.batch.buffers().min(HANDOFF_BATCH_BUFFERS));
        let Self {
            socket,
            readiness,
            assembler,
            counters,
            tap,
            allow,
            local_addr,
            poll_budget,
            more_readers,
            ..
        } = self;
        let sockets: Vec<RawFd> = std::iter::once(socket.as_raw_fd())
            .chain(more_readers.iter().map(|r| r.socket.as_raw_fd()))
            .collect();
        let (counters, allow, local, spin, idle) =
            (&**counters, &*allow, *local_addr, *poll_budget, readiness.timeout);
        let (halt, sockets) = (AtomicBool::new(false), &sockets[..]);
        let shared = Shared { stop, halt: &halt, counters };
        let halt = &halt;
        std::thread::scope(|scope| {
            // Each thread started says whether its start succeeded.
            let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<bool>(readers);
            let assembly_started = started_tx.clone();
            let assembly = std::thread::Builder::new()
                .name(ASSEMBLY_THREAD_NAME.into())
                .spawn_scoped(scope, move || {
                    // However it ends (a failed start, a panic), the
                    // reading threads stop reading.
                    let _ended = SetOnDrop(halt);
                    let started = on_start.map_or(Ok(()), |start| start());
                    let _ = assembly_started.send(started.is_ok());
                    // On failure `assembling` is dropped unused, which ends
                    // the reading loops below.
                    started?;
                    let stage = AssemblyStage { allow, counters, local, sockets };
                    stage.run(&assembling, assembler, tap.as_deref_mut(), spin, idle);
                    Ok(())
                })
                .map_err(IngestError::AssemblySpawn)?;
            let mut sides = reading.into_iter();
            let first_side = sides.next().expect("the pool has a side per reader");
            let mut more = Vec::with_capacity(readers - 1);
            for (i, (side, theirs)) in sides.zip(more_readers.iter_mut()).enumerate() {
                let index = i + 1;
                let (started, on_start) = (started_tx.clone(), on_reading_start.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("{READING_THREAD_NAME}{index}"))
                    .spawn_scoped(scope, move || {
                        let begun = on_start.map_or(Ok(()), |start| start(index));
                        let _ = started.send(begun.is_ok());
                        if let Err(why) = begun {
                            halt.store(true, Ordering::Release);
                            return Err(IngestError::ReadingThreadStart { index, why });
                        }
                        let fd = theirs.socket.as_raw_fd();
                        let read = HandingOver::new(fd, &mut theirs.readiness, side, shared).run(spin);
                        if read.is_err() {
                            halt.store(true, Ordering::Release);
                        }
                        read
                    });
                match spawned {
                    Ok(handle) => more.push(handle),
                    Err(e) => {
                        halt.store(true, Ordering::Release);
                        return Err(IngestError::ReadingThreadSpawn(e));
                    }
                }
            }
            drop(started_tx);
            // Read nothing before every thread is placed and ready: the
            // first frames would wait for their start-up. A failed start
            // halts the readers, and its error is reported below.
            for _ in 0..readers {
                if started_rx.recv() != Ok(true) {
                    halt.store(true, Ordering::Release);
                    break;
                }
            }
            let mut reader = HandingOver::new(socket.as_raw_fd(), readiness, first_side, shared);
            let mut read =
                if halt.load(Ordering::Acquire) { Err(IngestError::PeerStopped) } else { reader.run(spin) };
            if read.is_err() {
                halt.store(true, Ordering::Release);
            }
            // Dropping the reading sides tells the assembly thread to
            // finish what was handed over, flush and return.
            drop(reader);
            for handle in more {
                match handle.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    // The first thread that failed on its own says why.
                    Ok(Err(e)) if matches!(read, Ok(()) | Err(IngestError::PeerStopped)) => read = Err(e),
                    Ok(_) => {}
                }
            }
            match assembly.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(Err(why)) => Err(IngestError::AssemblyStart(why)),
                Ok(Ok(())) => read,
            }
        })
    }
}
