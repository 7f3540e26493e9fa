#!/usr/bin/env python3
"""Per kill -9: the victim's items running at the kill, when each first ran again elsewhere,
the fires in between on those items with no run, and whether the killed run also finished."""
import sys
runs, evs = [], []
for line in open(sys.argv[1]):
    p = line.split(); ms = int(p[0])
    if p[1] == 'EXP': evs.append((ms, p[3], p[4] if len(p) > 4 else '')); continue
    if p[3] == 'start': runs.append(dict(ms=ms, who=p[1], item=int(p[2]), pid=p[4], kind=p[5] if len(p) > 5 else '-', end=None))
    else:
        for r in runs:
            if r['pid'] == p[4] and r['end'] is None: r['end'] = ms
for k, what, v in evs:
    if what != 'kill-9': continue
    mine = [r for r in runs if r['who'] == v and r['ms'] <= k and (r['end'] is None or r['end'] > k)]
    out = []
    for r in sorted(mine, key=lambda r: r['item']):
        later = [x for x in runs if x['item'] == r['item'] and x['ms'] > k]
        first = later[0] if later else None
        # fires (multiples of 5 s) after the kill and up to the first run elsewhere, with no run
        lost = 0
        if first:
            f = (k // 5000 + 1) * 5000
            while f + 1000 < first['ms']:
                lost += 1; f += 5000
        out.append(f"item {r['item']}: killed run {'finished anyway' if r['end'] else 'cut'}; again by {first['who']} {first['kind']} "
                   f"at +{(first['ms'] - k) / 1000:.1f}s; fires in between without a run {lost}; next {', '.join(x['who'] + ' ' + x['kind'] for x in later[1:3])}" if first else f"item {r['item']}: never again")
    print(f"kill-9 {v}: " + ('; '.join(out) if out else 'ran nothing at the kill'))
    for o in out: print('   ', o)
