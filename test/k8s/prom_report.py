#!/usr/bin/python3
"""prom_report.py URL — what a Prometheus at URL scraped of gshare (for
monitoring_run.sh): its targets, the per-GPU and per-pod series, and for
every query of the Grafana dashboard (with its variables at All) how many
series it returns; the alerts' state."""
import json
import os
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "metrics"))
from test_monitoring import dashboard_queries, for_prometheus  # noqa: E402

URL = sys.argv[1]


def get(path, **q):
    with urllib.request.urlopen(URL + path + ("?" + urllib.parse.urlencode(q) if q else ""), timeout=10) as r:
        return json.loads(r.read())["data"]


for t in get("/api/v1/targets")["activeTargets"]:
    print("target %s %s health=%s lastError=%r" % (t["labels"].get("job"), t["scrapeUrl"], t["health"],
                                                   t["lastError"]))
for q in ("gshare_gpu_units", "gshare_gpu_units_allocated", "gshare_allocation_quota_bytes",
          "gshare_allocation_held_bytes", "gshare_allocation_processes",
          'sum by (op) (gshare_request_duration_seconds_count)'):
    for r in get("/api/v1/query", query=q)["result"]:
        m = {k: v for k, v in r["metric"].items() if k not in ("job", "instance")}
        print("%s %s = %s" % (q, json.dumps(m, sort_keys=True), r["value"][1]))
empty = 0
for title, expr in dashboard_queries():
    res = get("/api/v1/query", query=for_prometheus(expr))["result"]
    empty += not res
    print("panel %-28s %3d series  %s" % (title[:28], len(res), "" if res else "NO DATA: " + expr))
print("panels' queries with no data: %d of %d" % (empty, len(dashboard_queries())))
for g in get("/api/v1/rules")["groups"]:
    for r in g["rules"]:
        print("rule %s health=%s state=%s" % (r["name"], r["health"], r.get("state")))
