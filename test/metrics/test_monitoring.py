#!/usr/bin/python3
"""The monitoring gshare ships (docs/metrics.md) against a live agent.

Starts the real agent on the fake driver with metricsAddress, NODE_NAME and
a stand-in for the kubelet's PodResources (test/recon's) that names the pod
of a device-plugin allocation; makes a DRA claim's allocation through the
control socket; runs hooked processes in both (one holds memory, others
allocate, free and exit, so requests, grants, context charges and scrubs
are recorded); then drops the pod from PodResources while its process runs
(the allocation drains).  Checks:

- the scrape parses with prometheus_client's parser (the one kubectl-gshare
  uses) and passes `promtool check metrics` (Prometheus' naming lint);
- each allocation's compute families (class, cap, weight, held launches
  and seconds: docs/compute.md) with their defaults;
- the dashboard's layout: panel ids unique, none outside the grid or over
  another, panels for the compute families;
- every metric and label that a query of the Grafana dashboard
  (charts/gshare/dashboards/gshare.json) or of the alerts
  (charts/gshare/files/gshare-rules.yaml) names is exposed, with the
  namespace/pod/container and claim labels that join with kube-state-metrics;
- every exposed metric family is listed in docs/metrics.md;
- `promtool check rules` passes on the alerts;
- Debian's Prometheus, scraping the agent (honor_labels, as the shipped
  PodMonitor does) with the alerts loaded: every panel's query returns data,
  every rule evaluates without error, and GshareAllocationDraining goes
  pending for the draining allocation.

Needs the prometheus and python3-prometheus-client packages (make deps).
Environment: B, SANITIZE (see test_e2e.py); GSHARE_RECORD=DIR also writes
the scrape to DIR/metrics.txt (test/kubectl's fixtures come from one).
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "test", "plugin"))
sys.path.insert(0, os.path.join(REPO, "test", "recon"))
sys.path.insert(0, os.path.join(REPO, "test", "e2e"))
import gsproto  # noqa: E402
import test_e2e as e2e  # noqa: E402
import test_recon as recon  # noqa: E402
import test_metrics as tm  # noqa: E402

import yaml  # noqa: E402

check = e2e.check
DASHBOARD = os.path.join(REPO, "charts", "gshare", "dashboards", "gshare.json")
RULES = os.path.join(REPO, "charts", "gshare", "files", "gshare-rules.yaml")
DOC = os.path.join(REPO, "docs", "metrics.md")
NODE = "gpu-node-1"
# Labels Prometheus itself puts on every series it scrapes.
TARGET_LABELS = {"job", "instance"}

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    text_string_to_metric_families = None


def need_tools():
    missing = [t for t in ("prometheus", "promtool") if not shutil.which(t)]
    if text_string_to_metric_families is None:
        missing.append("python3-prometheus-client")
    if missing:
        raise SystemExit("missing %s: run make deps (Debian's prometheus, python3-prometheus-client)"
                         % ", ".join(missing))


# ---- the queries shipped ----

def dashboard_queries():
    """[(panel title, expr)] of every panel target and template variable."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+), *(\w+)\)", v["definition"])
            check(m is not None, "variable %s: label_values(metric, label)" % v["name"])
            out.append(("variable " + v["name"], "%s{%s!=\"\"}" % (m.group(1), m.group(2))))
    return out


def dashboard_layout():
    """The dashboard's panels: ids unique, each within the 24 columns,
    none overlapping another; and the compute panels (docs/compute.md):
    class, cap and weight per pod, held launches and their time per pod."""
    with open(DASHBOARD) as f:
        d = json.load(f)
    ids = [p["id"] for p in d["panels"]]
    check(len(ids) == len(set(ids)), "dashboard: panel ids unique (%s)" % ids)
    cells, bad = {}, []
    for p in d["panels"]:
        g = p["gridPos"]
        if not (g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0):
            bad.append("%s outside the grid (%s)" % (p["title"], g))
        over = {cells[(x, y)] for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
                if (x, y) in cells}
        if over:
            bad.append("%s over %s" % (p["title"], sorted(over)))
        cells.update({(x, y): p["title"] for x in range(g["x"], g["x"] + g["w"])
                      for y in range(g["y"], g["y"] + g["h"])})
    check(not bad, "dashboard: every panel within the 24 columns, none over another %s" % bad)
    exprs = " ".join(t["expr"] for p in d["panels"] for t in p.get("targets", []))
    for m in ("gshare_allocation_compute_class", "gshare_allocation_compute_cap_percent",
              "gshare_allocation_compute_weight", "gshare_allocation_compute_held_launches_total",
              "gshare_allocation_compute_held_seconds_total", "gshare_allocation_compute_gpu_seconds_total",
              "gshare_process_compute_duty_percent"):
        check(m in exprs, "dashboard: a panel shows %s" % m)


def rule_queries():
    with open(RULES) as f:
        groups = yaml.safe_load(f)["groups"]
    return [(r["alert"], r["expr"]) for g in groups for r in g["rules"]]


def for_prometheus(expr):
    """A panel's query as Grafana sends it with every variable at All."""
    return (expr.replace("$__rate_interval", "1m").replace('"$node"', '".*"')
            .replace('"$namespace"', '".*"'))


SELECTOR = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(\{([^}]*)\})?")
MATCHER = re.compile(r"([a-z_][a-z0-9_]*)\s*(=~|!~|!=|=)")
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
PROMQL_WORDS = {"sum", "count", "max", "min", "avg", "by", "without", "on", "ignoring", "group_left",
                "group_right", "rate", "increase", "changes", "histogram_quantile", "max_over_time",
                "time", "vector", "and", "or", "unless", "offset", "bool"}


def names_in(expr):
    """(metrics {name: set of labels matched}, labels grouped by) of a
    PromQL expression (label values and durations removed first)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\[[^\]]*\]", "", e)
    grouped = set()
    for m in GROUPING.finditer(e):
        grouped |= {x.strip() for x in m.group(2).split(",") if x.strip()}
    e = GROUPING.sub(" ", e)
    metrics = {}
    for m in SELECTOR.finditer(e):
        name = m.group(1)
        if name in PROMQL_WORDS or re.fullmatch(r"[0-9e.]+", name):
            continue
        metrics.setdefault(name, set()).update(x[0] for x in MATCHER.findall(m.group(3) or ""))
    return metrics, grouped


def exposed(text):
    """{sample name: set of label names} and {family: type} of a scrape."""
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        # The parser names a counter's family without its _total.
        types[fam.name + ("_total" if fam.type == "counter" else "")] = fam.type
        for s in fam.samples:
            samples.setdefault(s.name, set()).update(s.labels)
    return samples, types


def check_names(what, expr, samples):
    metrics, grouped = names_in(expr)
    ok = True
    seen = set(TARGET_LABELS)
    for name, labels in metrics.items():
        if name == "up":  # Prometheus's own, per target
            continue
        have = samples.get(name)
        if have is None:
            check(False, "%s: metric %s is exposed by the agent" % (what, name))
            ok = False
            continue
        seen |= have
        missing = labels - have - TARGET_LABELS
        if missing:
            check(False, "%s: %s has the labels %s" % (what, name, sorted(missing)))
            ok = False
    missing = grouped - seen
    if missing:
        check(False, "%s: labels grouped by %s are on its metrics" % (what, sorted(missing)))
        ok = False
    return ok


# ---- the agent and its workloads ----

def claim_allocation(ag, tmp, uuid, ns, name, units):
    gns = gsproto.load(tmp)
    req = gns.ctl.Request(create_claim_allocation=gns.ctl.CreateClaimAllocationRequest(
        claim_uid="0f2b6c1e-5a7d-4e1b-9c3a-7d2e8f4a6b10", claim_namespace=ns, claim_name=name,
        gpu_uuid=uuid, units=units))
    body = req.SerializeToString()
    data = e2e.ctl_raw(ag.sock, struct.pack("<I", len(body)) + body)
    rep = gns.ctl.Reply.FromString(data[4:]) if len(data) >= 4 else gns.ctl.Reply()
    check(rep.error == 0, "a claim's allocation made through the control socket (%r)" % rep.message)
    return [a for a in ag.allocs().values() if a.get("claim") == name][0]


def run_short(env, *args):
    r = subprocess.run([e2e.CUDA] + list(args), env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "workload %s exits 0 (%s)" % (" ".join(args), r.stderr.strip()[-200:]))


# ---- Prometheus ----

class Prometheus:
    def __init__(self, tmp, target):
        self.port = e2e.free_port()
        self.dir = os.path.join(tmp, "prometheus")
        os.makedirs(self.dir)
        self.config = os.path.join(self.dir, "prometheus.yml")
        shutil.copy(RULES, os.path.join(self.dir, "gshare-rules.yaml"))
        with open(self.config, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["gshare-rules.yaml"],
                "scrape_configs": [{"job_name": "gshare", "honor_labels": True,
                                    "static_configs": [{"targets": [target]}]}],
            }, f)
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + self.config, "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=self.log)

    def get(self, path, **q):
        url = "http://127.0.0.1:%d%s" % (self.port, path)
        if q:
            url += "?" + urllib.parse.urlencode(q)
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())

    def ready(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr):
        return self.get("/api/v1/query", query=expr)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK)
    need_tools()
    tmp = tempfile.mkdtemp(prefix="gshare-monitoring-")
    ns = gsproto.load(tmp)
    kubelet = recon.PodResources(ns, os.path.join(tmp, "podres.sock"))
    kubelet.start()
    port = e2e.free_port()
    ag = tm.MetricsAgent(tmp, "127.0.0.1:%d" % port)
    with open(ag.config, "a") as f:
        f.write("podResourcesSocket: %s\nreconcileInterval: 200ms\nreclaimGrace: 600s\n" % kubelet.path)
    ag.env["NODE_NAME"] = NODE
    ag.start()
    prom = None
    holders = []
    try:
        prom = body(ag, port, kubelet, tmp, holders)
    finally:
        for h in holders:
            h.kill()
            h.wait()
        if prom:
            prom.stop()
        ag.stop()
        kubelet.stop()
    e2e.report(ag)


def hold(env, mib, holders):
    h = subprocess.Popen([e2e.CUDA, "hold", str(mib)], env=env, stdout=subprocess.PIPE, text=True)
    holders.append(h)
    check(h.stdout.readline().strip() == "held", "a hooked process holds %d MiB" % mib)
    return h


def body(ag, port, kubelet, tmp, holders):
    uuid = ag.gpus()[0]["uuid"]
    ids_a = ["%s-u0" % uuid, "%s-u1" % uuid]
    A = ag.create(ids_a)["allocation"]
    kubelet.set(pods=[("team", "trainer-0", "main", [("gshare.io/gpumem", ids_a)])])
    C = claim_allocation(ag, tmp, uuid, "team", "infer-claim", 2)
    ea, ec = e2e.hook_env(ag, A), e2e.hook_env(ag, C)
    hold(ea, 40, holders)
    hold(ec, 24, holders)
    for env in (ea, ec):
        run_short(env, "data", "8")
        run_short(env, "threads", "4")
    check(e2e.wait_for(lambda: ag.allocs()[A["id"]].get("pod_name") == "trainer-0") is not None,
          "the reconciler names A's pod (%r)" % ag.allocs()[A["id"]].get("pod_name"))
    m, text = tm.scrape(port)
    record = os.environ.get("GSHARE_RECORD")
    if record:
        with open(os.path.join(record, "metrics.txt"), "w") as f:
            f.write(text)

    # The exposition: the library's parser and Prometheus' lint.
    samples, types = exposed(text)
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    check(lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(),
          "promtool check metrics: no complaint (%s)" % (lint.stdout + lint.stderr).strip()[:600])
    for fam in ("gshare_request_duration_seconds", "gshare_grant_bytes", "gshare_context_charge_duration_seconds",
                "gshare_scrub_duration_seconds", "gshare_reconcile_duration_seconds"):
        check(types.get(fam) == "histogram", "%s is a histogram" % fam)
    counts = {dict(k).get("op"): v for (n, k), v in m.items() if n == "gshare_request_duration_seconds_count"}
    check(counts.get("alloc", 0) > 0 and counts.get("free", 0) > 0 and counts.get("ctx", 0) > 0,
          "request latency recorded for alloc, free and ctx (%r)" % counts)
    for name in ("gshare_grant_bytes_count", "gshare_context_charge_duration_seconds_count",
                 "gshare_reconcile_duration_seconds_count"):
        total = sum(v for (n, _), v in m.items() if n == name)
        check(total > 0, "%s counts work (%s)" % (name, total))
    la = {"namespace": "team", "pod": "trainer-0", "container": "main"}
    check(any(n == "gshare_allocation_quota_bytes" and la.items() <= dict(k).items() for n, k in m),
          "A's series carry namespace, pod and container (kube-state-metrics' labels)")
    check(any(n == "gshare_allocation_quota_bytes" and dict(k).get("claim") == "infer-claim" and
              dict(k).get("namespace") == "team" for n, k in m), "the claim's series carry claim and namespace")
    check(all(dict(k).get("node") == NODE for n, k in m if n.startswith("gshare_gpu_")),
          "the GPU series carry the node (NODE_NAME)")

    # Compute QoS per pod (docs/compute.md): every allocation's policy,
    # the default here, and nothing held.
    for aid in (A["id"], C["id"]):
        got = {n: v for (n, k), v in m.items() if n.startswith("gshare_allocation_compute_") and
               dict(k).get("allocation") == aid and dict(k).get("class", "standard") == "standard"}
        check(got == {"gshare_allocation_compute_class": 1, "gshare_allocation_compute_cap_percent": 0,
                      "gshare_allocation_compute_weight": 10, "gshare_allocation_compute_held_launches_total": 0,
                      "gshare_allocation_compute_held_seconds_total": 0,
                      "gshare_allocation_compute_gpu_seconds_total": 0},
              "allocation %s: compute class standard, no cap, weight 10, nothing held, no GPU time (%s)"
              % (aid, got))

    # Every metric and label the dashboard and the alerts use.
    dashboard_layout()
    queries = dashboard_queries() + rule_queries()
    ok = all([check_names(what, expr, samples) for what, expr in queries])
    check(ok, "every metric and label of the %d dashboard and alert queries is exposed" % len(queries))
    with open(DOC) as f:
        doc = f.read()
    undocumented = sorted(f for f in types if "`%s`" % f not in doc)
    check(not undocumented, "every metric family is in docs/metrics.md (missing %s)" % undocumented)
    r = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True)
    check(r.returncode == 0, "promtool check rules: %s" % (r.stdout + r.stderr).strip().replace("\n", " "))

    # The pod goes while its process runs: A drains.
    kubelet.set(pods=[])
    check(e2e.wait_for(lambda: get_draining(port, A["id"]) == 1) is not None, "A drains once its pod is gone")

    # Prometheus scrapes it and runs every query.
    prom = Prometheus(tmp, "127.0.0.1:%d" % port)
    check(e2e.wait_for(prom.ready, limit=60) is not None, "Prometheus is ready")

    def scraped():
        r = prom.query("count_over_time(gshare_allocations[1m])")["data"]["result"]
        return r and float(r[0]["value"][1]) >= 4
    check(e2e.wait_for(scraped, limit=60) is not None, "Prometheus scraped the agent 4 times")
    run_short(ea, "data", "8")  # requests between scrapes: rates are not 0
    time.sleep(2)
    empty = []
    for what, expr in dashboard_queries():
        res = prom.query(for_prometheus(expr))
        if res.get("status") != "success" or not res["data"]["result"]:
            empty.append("%s: %s -> %s" % (what, expr, res.get("error") or "no data"))
    check(not empty, "every panel's query returns data from Prometheus (%d queries)%s"
          % (len(dashboard_queries()), "".join("\n    " + e for e in empty)))

    def draining_alert():
        alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "GshareAllocationDraining"
                and a["labels"].get("allocation") == A["id"]]
    check(e2e.wait_for(draining_alert, limit=30) is not None, "GshareAllocationDraining is pending for A")
    rules = [r for g in prom.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
    check(len(rules) == len(rule_queries()) and all(r["health"] == "ok" for r in rules),
          "Prometheus loaded the %d alerts and each evaluates (%s)"
          % (len(rule_queries()), [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]))
    return prom


def get_draining(port, aid):
    m, _ = tm.scrape(port)
    return next((v for (n, k), v in m.items() if n == "gshare_allocation_draining" and dict(k)["allocation"] == aid),
                None)


if __name__ == "__main__":
    main()
