import re,statistics as st,sys,collections
rows=collections.defaultdict(list)
for l in open(sys.argv[1]):
    m=re.match(r'wire (\d+) (\S+) image-768k-on (.*)',l)
    if not m: continue
    r,v,rest=m.groups()
    d={}
    for seg,p50,p999,mx in re.findall(r'(last_rx_to_seen|publish_to_detect|compute) ([\d.]+) p99.9 ([\d.]+) max ([\d.]+)',rest):
        d[seg]=(float(p50),float(p999),float(mx))
    pk=re.search(r'datagrams (\d+)  placed_by_kernel (\d+)',rest)
    d['placed']=int(pk.group(2))/int(pk.group(1))
    rows[v].append(d); rows[v[0]].append(d)
for k in ['A','B','A-pinned','B-pinned','A-free','B-free']:
    ds=rows[k]; out=[f"{k:9s} n={len(ds):2d} placed {100*st.median(d['placed'] for d in ds):.1f}%"]
    for seg in ['last_rx_to_seen','publish_to_detect','compute']:
        p50=st.median(d[seg][0] for d in ds); p999=st.median(d[seg][1] for d in ds); lo=min(d[seg][1] for d in ds); hi=max(d[seg][1] for d in ds); mx=st.median(d[seg][2] for d in ds)
        out.append(f"{seg} p50 {p50:.1f} p99.9 {p999:.1f} ({lo:.0f}-{hi:.0f}) max {mx:.0f}")
    print(" | ".join(out))
