# Each planned epoch of a testbed run's folders: measured / predicted seconds,
# the offloads the storage agent answered raw (c: contended, work-conserving
# admission), the offloads the compute agent's shedder requested raw (s), and
# the bytes received beyond the prediction's. Usage: python3 shed.py DIR...
import json, glob, sys
for d in sys.argv[1:]:
    for f in sorted(glob.glob(d + '/*-rep*/*.jsonl')):
        pol = f.split('/')[-1][:-6]
        if pol == 'nooff':
            continue
        out = []
        for line in open(f):
            e = json.loads(line)
            if 'prediction' not in e:
                continue
            c = e.get('served_raw', {}).get('contended', 0)
            s = e.get('shed', 0)
            extra = (e['bytes_received'] - e['prediction']['bytes']) / 1e6
            out.append("e%d %.2f/%.2f=%.2f c%d s%d %+.1fMB" % (e['epoch'], e['seconds'], e['predicted_seconds'],
                                                             e['seconds'] / e['predicted_seconds'], c, s, extra))
        print(d.rstrip('/').split('/')[-1], f.split('/')[-2][-4:], pol.ljust(12), ' | '.join(out))
