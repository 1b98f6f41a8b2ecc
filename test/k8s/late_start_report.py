#!/usr/bin/python3
"""late_start_report.py DIR MODE — the figures of test/k8s/late_start_run.sh
from its directory: per gap (DIR/gaps: kill number, kill ms, socket refused
ms; DIR/up.N: socket accepting again ms) the exec'd processes g<N>-* that
started in it (their "start MS" line before the socket accepted again),
with how many exited 0 ("rc 0"); the control processes (a*, before); w1's
summary; w2's phase and how its process ended.  Prints the failed
processes' stderr lines, then one RESULT line; exits 1 unless all passed."""
import glob
import json
import os
import re
import sys

d, mode = sys.argv[1], sys.argv[2]


def proc(name):
    """(start_ms or None, rc or None, first stderr line) of one exec'd process."""
    out = open(os.path.join(d, "exec", name + ".out")).read()
    err = open(os.path.join(d, "exec", name + ".err")).read()
    s = re.search(r"^start (\d+)", out, re.M)
    r = re.search(r"^rc (\d+)", out, re.M)
    return (int(s.group(1)) if s else None, int(r.group(1)) if r else None,
            next((x for x in err.splitlines() if x.strip()), ""))


gaps, ingap, ok, failed, late, why = [], [], [], [], [], {}
for line in open(os.path.join(d, "gaps")) if os.path.exists(os.path.join(d, "gaps")) else []:
    i, t0, down = (int(x) for x in line.split())
    up = int(open(os.path.join(d, "up.%d" % i)).read().split()[0])
    gaps.append(up - t0)
    n_in = n_ok = n_bad = n_late = 0
    for f in sorted(glob.glob(os.path.join(d, "exec", "g%d-*.out" % i))):
        name = os.path.basename(f)[:-4]
        start, rc, err = proc(name)
        if start is None or start >= up:  # did not start in the gap
            n_late += 1
            continue
        n_in += 1
        if rc == 0:
            n_ok += 1
        else:
            n_bad += 1
            why.setdefault(err[:160], []).append(name)
    ingap.append(n_in)
    ok.append(n_ok)
    failed.append(n_bad)
    late.append(n_late)

ctl = [os.path.basename(f)[:-4] for f in glob.glob(os.path.join(d, "exec", "*.out"))
       if not os.path.basename(f).startswith("g")]
ctl_ok = sum(1 for n in ctl if proc(n)[1] == 0)

w1 = {}
for line in open(os.path.join(d, "w1.log")) if os.path.exists(os.path.join(d, "w1.log")) else []:
    if '"event":"summary"' in line:
        w1 = json.loads(line[line.index("{"):])
w1_ok = bool(w1) and w1.get("failed_calls", 1) == 0 and w1.get("verify_failures", 1) == 0

w2 = "absent"
if os.path.exists(os.path.join(d, "w2.pod.json")):
    try:
        st = json.load(open(os.path.join(d, "w2.pod.json")))["status"]
        w2 = st.get("phase", "?")
        if st.get("reason"):
            w2 += ":" + st["reason"]
        log = open(os.path.join(d, "w2.log")).read()
        m = re.search(r"^start (\d+)", log, re.M)
        last = os.path.join(d, "up.%d" % len(gaps))
        if m and os.path.exists(last):
            rel = int(m.group(1)) - int(open(last).read().split()[0])
            w2 += "(process started %s the agent was back, %+d ms)" % ("before" if rel < 0 else "after", rel)
    except (ValueError, KeyError, OSError):
        w2 = "unreadable"

for err, names in why.items():
    print("  %d failed (%s ...): %s" % (len(names), " ".join(names[:4]), err))
j = lambda xs: ",".join(str(x) for x in xs) or "-"
passed = (sum(ingap) > 0 and sum(failed) == 0 and ctl and ctl_ok == len(ctl) and w1_ok
          and w2.startswith("Succeeded"))
print("RESULT late_start mode=%s gaps_ms=%s started_in_gap=%s ok=%s failed=%s after_gap=%s control_ok=%d/%d "
      "w1_failed_calls=%s w1_verify_failures=%s w2=%s %s" %
      (mode, j(gaps), j(ingap), j(ok), j(failed), j(late), ctl_ok, len(ctl),
       w1.get("failed_calls", "?"), w1.get("verify_failures", "?"), w2, "PASS" if passed else "FAIL"))
sys.exit(0 if passed else 1)
