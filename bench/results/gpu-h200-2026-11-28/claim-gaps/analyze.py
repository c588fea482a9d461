import sys, glob, statistics as st
def load(f):
    rows=[]
    for l in open(f):
        v=[int(x) for x in l.split()]
        rows.append(v)
    return rows
allrows=[]
for f in sorted(glob.glob(''+sys.argv[1]+'/r*/rec-768k.txt')):
    rows=load(f)[50:]
    for v in rows:
        seq,frx,lrx,pub,det,done,seen,off,gap,t0seen,arr,hdr,idle,maxgap,t0=v
        t0h=t0+off
        p2d=det-pub
        allrows.append(dict(f=f.split('/')[-2],seq=seq,p2d=p2d/1e3,pub_to_t0=(t0h-pub)/1e3,gap=gap/1e3,t0seen=t0seen/1e3,arr=arr/1e3,hdr=hdr/1e3,idle=idle,maxgap=maxgap*1.024,rx2pub=(pub-lrx)/1e3,comp=(done-det)/1e3,d2s=(seen-done)/1e3,l2s=(seen-lrx)/1e3))
n=len(allrows)
print("frames",n)
for k in ['p2d','gap','t0seen','arr','hdr','idle','maxgap','rx2pub','l2s']:
    xs=sorted(r[k] for r in allrows)
    print(f"{k:8s} p50 {xs[n//2]:8.2f} p90 {xs[int(n*.9)]:8.2f} p99 {xs[int(n*.99)]:8.2f} p99.9 {xs[int(n*.999)]:8.2f} max {xs[-1]:8.2f}")
big=[r for r in allrows if r['p2d']>40]
print("p2d>40:",len(big))
for r in big[:40]:
    print(" ".join(f"{k}={r[k]:.1f}" if isinstance(r[k],float) else f"{k}={r[k]}" for k in ['f','seq','p2d','pub_to_t0','gap','t0seen','arr','hdr','idle','maxgap','rx2pub','l2s']))
print("---- outliers > 150us, with time since run start and the previous frame's fields")
import collections
byf=collections.defaultdict(list)
for r in allrows: byf[r['f']].append(r)
for f,rows in sorted(byf.items()):
    out=[r for r in rows if r['p2d']>150]
    print(f, len(out), [ (r['seq'], round(r['p2d']), round(r['pub_to_t0']), round(r['gap']), round(r['t0seen'],1), round(r['arr'],1), round(r['comp'],1)) for r in out][:12])
