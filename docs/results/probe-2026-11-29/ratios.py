# The storage probe's first planned epoch: planned / effective storage CPU
# of the offloads, per quota, and the next epoch's (priced by the first's
# measured cost: "e/e"). Usage: python3 ratios.py DIR...
import json,sys,math,os
rows={}
for d in sys.argv[1:]:
    for c in ["0.25","0.5","1"]:
        f=f"{d}/100mbit-cpu{c}/resizeoff.log"  # a testbed run's folder
        if not os.path.exists(f):
            f=f"{d}/cpu{c}.jsonl"  # the lines kept here
        L=[]
        for l in open(f):
            try: j=json.loads(l)
            except: continue
            if j.get("message","").startswith("storage cpu of the offloads"): L.append(j)
        first=L[0]["planned_s"]/L[0]["effective_s"]
        rep = L[1]["planned_s"]/L[1]["effective_s"] if len(L)>1 else None
        rows.setdefault(c,[]).append((d.split('/')[-1],first,rep))
for c,r in rows.items():
    print(c, "  ".join("%s %.2f%s"%(n,a,(" (e/e %.2f)"%b if b else "")) for n,a,b in r))
    print("   mean |log| first %.3f"%(sum(abs(math.log(a)) for n,a,b in r)/len(r)))
