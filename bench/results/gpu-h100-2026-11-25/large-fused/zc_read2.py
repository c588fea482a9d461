# Zero-copy reads of a frame in mapped host memory, fewer blocks: does the
# link rate hold with 16..132 blocks, and what a 1538-byte halo (a 1024-wide
# 12-bit filter2d's reach) read again by every block costs.
import cupy as cp
src = open(__file__.replace('zc_read2.py', 'zc_read.py')).read().split("r'''")[1].split("'''")[0]
k = cp.RawKernel(src, 'rd')
RING = 256 << 20
hp = cp.cuda.runtime.hostAlloc(RING, 2)
out = cp.zeros(4096, dtype=cp.uint32)
s = cp.cuda.Stream(non_blocking=True)
def timeit(fn, frame, iters):
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    fn(0); s.synchronize(); e0.record(s)
    for i in range(iters): fn(((i + 1) * frame) % (RING - frame) & ~4095)
    e1.record(s); e1.synchronize()
    return cp.cuda.get_elapsed_time(e0, e1) * 1e3 / iters
for frame in (786432, 3145728):
    for grid in (16, 24, 32, 48, 66, 132):
        for halo in (0, 1538):
            tile = -(-frame // grid)
            f = lambda off: k((grid,), (1024,), (cp.uint64(hp + off), cp.uint64(frame), cp.uint64(tile), cp.uint64(halo), out, cp.int32(1)), stream=s)
            t = timeit(f, frame, 200)
            print(f'frame {frame} grid {grid} threads 1024 halo {halo}: {t:.2f} us {frame/t/1e3:.1f} GB/s of frame', flush=True)
