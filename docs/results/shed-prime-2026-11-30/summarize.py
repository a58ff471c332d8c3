#!/usr/bin/env python3
"""Summarize the side-by-side runs in this folder: per cell and binary, the
static plans' (resizeoff, fastflow) measured/predicted over the planned
epochs 1-2, the balanced plans' (sophon, optimal), the steady epoch's
seconds and its shed count, model/measured. Usage: summarize.py [DIR]."""
import json, os, sys

here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

def load(d):
    c = json.load(open(os.path.join(d, 'results.json')))['cells'][0]
    out = {}
    for row in c['runs']:
        for e in row['epochs']:
            if e['epoch'] == 0:
                continue
            p = e.get('prediction') or {}
            out[(row['policy'], e['epoch'])] = (e['seconds'] / e['predicted_seconds'], e['seconds'],
                                                p.get('shed') or 0, e.get('shed_measured'))
    return out

for tag in ['x211', 'x1', 'x229']:
    for mode in ['old', 'new']:
        st, bal, secs = [], [], []
        for i in (1, 2):
            d = os.path.join(here, f'{tag}-{mode}-{i}')
            if not os.path.isdir(d):
                continue
            for (pol, ep), v in sorted(load(d).items()):
                if pol in ('resizeoff', 'fastflow'):
                    if v[2] == 0 and abs(v[0] - 1) < 0.011 and pol == 'fastflow' and tag == 'x229':
                        continue  # fastflow chose No-Off at 0.25 core
                    st.append(v[0])
                    if ep == 2:
                        secs.append(f'{pol} {v[1]:.2f} s (model shed {v[2]})')
                else:
                    bal.append(v[0])
        if st:
            print(tag, mode, f'static m/p {min(st):.2f}-{max(st):.2f}',
                  f'balanced {min(bal):.2f}-{max(bal):.2f};', 'epoch 2:', ', '.join(secs))
