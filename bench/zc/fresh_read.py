"""How fast the GPU reads a frame out of mapped pinned host memory, per
allocation, when the host wrote the frame long before ("cold") and right
before the read ("fresh"), against a copy-engine copy of the same bytes
in both states.

Usage: python3 bench/zc/fresh_read.py [ALLOCATIONS] [FRAME_BYTES]
(defaults 8 and 2 MiB). Needs CuPy and NumPy on a machine with a GPU."""
import ctypes, sys
import cupy as cp
import numpy as np

SRC = r'''
extern "C" __global__ void rd(const uint4* __restrict__ p, unsigned long long words, unsigned int* out) {
  unsigned int acc = 0;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < words; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) { unsigned long long j = i + k * stride; v[k] = j < words ? p[j] : make_uint4(0, 0, 0, 0); }
#pragma unroll
    for (int k = 0; k < 4; ++k) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (acc == 0x12345678u) out[blockIdx.x] = acc;
}
'''
ALLOCS = int(sys.argv[1]) if len(sys.argv) > 1 else 8
FRAME = int(sys.argv[2]) if len(sys.argv) > 2 else 2 << 20
AREA = 64 << 20  # per allocation; frames rotate through it so no read hits L2
ITERS = 40
kern = cp.RawKernel(SRC, 'rd')
sm = cp.cuda.Device().attributes['MultiProcessorCount']
out = cp.zeros(4096, dtype=cp.uint32)
dev = cp.empty(FRAME, dtype=cp.uint8)
s = cp.cuda.Stream(non_blocking=True)
rng = np.random.default_rng(1)
payload = rng.integers(0, 256, FRAME, dtype=np.uint8)


def read(ptr):
    kern((sm,), (1024,), (cp.uint64(ptr), cp.uint64(FRAME // 16), out), stream=s)


def timed(launch):
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    launch()
    e1.record(s)
    e1.synchronize()
    return cp.cuda.get_elapsed_time(e0, e1) * 1e3


print(f"GPU {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}, {sm} SMs; frame {FRAME} B, "
      f"{ITERS} frames per figure, medians in us (GB/s)")
print("alloc  cold read        fresh read       memcpy H2D (cold) memcpy H2D (fresh)")
for a in range(ALLOCS):
    hp = cp.cuda.runtime.hostAlloc(AREA, 2)  # cudaHostAllocMapped: the host pointer is valid on the device
    host = np.ctypeslib.as_array((ctypes.c_uint8 * AREA).from_address(hp))
    host[:] = 0x5a
    offsets = [(i * FRAME) % (AREA - FRAME) for i in range(ITERS)]
    read(hp)
    s.synchronize()
    cold = sorted(timed(lambda o=o: read(hp + o)) for o in offsets)
    fresh = []
    for o in offsets:
        host[o:o + FRAME] = payload  # written by this core just before the GPU reads it
        fresh.append(timed(lambda o=o: read(hp + o)))
    fresh.sort()
    copy = sorted(timed(lambda o=o: cp.cuda.runtime.memcpyAsync(dev.data.ptr, hp + o, FRAME, 1, s.ptr))
                  for o in offsets)
    copy_fresh = []
    for o in offsets:
        host[o:o + FRAME] = payload
        copy_fresh.append(timed(lambda o=o: cp.cuda.runtime.memcpyAsync(dev.data.ptr, hp + o, FRAME, 1, s.ptr)))
    copy_fresh.sort()
    med = lambda xs: xs[len(xs) // 2]
    fmt = lambda t: f"{t:7.2f} ({FRAME / t / 1e3:5.1f})"
    print(f"{a:5d}  {fmt(med(cold))}  {fmt(med(fresh))}  {fmt(med(copy))}  {fmt(med(copy_fresh))}")
    sys.stdout.flush()
    del host
    cp.cuda.runtime.freeHost(hp)
