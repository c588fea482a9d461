import re,statistics as st,sys
rows={}
for l in open(sys.argv[1]):
    m=re.match(r'wire (\d+) (\S+) (\S+) (.*)',l)
    if not m: continue
    r,v,c,rest=m.groups()
    d={}
    for seg,p50,p999,mx in re.findall(r'(\w+) ([\d.]+) p99.9 ([\d.]+) max ([\d.]+)',rest):
        d[seg]=(float(p50),float(p999),float(mx))
    rows.setdefault((v,c),[]).append(d)
for k,ds in sorted(rows.items()):
    out=[]
    for seg in ['last_rx_to_seen','publish_to_detect','compute','done_to_seen']:
        if seg not in ds[0]: continue
        p50=st.median(d[seg][0] for d in ds); p999=st.median(d[seg][1] for d in ds); mx=st.median(d[seg][2] for d in ds)
        lo=min(d[seg][1] for d in ds); hi=max(d[seg][1] for d in ds)
        out.append(f"{seg} p50 {p50:.1f} p99.9 {p999:.1f} ({lo:.0f}-{hi:.0f}) max {mx:.1f}")
    print(k, len(ds), " | ".join(out))
