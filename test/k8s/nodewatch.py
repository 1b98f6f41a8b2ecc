#!/usr/bin/python3
"""nodewatch.py OUT [INTERVAL_S] — every INTERVAL_S (default 0.5) reads the
node objects (GET /api/v1/nodes, what `kubectl get node -o json` shows) and
the ResourceSlices of gpumem.gshare.io, and appends one JSON line to OUT:
unix_ms, per node capacity and allocatable of gshare.io/gpumem, and per
slice device its capacity.memory.  Talks to the API server of $KUBECONFIG
(token or client certificate) directly rather than forking kubectl twice a
second, so that the polling itself takes little CPU from the workload being
timed.  Stops on SIGTERM.  Used by test/k8s/upgrade_run.sh."""
import base64
import json
import os
import signal
import ssl
import sys
import tempfile
import time
import urllib.request

import yaml

out, iv = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
kc = yaml.safe_load(open(os.environ.get("KUBECONFIG", "/tmp/k134/etc/admin.kubeconfig")))
cl, us = kc["clusters"][0]["cluster"], kc["users"][0]["user"]
ctx = ssl.create_default_context()


def path_or_data(d, key):
    if key + "-data" in d:
        f = tempfile.NamedTemporaryFile(delete=False)
        f.write(base64.b64decode(d[key + "-data"]))
        f.close()
        return f.name
    return d.get(key)


ca = path_or_data(cl, "certificate-authority")
if ca:
    ctx.load_verify_locations(ca)
if path_or_data(us, "client-certificate"):
    ctx.load_cert_chain(path_or_data(us, "client-certificate"), path_or_data(us, "client-key"))
hdr = {"Authorization": "Bearer " + us["token"]} if us.get("token") else {}
stop = False


def onterm(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, onterm)


def get(path):
    req = urllib.request.Request(cl["server"] + path, headers=hdr)
    with urllib.request.urlopen(req, context=ctx, timeout=2) as r:
        return json.load(r)


with open(out, "a") as f:
    while not stop:
        t0 = time.time()
        rec = {"unix_ms": int(t0 * 1000)}
        try:
            for n in get("/api/v1/nodes")["items"]:
                st = n["status"]
                rec[n["metadata"]["name"]] = {"cap": st.get("capacity", {}).get("gshare.io/gpumem"),
                                              "alloc": st.get("allocatable", {}).get("gshare.io/gpumem")}
            sl = {}
            for s in get("/apis/resource.k8s.io/v1/resourceslices")["items"]:
                if s["spec"].get("driver") != "gpumem.gshare.io":
                    continue
                for d in s["spec"].get("devices", []):
                    sl[s["metadata"]["name"] + "/" + d["name"]] = d.get("capacity", {}).get("memory", {}).get("value")
            rec["slices"] = sl
        except Exception as e:  # recorded, not fatal
            rec["error"] = str(e)
        f.write(json.dumps(rec) + "\n")
        f.flush()
        time.sleep(max(0.0, iv - (time.time() - t0)))
