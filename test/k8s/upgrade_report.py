#!/usr/bin/python3
"""upgrade_report.py DIR [MODE] — the figures of an upgrade_run.sh run: per event
(DIR/events: NAME START_MS END_MS), from the workload's tick lines
(DIR/w1.log, e2e_restart) the failed calls and verify failures that appeared
in the window (from the event's start to the next one's), the longest
hooked call that ended in it (hooked_ms), the
longest call of any kind (any_ms) and the longest seen in flight at a tick;
from DIR/node.jsonl (nodewatch.py) the lowest capacity and allocatable of
gshare.io/gpumem and ResourceSlice capacity seen, against the samples at the
workload's ready, with every sample below it listed.  MODE dra: only the ResourceSlice counts
(the node may keep a stale gshare.io/gpumem of an earlier device-plugin
install: capacity as it was, allocatable 0)."""
import json
import sys

d = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else "deviceplugin"
ticks, summary = [], None
for line in open(d + "/w1.log"):
    line = line.strip()
    if line[:1].isdigit() and " " in line:  # kubectl logs --timestamps
        line = line.split(" ", 1)[1]
    if not line.startswith("{"):
        continue
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("event") in ("tick", "ready"):
        ticks.append(o)
    elif o.get("event") == "summary":
        summary = o
nodes = [json.loads(x) for x in open(d + "/node.jsonl")]
ev = []
for line in open(d + "/events"):
    f = line.split()
    ev.append((f[0], int(f[1]), int(f[2]) if len(f) > 2 else None))
# baseline: from the workload's ready to the first event
windows = []
for i, (n, t0, t1) in enumerate(ev):
    if n == "baseline":
        windows.append((n, ticks[0]["unix_ms"] if ticks else t0, ev[i + 1][1] if i + 1 < len(ev) else t0))
    else:  # up to the next event's start: nothing falls between windows
        windows.append((n, t0, ev[i + 1][1] if i + 1 < len(ev) else t1))
windows.append(("whole run", ticks[0]["unix_ms"] if ticks else 0, 1 << 62))


def val(x):
    if x is None:
        return None
    s = str(x)
    for suf, m in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30)):
        if s.endswith(suf):
            return int(s[:-2]) * m
    return int(s)


node_keys = [k for k in nodes[0] if k not in ("unix_ms", "slices", "error")] if nodes and mode != "dra" else []
# The reference: the first samples from the workload's ready on (before it,
# a device plugin just registered may not be in the node's status yet).
t_ready = ticks[0]["unix_ms"] if ticks else 0
ref = {}
for r in [r for r in nodes if r["unix_ms"] >= t_ready - 500]:
    for k in node_keys:
        for f in ("cap", "alloc"):
            if (k, f) not in ref and r.get(k, {}).get(f) is not None:
                ref[(k, f)] = val(r[k][f])
    for s, v in r.get("slices", {}).items():
        if mode == "dra" and ("slice", s) not in ref:
            ref[("slice", s)] = val(v)
print("node/slice reference (at the workload's ready): " + ", ".join("%s %s=%s" % (a, b, v) for (a, b), v in ref.items()))
print("%-16s %8s %7s %7s %10s %10s %11s %8s  %s" % ("window", "seconds", "failed", "verify", "hooked_ms", "any_ms",
                                                  "inflight_ms", "samples", "capacity"))
for n, t0, t1 in windows:
    tk = [t for t in ticks if t0 <= t["unix_ms"] < t1]
    prev = [t for t in ticks if t["unix_ms"] < t0]
    base = prev[-1] if prev else {"failed_calls": 0, "verify_failures": 0}
    last = tk[-1] if tk else base
    failed = last.get("failed_calls", 0) - base.get("failed_calls", 0)
    verify = last.get("verify_failures", 0) - base.get("verify_failures", 0)
    mx = max([t.get("interval_max_hooked_ms", 0) or 0 for t in tk] or [0])
    mi = max([t.get("inflight_ms", 0) or 0 for t in tk] or [0])
    ma = max([t.get("interval_max_ms", 0) or 0 for t in tk] or [0])
    ns = [r for r in nodes if t0 <= r["unix_ms"] <= t1]
    dips, errs = [], sum(1 for r in ns if "error" in r)
    for r in ns:
        if "error" in r:
            continue
        for (a, b), v in ref.items():
            cur = val(r.get("slices", {}).get(b)) if a == "slice" else val(r.get(a, {}).get(b))
            if cur is None or cur < v:
                dips.append("%d %s %s=%s" % (r["unix_ms"], a, b, cur))
    end = "now" if t1 >= 1 << 62 else "%.1f" % ((t1 - t0) / 1000)
    print("%-16s %8s %7d %7d %10.1f %10.1f %11.1f %8d  %s" % (n, end, failed, verify, mx, ma, mi, len(ns),
          ("%d samples below: %s" % (len(dips), "; ".join(dips[:6]))) if dips else "no dip" +
          (" (%d failed polls)" % errs if errs else "")))
if summary:
    keys = ("calls", "failed_calls", "verify_failures", "faults", "max_hooked_ms", "max_hooked_call", "max_ms",
            "max_call", "allocs_ok", "allocs_failed", "frees_ok", "frees_failed", "seconds", "failed", "errors")
    print("summary: " + json.dumps({k: summary.get(k) for k in keys}))
else:
    print("no summary line from the workload (last tick: %s)" % (json.dumps(ticks[-1]) if ticks else None))
