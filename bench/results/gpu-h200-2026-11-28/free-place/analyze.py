import sys
import glob,collections
def load(v):
    out=[]
    for f in sorted(glob.glob(sys.argv[1] + f'/r*-{v}/rec-768k.txt')):
        for l in open(f).read().split('\n')[50:]:
            if not l: continue
            x=[int(a) for a in l.split()]
            seq,frx,lrx,pub,det,done,seen,off,gap,t0seen,arr,hdr,idle,maxgap,t0,lastnone,nonearr,fresh=x
            t0h=t0+off
            out.append(dict(f=f.split('/')[-2],seq=seq,p2d=(det-pub)/1e3,fresh2d=(det-fresh)/1e3,pubstamp=(fresh-pub)/1e3,
              pub_to_t0=(t0h-pub)/1e3,gap=gap/1e3,t0seen=t0seen/1e3,arr=arr/1e3,lastnone_to_t0=lastnone/1e3,nonearr=nonearr/1e3,
              lastnone_minus_pub=(t0h-lastnone-pub)/1e3, rx2pub=(pub-lrx)/1e3, l2s=(seen-lrx)/1e3))
    return out
for v in ['all','free']:
    rows=load(v); n=len(rows)
    print('==',v,n)
    for k in ['p2d','fresh2d','pubstamp','gap','nonearr','rx2pub','l2s']:
        xs=sorted(r[k] for r in rows)
        print(f"{k:10s} p50 {xs[n//2]:8.2f} p90 {xs[int(n*.9)]:8.2f} p99 {xs[int(n*.99)]:8.2f} p99.9 {xs[int(n*.999)]:8.2f} max {xs[-1]:8.2f}")
    big=[r for r in rows if r['p2d']>100]
    print('p2d>100:',len(big), ' of which nonearr>50:', sum(1 for r in big if r['nonearr']>50))
    # class: the last NONE poll ended after publication (GPU polled after the publish and did not see it)
    missed=[r for r in big if r['lastnone_minus_pub']>5]
    print(' last NONE poll ended >5us after the fresh publish stamp:', sum(1 for r in big if (r['lastnone_minus_pub']-r['pubstamp'])>5))
    for r in big[:25]:
        print('  ',r['f'],r['seq'],' '.join(f"{k}={r[k]:.1f}" for k in ['p2d','pubstamp','pub_to_t0','gap','t0seen','arr','nonearr','lastnone_to_t0','lastnone_minus_pub','rx2pub']))
