import sys
import glob,collections,bisect
tot_in=collections.Counter(); tot_all=collections.Counter(); nwin=0; nsamp=0
for d in sorted(glob.glob(''+sys.argv[1]+'/r*')):
    s=[]
    for l in open(d+'/rx-samples.txt'):
        p=l.split()
        t=float(p[2].rstrip(':'))*1e9
        sym=p[4] if len(p)>4 else '?'
        dso=p[-1]
        s.append((t,sym+' '+dso))
    if not s: continue
    s.sort(); ts=[x[0] for x in s]
    for _,sym in s: tot_all[sym]+=1
    wins=[]
    for l in open(d+'/rec-768k.txt').read().split('\n')[20:]:
        if not l: continue
        x=[int(a) for a in l.split()]
        pub,fresh=x[3],x[17]
        if fresh-pub>50_000: wins.append((pub,fresh))
    for a,b in wins:
        if a<ts[0] or b>ts[-1]: continue
        nwin+=1
        i=bisect.bisect_left(ts,a); j=bisect.bisect_right(ts,b)
        for k in range(i,j): tot_in[s[k][1]]+=1; nsamp+=1
print('windows',nwin,'samples in windows',nsamp)
for sym,c in tot_in.most_common(30): print(f"{c:6d} {100*c/nsamp:5.1f}%  (all {100*tot_all[sym]/sum(tot_all.values()):5.1f}%) {sym}")
