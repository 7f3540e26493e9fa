#!/usr/bin/env python3
"""Counts runs per fire (5 s windows) and item from runs.log; prints anomalies next to events."""
import sys, collections
runs, evs, open_ = [], [], {}
for line in open(sys.argv[1]):
    p = line.split()
    ms = int(p[0])
    if p[1] == 'EXP':
        evs.append((ms, ' '.join(p[3:]))); continue
    who, item, what, pid = p[1], int(p[2]), p[3], p[4]
    if what == 'start':
        r = dict(ms=ms, who=who, item=item, kind=p[5] if len(p) > 5 else '-', fire=p[6] if len(p) > 6 else '-', end=None)
        runs.append(r); open_[pid] = r
    elif pid in open_:
        open_[pid]['end'] = ms
end_ms = max(ms for ms, t in evs if t == 'end')
first = min(r['ms'] for r in runs) // 5000 + 1
last = end_ms // 5000 - 1
win = collections.defaultdict(list)
for r in runs:
    w = r['ms'] // 5000
    if first <= w <= last:
        win[(w, r['item'])].append(r)
n = (last - first + 1) * 4
missed = [(w, i) for w in range(first, last + 1) for i in range(4) if not win[(w, i)]]
multi = [(k, v) for k, v in sorted(win.items()) if len(v) > 1]
killed = [r for r in runs if r['end'] is None and first * 5000 <= r['ms'] <= last * 5000 + 4999]
ends = sum(1 for v in win.values() for r in v if r['end'] is not None)
print(f"item-fires {n}  runs started {sum(len(v) for v in win.values())}  completed {ends}  "
      f"windows with no run {len(missed)}  windows with >1 run {len(multi)}  runs cut by a kill {len(killed)}")
def near(ms):
    return '; '.join(f"{t} at {(e - ms) / 1000:+.1f}s" for e, t in evs if abs(e - ms) < 30000 and t != 'end')
for w, i in missed:
    print(f"  MISSED fire {w * 5 % 3600:>4}s item {i}   [{near(w * 5000)}]")
for (w, i), v in multi:
    d = ', '.join(f"{r['who']} +{r['ms'] - w * 5000}ms {r['kind']} {'done' if r['end'] else 'CUT'}" for r in v)
    print(f"  >1    fire {w * 5 % 3600:>4}s item {i}: {d}   [{near(w * 5000)}]")
for r in killed:
    print(f"  cut   {r['who']} item {r['item']} at fire {r['ms'] // 5000 * 5 % 3600}s +{r['ms'] % 5000}ms")
