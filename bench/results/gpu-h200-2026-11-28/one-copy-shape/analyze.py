"""Per-frame records of the rounds (the directory `shape` of shape.tar.xz as argv[1]): from the
receive call that completed a frame to its publication (wall time and the receiving thread's CPU
time), and from the last datagram's kernel timestamp to that receive call, per build."""
import glob, sys

def pct(xs):
    xs = sorted(xs); n = len(xs)
    return f"n {n} p50 {xs[n // 2]:.2f} p99 {xs[int(n * .99)]:.2f} p99.9 {xs[int(n * .999)]:.2f} max {xs[-1]:.1f}"

for v in ["A", "B"]:
    wall, cpu, rx = [], [], []
    for f in sorted(glob.glob(sys.argv[1] + f"/r*-{v}-*/rec-768k.txt")):
        for line in open(f).read().split("\n")[50:]:
            if not line:
                continue
            x = [int(a) for a in line.split()]
            wall.append((x[17] - x[3]) / 1e3)  # publication's wall time minus the receive call's
            cpu.append(x[1] / 1e3)  # the receiving thread's CPU time over the same span
            rx.append((x[3] - x[2]) / 1e3)  # receive call minus the last datagram's kernel timestamp
    print(v, "receive call to publication, wall µs:", pct(wall))
    print(v, "receive call to publication, CPU µs: ", pct(cpu))
    print(v, "last datagram to its receive call µs:", pct(rx))
    print(v, "frames with more than 50 µs from receive call to publication:", sum(w > 50 for w in wall))
