#!/usr/bin/python3
"""kubelet_restart_report.py DIR — the figures of
test/k8s/kubelet_restart_run.sh: per restart (DIR/restarts: number, start
ms, end ms, registrations) the node samples (DIR/node.jsonl) in which
gshare.io/gpumem's capacity or allocatable was below its value in the
samples before the first restart; a dip's length is from its first low
sample to the next sample that is not low.  Prints one line per restart
with a dip or other than one registration, then the RESULT line; exits 1
unless every restart made one registration and nothing dipped."""
import json
import os
import sys

d = sys.argv[1]
samples = []
for line in open(os.path.join(d, "node.jsonl")):
    r = json.loads(line)
    n = next((v for k, v in r.items() if isinstance(v, dict) and "alloc" in v), None)
    if n is None:
        continue
    val = lambda x: int(x) if x is not None else 0
    samples.append((r["unix_ms"], val(n["cap"]), val(n["alloc"])))
restarts = [tuple(int(x) for x in l.split()) for l in open(os.path.join(d, "restarts"))]
first = restarts[0][1] if restarts else float("inf")
before = [s for s in samples if s[0] < first]
base_cap, base_alloc = (before[-1][1], before[-1][2]) if before else (0, 0)
regs, dipped, longest, lowest = [], 0, 0, base_alloc
for i, t0, t1, nreg in restarts:
    regs.append(nreg)
    win = [s for s in samples if t0 <= s[0] < t1]
    low_ms, start, lows = 0, None, 0
    for t, cap, alloc in win:
        low = cap < base_cap or alloc < base_alloc
        lowest = min(lowest, alloc)
        if low:
            lows += 1
            start = t if start is None else start
        elif start is not None:
            low_ms = max(low_ms, t - start)
            start = None
    if start is not None:
        low_ms = max(low_ms, win[-1][0] - start)
    if lows:
        dipped += 1
        longest = max(longest, low_ms)
    if lows or nreg != 1:
        print("  restart %d: %d registration(s), %d of %d samples low (%d ms)" % (i, nreg, lows, len(win), low_ms))
passed = bool(restarts) and base_alloc > 0 and all(r == 1 for r in regs) and dipped == 0
print("RESULT kubelet_restart restarts=%d registrations=%s restarts_with_dip=%d longest_dip_ms=%d lowest_alloc=%d "
      "baseline=%d/%d samples=%d %s" % (len(restarts), ",".join(map(str, regs)) or "-", dipped, longest, lowest,
                                        base_cap, base_alloc, len(samples), "PASS" if passed else "FAIL"))
sys.exit(0 if passed else 1)
