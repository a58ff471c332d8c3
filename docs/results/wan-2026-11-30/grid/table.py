import json,sys
for d in sys.argv[1:]:
    r=json.load(open(d+'/results.json'))
    by={}
    for c in r['cells']:
        for ru in c['runs']:
            by.setdefault(ru['policy'],{})[c['rtt_ms']]=(ru['epochs'],ru['exactly_once'],ru['content_matches'])
    for pol,m in by.items():
        rtts=sorted(m)
        line=[d.split('/')[-1],pol]
        for rt in rtts:
            eps,eo,cm=m[rt]
            line.append('%sms: %s %s'%(rt,' / '.join('%.2f%s'%(e['seconds'],'(p)' if e.get('profiled') else '') for e in eps), '' if eo and cm else '!EO/CM'))
        if 0 in m and len(rtts)>1:
            hi=max(rtts)
            line.append('ratio '+' / '.join('%.3f'%(a['seconds']/b['seconds']) for a,b in zip(m[hi][0],m[0][0])))
        print(' | '.join(line))
