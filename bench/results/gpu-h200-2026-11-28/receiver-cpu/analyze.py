import sys
import glob
def steal(d):
    b={l.split()[0]:[int(x) for x in l.split()[1:]] for l in open(d+'/stat-before.txt')}
    a={l.split()[0]:[int(x) for x in l.split()[1:]] for l in open(d+'/stat-after.txt')}
    return {k:(a[k][7]-b[k][7]) for k in a}  # steal jiffies
tot=0
for mode in ['free','pinned']:
    W=[];C=[];pairs=[]
    for d in sorted(glob.glob(sys.argv[1] + f'/r*-{mode}')):
        st=steal(d); tot+=st['cpu']
        for l in open(d+'/rec-768k.txt').read().split('\n')[50:]:
            if not l: continue
            x=[int(a) for a in l.split()]
            wall=(x[17]-x[3])/1e3; cpu=x[1]/1e3
            W.append(wall); C.append(cpu); pairs.append((wall,cpu,d.split('/')[-1],x[0]))
    n=len(W)
    for name,xs in [('wall',sorted(W)),('cpu',sorted(C))]:
        print(mode,name,f"n {n} p50 {xs[n//2]:.2f} p90 {xs[int(n*.9)]:.2f} p99 {xs[int(n*.99)]:.2f} p99.9 {xs[int(n*.999)]:.2f} max {xs[-1]:.1f}")
    big=[p for p in pairs if p[0]>50]
    print(mode,'wall>50us:',len(big),' of which cpu>0.8*wall:',sum(1 for p in big if p[1]>0.8*p[0]),' cpu<0.2*wall:',sum(1 for p in big if p[1]<0.2*p[0]))
    print('  e.g.',[(round(p[0]),round(p[1])) for p in big[:20]])
print('steal jiffies total over runs (all cpus):',tot)
for d in sorted(glob.glob(''+sys.argv[1]+'/r*'))[:6]:
    st=steal(d); print(d.split('/')[-1], {k:v for k,v in st.items() if v})
