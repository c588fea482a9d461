//! The CUDA layer (`frameloop::cuda`) on a GPU: its memory kinds hold and
//! return exactly the bytes written (fresh random bytes, odd sizes, buffers
//! filled with a poison byte first), stream-ordered copies land in order,
//! and a failed call comes back as a `CudaError` that keeps the driver's
//! status, so callers can match on it. Needs a GPU:
//! `cargo test --test gpu_cuda_layer -- --include-ignored`.

use cudarc::driver::{DriverError, sys};
use frameloop::cuda::copy::{memcpy_dtoh, memcpy_dtoh_async, memcpy_htod_async};
use frameloop::cuda::{
    CudaError, DeviceBuffer, HostRegistration, OwnedStream, PinnedHost, open_context, probe,
};
use frameloop::gpu::GpuError;
use frameloop::ring::RingPages;
use std::error::Error as _;

mod gpu_support;
use gpu_support::Rng;

const POISON: u8 = 0xa5;

fn context() -> std::sync::Arc<cudarc::driver::CudaContext> {
    probe(0).expect("this test needs a usable GPU");
    open_context(0).expect("GPU 0's context")
}

#[test]
#[ignore = "needs a GPU"]
fn a_device_buffer_returns_what_was_written_and_refuses_copies_past_its_end() {
    let ctx = context();
    let mut rng = Rng::fresh("device_buffer");
    // Not a multiple of any block or page size.
    let len = 3 * 4096 + 1013;
    let buffer = DeviceBuffer::new(&ctx, len, POISON).expect("cuMemAlloc");
    assert_eq!(buffer.len(), len);
    let mut out = vec![0u8; len];
    buffer.read(0, &mut out).expect("read back");
    assert!(out.iter().all(|&b| b == POISON), "the fill byte is everywhere");

    let data = rng.bytes(len - 517);
    buffer.write(211, &data).expect("write");
    buffer.read(0, &mut out).expect("read back");
    assert!(out[..211].iter().all(|&b| b == POISON), "bytes before the write are untouched");
    assert_eq!(&out[211..211 + data.len()], &data[..]);
    assert!(out[211 + data.len()..].iter().all(|&b| b == POISON), "bytes after the write are untouched");

    let err = buffer.write(len - 3, &[1, 2, 3, 4]).unwrap_err();
    assert!(
        matches!(err, CudaError::OutOfBounds { direction: "write", len: 4, offset, size } if offset == len - 3 && size == len),
        "{err}"
    );
    let err = buffer.read(usize::MAX, &mut out[..1]).unwrap_err();
    assert!(matches!(err, CudaError::OutOfBounds { direction: "read", .. }), "{err}");
    buffer.read(0, &mut out).expect("read back");
    assert_eq!(&out[211..211 + data.len()], &data[..], "a refused write changed nothing");
}

#[test]
#[ignore = "needs a GPU"]
fn a_failed_allocation_keeps_the_drivers_status() {
    let ctx = context();
    // 1 PiB: more than any GPU holds.
    let err = DeviceBuffer::new(&ctx, 1 << 50, 0).err().expect("no GPU holds 1 PiB");
    assert!(
        matches!(
            err,
            CudaError::Driver {
                call: "cuMemAlloc",
                source: DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"), "{err}");
    let gpu = GpuError::from(err);
    assert_eq!(gpu.driver_code(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY));
    let source = gpu.source().and_then(|s| s.downcast_ref::<DriverError>()).expect("the driver's status");
    assert_eq!(source.0, sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
}

#[test]
#[ignore = "needs a GPU"]
fn pinned_and_registered_host_memory_are_the_same_bytes_at_their_device_address() {
    let ctx = context();
    let mut rng = Rng::fresh("host_memory");

    let len = 2 * 4096 + 333;
    let pinned = PinnedHost::alloc(&ctx, len).expect("cuMemHostAlloc");
    assert_eq!(pinned.len(), len);
    // SAFETY: the allocation holds `len` bytes that nothing else uses.
    let host = unsafe { std::slice::from_raw_parts_mut(pinned.host_ptr(), len) };
    assert!(host.iter().all(|&b| b == 0), "zeroed at creation");
    let data = rng.bytes(len);
    host.copy_from_slice(&data);
    let dptr = pinned.device_address().expect("device address");
    let mut out = vec![POISON; len];
    // SAFETY: `dptr` maps the `len` bytes of the pinned allocation, alive
    // until the end of the test; `out` holds `len` bytes.
    unsafe { memcpy_dtoh(out.as_mut_ptr(), dptr, len) }.expect("copy through the device address");
    assert_eq!(out, data);

    let pages = RingPages::new(5 * 4096, false).expect("anonymous pages");
    let data = rng.bytes(pages.len());
    // SAFETY: the mapping holds `pages.len()` bytes that nothing else uses.
    unsafe { std::slice::from_raw_parts_mut(pages.as_ptr(), pages.len()) }.copy_from_slice(&data);
    // SAFETY: the pages are page aligned and stay mapped (owned here) until
    // after `unregister` below.
    let registration =
        unsafe { HostRegistration::register(&ctx, pages.as_ptr(), pages.len()) }.expect("cuMemHostRegister");
    let dptr = registration.device_address().expect("device address");
    let mut out = vec![POISON; pages.len()];
    // SAFETY: `dptr` maps the registered pages, alive until the end of the test.
    unsafe { memcpy_dtoh(out.as_mut_ptr(), dptr, out.len()) }.expect("copy through the device address");
    assert_eq!(out, data);
    registration.unregister().expect("cuMemHostUnregister");
    drop(pages);
}

#[test]
#[ignore = "needs a GPU"]
fn stream_ordered_copies_on_an_owned_stream_land_in_order() {
    let ctx = context();
    let mut rng = Rng::fresh("owned_stream");
    let len = 64 * 1024 + 77;
    let buffer = DeviceBuffer::new(&ctx, len, POISON).expect("cuMemAlloc");
    let staging = PinnedHost::alloc(&ctx, len).expect("cuMemHostAlloc");
    let stream = OwnedStream::non_blocking(&ctx).expect("a non-blocking stream");
    let (first, second) = (rng.bytes(len), rng.bytes(len / 2 + 1));
    // SAFETY: the staging holds `len` bytes that nothing else touches.
    let host = unsafe { std::slice::from_raw_parts_mut(staging.host_ptr(), len) };
    host.copy_from_slice(&first);
    // SAFETY: the staging is page-locked and unchanged until the stream is
    // synchronised; the buffer holds `len` bytes; both outlive the copy.
    unsafe { memcpy_htod_async(buffer.dptr(), staging.host_ptr(), len, stream.raw()) }.expect("queue copy");
    stream.synchronize().expect("first copy");
    host[..second.len()].copy_from_slice(&second);
    // The second copy overwrites the front half: what the buffer holds is
    // the second copy there and the first after it.
    // SAFETY: as above, for the first `second.len()` bytes.
    unsafe { memcpy_htod_async(buffer.dptr() + 100, staging.host_ptr(), second.len(), stream.raw()) }
        .expect("queue copy");
    let mut back = vec![POISON; len];
    let readback = PinnedHost::alloc(&ctx, len).expect("cuMemHostAlloc");
    // SAFETY: `readback` is page-locked, holds `len` bytes and is read only
    // after the stream is synchronised; the buffer holds `len` bytes.
    unsafe { memcpy_dtoh_async(readback.host_ptr(), buffer.dptr(), len, stream.raw()) }.expect("queue copy");
    stream.synchronize().expect("copies");
    // SAFETY: the copy into `readback` finished (stream synchronised).
    back.copy_from_slice(unsafe { std::slice::from_raw_parts(readback.host_ptr(), len) });
    let mut want = first.clone();
    want[100..100 + second.len()].copy_from_slice(&second);
    assert_eq!(back, want);
}
