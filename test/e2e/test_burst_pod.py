#!/usr/bin/python3
"""test_burst_pod.py — the burst limit of a device-plugin pod, from its
annotation gshare.io/gpumem-burst (docs/burst.md; agent/services/
gs_podburst.h), on the fake driver (28 chunks of 32 MiB, 64 MiB units).

A PodResources stand-in (test/recon) says which pod holds an allocation; a
fake API server answers GET of that pod with its annotations.  With
burstMax 256Mi:
  - pod burster (1 unit, annotation 256Mi): the reconciler applies the burst;
    a process that registered before it now borrows up to it, a new one's
    cuMemGetInfo says 256 MiB, the checkpoint line ends in burst=;
  - pod plain (no annotation): nothing changes;
  - pod greedy (annotation 512Mi, past burstMax) and pod typo (annotation
    "lots"): refused, logged once, nothing changes.
Environment: B (build dir), SANITIZE."""
import http.server
import json
import os
import re
import subprocess
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "test", "recon"))
sys.path.insert(0, os.path.join(ROOT, "test", "plugin"))
import test_e2e as e  # noqa: E402
from test_recon import kube_setup  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

RES = "gshare.io/gpumem"
ANN = {"burster": "256Mi", "greedy": "512Mi", "typo": "lots"}


class ApiServer(http.server.ThreadingHTTPServer):
    """GET /api/v1/namespaces/team/pods/<name>: a Pod with ANN's annotation."""

    def __init__(self):
        self.gets = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.gets.append(self.path)
                m = re.fullmatch(r"/api/v1/namespaces/team/pods/([a-z0-9-]+)", self.path)
                if not m:
                    self.send_response(404)
                    self.end_headers()
                    return
                name = m.group(1)
                meta = {"name": name, "namespace": "team"}
                if name in ANN:
                    meta["annotations"] = {"gshare.io/gpumem-burst": ANN[name], "other.io/x": "y"}
                body = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def main():
    e.need(e.AGENT, e.CTL, e.CUDA, e.FAKE, e.HOOK)
    api = ApiServer()
    tmp, ns, kubelet, conf = kube_setup("gshare-burstpod-", api.server_address[1], "burstMax: 256Mi\n")
    ag = e.Agent(tmp, ["--config", conf])
    ag.start()
    try:
        uuid = ag.gpus()[0]["uuid"]
        pods = {n: "%s-u%d" % (uuid, u) for u, n in enumerate(("burster", "plain", "greedy", "typo"))}
        al = {n: ag.create([d])["allocation"] for n, d in pods.items()}
        # A process of burster registers before the reconciler knows its pod.
        p = subprocess.Popen([e.CUDA, "grow", "0"], env=e.hook_env(ag, al["burster"]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(p.stdout.readline().startswith("held"), "a process of pod burster registers first")
        kubelet.set(pods=[("team", n, "main", [(RES, [d])]) for n, d in pods.items()])

        def burst(n):
            return ag.allocs()[al[n]["id"]]["parts"][0]["burst_bytes"]
        check(e.wait_for(lambda: burst("burster") == 256 * MiB) is not None,
              "pod burster's annotation 256Mi applied to its allocation (%d)" % burst("burster"))
        check(any(g == "/api/v1/namespaces/team/pods/burster" for g in api.gets), "the agent GETs the pod")

        def say(cmd):
            p.stdin.write(cmd + "\n")
            p.stdin.flush()
            return p.stdout.readline().split()
        got = [say("alloc 32") for _ in range(6)]
        check(all(x == ["alloc", "ok"] for x in got),
              "the process registered before borrows past its 64 MiB quota: 192 MiB (%s)" % got)
        p.kill()
        p.wait()
        r = e.run([e.CUDA, "meminfo"], e.hook_env(ag, al["burster"]))
        m = re.search(r"free (\d+) total (\d+)", r.stdout)
        check(m is not None and int(m.group(2)) == 256 * MiB, "a new process's cuMemGetInfo total: 256 MiB (%s)"
              % r.stdout.strip())
        ckpt = open(os.path.join(tmp, "state", "allocations")).read()
        check(re.search(r"^%s .* burst=%d$" % (al["burster"]["id"], 256 * MiB), ckpt, re.M) is not None,
              "the checkpoint line ends in burst=")
        check(burst("plain") == 64 * MiB, "pod plain, no annotation: no burst")
        e.wait_for(lambda: "greedy" in ag.logtext() and "typo" in ag.logtext(), limit=5)
        log = ag.logtext()
        check(burst("greedy") == 64 * MiB and "annotation gshare.io/gpumem-burst 512Mi not applied: burst 512Mi borrows "
              "448Mi past the quota on GPU %s; this node allows 256Mi (burstMax)" % uuid in log,
              "pod greedy's 512Mi, past burstMax: refused and logged")
        check(log.count("512Mi not applied") == 1, "... once, not at every List (%d)" % log.count("512Mi not applied"))
        check(burst("typo") == 64 * MiB and log.count("'lots' is not a size") == 1,
              "pod typo's 'lots': refused and logged once (%d)" % log.count("'lots' is not a size"))
        n = len(api.gets)
        e.wait_for(lambda: False, limit=1.0)  # five more Lists
        check(len(api.gets) == n, "the pods' answers are kept: no GET at every List (%d more)" % (len(api.gets) - n))
    finally:
        ag.stop()
        kubelet.stop()
        api.shutdown()
    e.report(ag, tmp)


if __name__ == "__main__":
    main()
