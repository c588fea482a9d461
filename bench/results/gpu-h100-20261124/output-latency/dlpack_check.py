# Attach to a CUDA-backend appliance's output ring; every frame through
# torch and cupy DLPack (no copy: the same device pointer), its mean checked
# against the frame's own stats. Frames the appliance reused before they
# were read count as overwritten, not as errors.
import sys, time
import numpy as np, torch, cupy, frameloop
torch.zeros(1, device="cuda"); cupy.zeros(1)  # initialise both before attaching
c = frameloop.Consumer(sys.argv[1])
n, bad, checked, overwritten = int(sys.argv[2]), 0, 0, 0
t0 = time.time()
dev = None
lat = []
while checked < n and time.time() - t0 < 30:
    f = c.next(timeout=5.0)
    if f is None:
        break
    try:
        t = torch.from_dlpack(f)
        lat.append(time.time_ns() - f.published_ns)
        a = cupy.from_dlpack(f)
    except frameloop.FrameOverwritten:
        overwritten += 1
        continue
    dev = (str(t.device), f.device)
    assert t.is_cuda and t.dtype == torch.float32, (t.device, t.dtype)
    assert t.data_ptr() == f.data_ptr == a.data.ptr, "not zero copy"
    m = t.double().mean().item()
    ma = float(a.astype(cupy.float64).mean())
    if not f.valid():
        overwritten += 1
        continue
    if abs(m - f.stats.mean) > 1e-4 * max(1.0, abs(m)) or abs(ma - m) > 1e-9 * max(1.0, abs(m)):
        bad += 1
        print("mismatch", f.sequence, m, ma, f.stats.mean)
    checked += 1
if lat:
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] / 1000.0
    print(f"publish->tensor us: p50 {q(0.5):.1f} p90 {q(0.9):.1f} p99 {q(0.99):.1f} p99.9 {q(0.999):.1f} over {len(lat)}")
print(f"device={dev} checked={checked} bad={bad} overwritten={overwritten} lost={c.lost}")
sys.exit(0 if checked >= n and bad == 0 else 1)
