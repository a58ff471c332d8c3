#!/usr/bin/env python3
"""Per cell, binary and policy: the last epochs' mean, range, measured over
predicted, and offloads answered raw as contended, over the runs here.

    python3 summary.py            (from this folder)
"""
import json, os, re, statistics as st, sys

here = os.path.dirname(os.path.abspath(sys.argv[0]))
agg = {}
for name in sorted(os.listdir(here)):
    path = os.path.join(here, name, "results.json")
    if not os.path.exists(path):
        continue
    cell, binary, _ = name.rsplit("-", 2)
    r = json.load(open(path))
    for c in r["cells"]:
        for run in c["runs"]:
            e = run["epochs"][-1]
            cont = sum(int(x) for x in re.findall(r'"contended": (\d+)', json.dumps(e)))
            agg.setdefault((cell, run["policy"], binary), []).append(
                (e["seconds"], e["seconds"] / e["predicted_seconds"], cont))
for (cell, pol, binary), v in sorted(agg.items()):
    if pol == "nooff":
        continue
    s = [x[0] for x in v]
    mp = [x[1] for x in v]
    c = [x[2] for x in v]
    print(f"{cell:6s} {pol:12s} {binary}: {len(v)} runs, last epoch mean {st.mean(s):.3f} s "
          f"({min(s):.2f}-{max(s):.2f}), measured/predicted {min(mp):.2f}-{max(mp):.2f}, "
          f"answered raw {sum(c)} ({min(c)}-{max(c)} a run)")
