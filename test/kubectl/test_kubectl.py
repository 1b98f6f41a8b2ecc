#!/usr/bin/python3
"""kubectl gshare (scripts/kubectl-gshare) on recorded answers.

fake-kubectl answers `kubectl get --raw` from fixtures/: a NodeList, the
pods (the agents', one namespace's, all), ResourceClaims, and the /metrics
of the agent on gpu-node-1 through the API server's pod proxy (a real scrape
of the agent on the fake driver by test/metrics/test_monitoring.py, with a
device-plugin allocation of pod team/trainer-0 and a DRA claim's,
team/infer-claim).  The agent on gpu-node-3 does not answer its proxy.
Checks the figures `nodes` and `pods` print as JSON and as a table (with
an agent's compute QoS families added: COMPUTE and HELD), that
YAML is the same data, that every read went through `get --raw` (and
--context is passed on), and that a failing API server gives an error, not
a traceback.

fixtures-k136/ are the answers of the real Kubernetes 1.36 of
../shared/kubelet136 (test/k8s/monitoring_run.sh: the chart as shipped with
metricsAddress, the fake driver's 8 GiB GPU in 1 GiB units, pods w1 holding
1024 MiB of 2 units and w2 300 MiB of 1), recorded while kubectl gshare
read them: the same figures must come out of them.
"""
import json
import os
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PLUGIN = os.path.join(REPO, "scripts", "kubectl-gshare")
FAKE = os.path.join(HERE, "fake-kubectl")
GPU = "GPU-67736872-fa4e-4be0-8000-5eed00000000"
MiB = 1 << 20
sys.path.insert(0, os.path.join(REPO, "test", "install"))
from test_chart import check, finish  # noqa: E402

def run(log, *args, kubectl=FAKE, fixtures=""):
    env = dict(os.environ, FAKE_KUBECTL_LOG=log, FAKE_KUBECTL_FIXTURES=fixtures)
    return subprocess.run([PLUGIN, "--kubectl", kubectl] + list(args), capture_output=True, text=True,
                          env=env, timeout=60)


def real(log):
    fx = os.path.join(HERE, "fixtures-k136")
    r = run(log, "nodes", "-o", "json", fixtures=fx)
    rows = json.loads(r.stdout or "[]")
    check(r.returncode == 0 and len(rows) == 1 and
          {k: rows[0].get(k) for k in ("node", "units", "allocated", "free", "lent", "draining", "restoring",
                                       "healthy", "capacity", "allocatable")} ==
          {"node": "k134node", "units": 7, "allocated": 3, "free": 4, "lent": 0, "draining": 0, "restoring": 0,
           "healthy": True, "capacity": 7, "allocatable": 7},
          "1.36 cluster: k134node, 7 units, 3 allocated, 4 free, capacity and allocatable 7", rows)
    r = run(log, "pods", "-A", "-o", "json", fixtures=fx)
    rows = json.loads(r.stdout or "[]")
    got = sorted((x["namespace"], x["pod"], x["container"], x["units"], x["quota_bytes"] // MiB,
                  x["used_bytes"] // MiB, x["processes"]) for x in rows)
    check(r.returncode == 0 and got == [("default", "w1", "cuda", 2, 2048, 1024, 1),
                                        ("default", "w2", "cuda", 1, 1024, 320, 1)],
          "1.36 cluster: w1 2 units, 2 GiB quota, 1 GiB used; w2 1 unit, 1 GiB, 320 MiB (5 chunks of 64 MiB)", got)
    t = run(log, "pods", "-n", "default", fixtures=fx)
    check(t.returncode == 0 and [l.split()[:2] for l in t.stdout.splitlines()] ==
          [["POD", "CONTAINER/CLAIM"], ["w1", "cuda"], ["w2", "cuda"]], "1.36 cluster: pods -n default", t.stdout)


def burst(log, tmp):
    """The same answers with trainer-0's allocation bursting (docs/burst.md):
    quota 128 MiB, burst 512 MiB, 96 MiB borrowed: BURST and BORROWED columns
    (left out above, where nothing may borrow)."""
    import shutil
    fx = os.path.join(tmp, "fixtures-burst")
    shutil.copytree(os.path.join(HERE, "fixtures"), fx)
    path = os.path.join(fx, "metrics-gpu-node-1.txt")
    text = open(path).read()
    lab = next(l[len("gshare_allocation_quota_bytes"):].rsplit(" ", 1)[0] for l in text.splitlines()
               if l.startswith("gshare_allocation_quota_bytes{") and 'pod="trainer-0"' in l)
    with open(path, "a") as f:
        f.write("# TYPE gshare_allocation_burst_bytes gauge\ngshare_allocation_burst_bytes%s %d\n"
                "# TYPE gshare_allocation_borrowed_bytes gauge\ngshare_allocation_borrowed_bytes%s %d\n"
                % (lab, 512 * MiB, lab, 96 * MiB))
    r = run(log, "pods", "-A", "-o", "json", fixtures=fx)
    rows = {x["pod"]: x for x in json.loads(r.stdout or "[]")}
    tr = rows.get("trainer-0", {})
    check(tr.get("burst_bytes") == 512 * MiB and tr.get("borrowed_bytes") == 96 * MiB,
          "burst: trainer-0's burst 512 MiB and 96 MiB borrowed in the JSON", tr)
    t = run(log, "pods", "-A", fixtures=fx)
    lines = [l.split() for l in t.stdout.splitlines()]
    check(t.returncode == 0 and lines[0][-2:] == ["BURST", "BORROWED"] and
          ["team", "trainer-0", "main", "gpu-node-1", GPU, "2", "128Mi", "64Mi", "0", "1", "512Mi", "96Mi"] in lines
          and any(l[:2] == ["team", "infer-0"] and l[-2:] == ["-", "-"] for l in lines),
          "burst: BURST and BORROWED columns, '-' where the allocation may not borrow", t.stdout)

    # Spill (docs/burst.md "Giving it back"): 64 MiB of trainer-0's borrowed
    # memory in host memory, 256 MiB of infer-0's quota lent.
    lab2 = next(l[len("gshare_allocation_quota_bytes"):].rsplit(" ", 1)[0] for l in text.splitlines()
                if l.startswith("gshare_allocation_quota_bytes{") and 'claim="infer-claim"' in l)
    with open(path, "a") as f:
        f.write("# TYPE gshare_allocation_spilled_bytes gauge\ngshare_allocation_spilled_bytes%s %d\n"
                "# TYPE gshare_allocation_lent_bytes gauge\ngshare_allocation_lent_bytes%s %d\n"
                % (lab, 64 * MiB, lab2, 256 * MiB))
    r = run(log, "pods", "-A", "-o", "json", fixtures=fx)
    rows = {x["pod"]: x for x in json.loads(r.stdout or "[]")}
    check(rows.get("trainer-0", {}).get("spilled_bytes") == 64 * MiB and
          rows.get("infer-0", {}).get("lent_bytes") == 256 * MiB,
          "spill: trainer-0's 64 MiB spilled, infer-0's 256 MiB lent, in the JSON", rows)
    t = run(log, "pods", "-A", fixtures=fx)
    lines = [l.split() for l in t.stdout.splitlines()]
    check(t.returncode == 0 and lines[0][-4:] == ["BURST", "BORROWED", "SPILLED", "LENT"] and
          any(l[:2] == ["team", "trainer-0"] and l[-4:] == ["512Mi", "96Mi", "64Mi", "-"] for l in lines) and
          any(l[:2] == ["team", "infer-0"] and l[-4:] == ["-", "-", "-", "256Mi"] for l in lines),
          "spill: SPILLED and LENT columns: who borrows and whose memory is lent", t.stdout)


def compute(log, tmp):
    """The same answers from an agent with compute QoS (docs/compute.md):
    trainer-0 best-effort, capped at 30 %, weight 20, 41 launches held for
    1.5 s, 12.34 s of GPU time; infer-0's claim latency-critical with the
    default weight.  Its families carry no gpu label (per allocation)."""
    import shutil
    fx = os.path.join(tmp, "fixtures-compute")
    shutil.copytree(os.path.join(HERE, "fixtures"), fx)
    path = os.path.join(fx, "metrics-gpu-node-1.txt")
    tr = '{allocation="6447336396706284",namespace="team",pod="trainer-0",container="main"'
    inf = '{allocation="f8c69f030428f840",namespace="team",claim="infer-claim"'
    with open(path, "a") as f:
        f.write("# TYPE gshare_allocation_compute_class gauge\n"
                'gshare_allocation_compute_class%s,class="best-effort"} 1\n'
                'gshare_allocation_compute_class%s,class="latency-critical"} 1\n'
                "# TYPE gshare_allocation_compute_cap_percent gauge\n"
                "gshare_allocation_compute_cap_percent%s} 30\ngshare_allocation_compute_cap_percent%s} 0\n"
                "# TYPE gshare_allocation_compute_weight gauge\n"
                "gshare_allocation_compute_weight%s} 20\ngshare_allocation_compute_weight%s} 10\n"
                "# TYPE gshare_allocation_compute_held_launches_total counter\n"
                "gshare_allocation_compute_held_launches_total%s} 41\n"
                "gshare_allocation_compute_held_launches_total%s} 0\n"
                "# TYPE gshare_allocation_compute_held_seconds_total counter\n"
                "gshare_allocation_compute_held_seconds_total%s} 1.5\n"
                "gshare_allocation_compute_held_seconds_total%s} 0\n"
                "# TYPE gshare_allocation_compute_gpu_seconds_total counter\n"
                "gshare_allocation_compute_gpu_seconds_total%s} 12.34\n"
                "gshare_allocation_compute_gpu_seconds_total%s} 0\n"
                % (tr, inf, tr, inf, tr, inf, tr, inf, tr, inf, tr, inf))
    r = run(log, "pods", "-A", "-o", "json", fixtures=fx)
    rows = {x["pod"]: x for x in json.loads(r.stdout or "[]")}
    got = {p: tuple(rows.get(p, {}).get(k) for k in ("compute_class", "compute_cap", "compute_weight",
                                                    "compute_held_launches", "compute_held_seconds",
                                                    "compute_gpu_seconds"))
           for p in ("trainer-0", "infer-0", "queued-0")}
    check(got == {"trainer-0": ("best-effort", 30, 20, 41, 1.5, 12.34),
                  "infer-0": ("latency-critical", 0, 10, 0, 0.0, 0.0),
                  "queued-0": (None, None, None, None, None, None)},
          "compute: class, cap, weight, held launches and GPU time per pod in the JSON", got)
    t = run(log, "pods", "-A", fixtures=fx)
    lines = [l.split() for l in t.stdout.splitlines()]
    check(t.returncode == 0 and lines[0][-4:] == ["COMPUTE", "HELD", "GPU", "TIME"] and
          ["team", "trainer-0", "main", "gpu-node-1", GPU, "2", "128Mi", "64Mi", "0", "1",
           "best-effort,cap=30%,weight=20", "41/1.5s", "12.3s"] in lines and
          any(l[:2] == ["team", "infer-0"] and l[-3:] == ["latency-critical", "-", "-"] for l in lines) and
          any(l[:2] == ["team", "queued-0"] and l[-3:] == ["-", "-", "-"] for l in lines),
          "compute: COMPUTE (class, cap, weight), HELD and GPU TIME columns", t.stdout)
    t = run(log, "pods", "-A")
    check(t.returncode == 0 and "COMPUTE" not in t.stdout.splitlines()[0],
          "agents without compute QoS: no COMPUTE column", t.stdout)


def main():
    tmp = tempfile.mkdtemp(prefix="gshare-kubectl-")
    log = os.path.join(tmp, "calls")

    r = run(log, "nodes", "-o", "json")
    check(r.returncode == 0, "nodes -o json exits 0", r.stderr)
    rows = json.loads(r.stdout or "[]")
    by = {(x["node"], x["gpu"]): x for x in rows}
    n1 = by.get(("gpu-node-1", GPU), {})
    check(n1.get("units") == 14 and n1.get("allocated") == 4 and n1.get("free") == 10 and n1.get("lent") == 0 and
          n1.get("draining") == 0 and n1.get("restoring") == 0 and n1.get("healthy") is True and
          n1.get("capacity") == 14 and n1.get("allocatable") == 14 and n1.get("pool_free_bytes") == 20 * 32 * MiB,
          "gpu-node-1: 14 units, 4 allocated, 10 free, healthy, capacity 14, pool 640 MiB free", n1)
    n3 = by.get(("gpu-node-3", None), {})
    check("NotFound" in (n3.get("error") or "") and n3.get("capacity") == 14,
          "gpu-node-3: its agent's proxy fails: one row with the error and the node's capacity", n3)
    check(not any(x["node"] == "cpu-node-2" for x in rows), "a node without gshare is left out")
    t = run(log, "nodes")
    lines = t.stdout.splitlines()
    check(t.returncode == 0 and lines[0].split()[:4] == ["NODE", "GPU", "HEALTH", "UNITS"] and
          any(l.split()[:9] == ["gpu-node-1", GPU, "ok", "14", "4", "10", "0", "0", "0"] for l in lines) and
          any(l.startswith("gpu-node-3") and "NotFound" in l for l in lines),
          "nodes table: header, gpu-node-1's figures, gpu-node-3's error", t.stdout)
    y = run(log, "nodes", "-o", "yaml")
    check(y.returncode == 0 and yaml.safe_load(y.stdout) == rows, "nodes -o yaml: the same rows")

    r = run(log, "pods", "-A", "-o", "json")
    check(r.returncode == 0, "pods -A -o json exits 0", r.stderr)
    check("node gpu-node-3: the agent's metrics could not be read" in r.stderr,
          "pods: the agent whose metrics could not be read is named on stderr", r.stderr)
    rows = json.loads(r.stdout or "[]")
    by = {(x["namespace"], x["pod"], x["container"] or x["claim"]): x for x in rows}
    check(sorted(by) == [("team", "infer-0", "infer-claim"), ("team", "queued-0", "main"),
                         ("team", "trainer-0", "main")],
          "pods -A: the container with a request, the claim of the DeviceClass, the pending pod; "
          "no sidecar, no pod without GPU memory, no agent", sorted(by))
    tr = by.get(("team", "trainer-0", "main"), {})
    check(tr.get("node") == "gpu-node-1" and tr.get("gpu") == GPU and tr.get("units") == 2 and
          tr.get("requested_units") == 2 and tr.get("quota_bytes") == 128 * MiB and tr.get("used_bytes") == 64 * MiB and
          tr.get("outside_bytes") == 0 and tr.get("processes") == 1 and tr.get("allocation") == "6447336396706284",
          "trainer-0/main: 2 units, quota 128 MiB, 64 MiB used, 1 process, its allocation", tr)
    inf = by.get(("team", "infer-0", "infer-claim"), {})
    check(inf.get("container") is None and inf.get("units") == 2 and inf.get("quota_bytes") == 128 * MiB and
          inf.get("used_bytes") == 32 * MiB and inf.get("processes") == 1,
          "infer-0's claim: 2 units, quota 128 MiB, 32 MiB used, 1 process", inf)
    q = by.get(("team", "queued-0", "main"), {})
    check(q.get("node") is None and q.get("requested_units") == 4 and q.get("quota_bytes") is None,
          "queued-0 (Pending): its request, nothing from an agent", q)
    t = run(log, "pods", "-A")
    lines = [l.split() for l in t.stdout.splitlines()]
    check(t.returncode == 0 and lines[0][:3] == ["NAMESPACE", "POD", "CONTAINER/CLAIM"] and
          ["team", "trainer-0", "main", "gpu-node-1", GPU, "2", "128Mi", "64Mi", "0", "1"] in lines and
          ["team", "infer-0", "claim/infer-claim", "gpu-node-1", GPU, "2", "128Mi", "32Mi", "0", "1"] in lines,
          "pods -A table", t.stdout)
    t = run(log, "pods", "--context", "prod")
    lines = [l.split() for l in t.stdout.splitlines()]
    check(t.returncode == 0 and lines[0][0] == "POD" and len(lines) == 4 and
          ["trainer-0", "main", "gpu-node-1", GPU, "2", "128Mi", "64Mi", "0", "1"] in lines,
          "pods without -n: the context's namespace (team), no NAMESPACE column", t.stdout)
    t = run(log, "pods", "-n", "nowhere")
    check(t.returncode == 1 and "kubectl gshare:" in t.stderr and "NotFound" in t.stderr and
          "Traceback" not in t.stderr, "an API error: a message naming it, exit 1", t.stderr)
    t = run(log, "nodes", kubectl=os.path.join(tmp, "no-kubectl"))
    check(t.returncode == 1 and "not found" in t.stderr and "Traceback" not in t.stderr,
          "no kubectl: a message, exit 1", t.stderr)

    real(log)
    burst(log, tmp)
    compute(log, tmp)

    with open(log) as f:
        calls = [json.loads(l) for l in f]
    reads = [c for c in calls if "--raw" in c]
    def verb(c):
        while c[:1] in (["--context"], ["--kubeconfig"]):
            c = c[2:]
        return c[:2]
    check(all(verb(c) in (["get", "--raw"], ["config", "view"]) for c in calls) and len(reads) >= 10 and
          all(c[:2] == ["--context", "prod"] for c in calls if "prod" in c) and
          any(c[:2] == ["--context", "prod"] for c in calls),
          "every read is kubectl get --raw (or config view for the namespace); --context is passed on",
          calls[:3])
    check(any(c[-1].endswith("/pods/gshare-7xk2p:9400/proxy/metrics") for c in reads),
          "the agent's metrics come through the API server's pod proxy")
    finish()


if __name__ == "__main__":
    main()
