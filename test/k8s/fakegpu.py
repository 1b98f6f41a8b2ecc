#!/usr/bin/python3
"""fakegpu.py MANIFEST DIR MEM > OUT.yaml — the shipped manifest with the
fake driver standing in for the GPU, for the runs on real kubelets
(docs/install.md, "Checked on real kubelets").

Adds to the agent container only what the NVIDIA container runtime and a GPU
would provide: DIR/libcuda.so.1 (test/fakecuda) mounted as
/usr/lib/x86_64-linux-gnu/libcuda.so.1, the fake driver's shared state
directory /run/gshare-fakegpu, and its environment (one GPU of MEM).
Everything else is the manifest as shipped.  Workload pods mount the same
two paths (workload.py).
"""
import sys

import yaml

manifest, d, mem = sys.argv[1:4]
docs = [x for x in yaml.safe_load_all(open(manifest)) if x]
for doc in docs:
    if doc["kind"] != "DaemonSet":
        continue
    spec = doc["spec"]["template"]["spec"]
    spec["volumes"] += [
        {"name": "fake-libcuda", "hostPath": {"path": d + "/libcuda.so.1", "type": "File"}},
        {"name": "fake-gpu", "hostPath": {"path": "/run/gshare-fakegpu", "type": "DirectoryOrCreate"}}]
    agent = [c for c in spec["containers"] if c["name"] == "agent"][0]
    agent["volumeMounts"] += [
        {"name": "fake-libcuda", "mountPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "readOnly": True},
        {"name": "fake-gpu", "mountPath": "/run/gshare-fakegpu"}]
    agent["env"] += [{"name": "GSHARE_FAKECUDA_STATE", "value": "/run/gshare-fakegpu/state"},
                     {"name": "GSHARE_FAKECUDA_MEM", "value": mem},
                     {"name": "GSHARE_FAKECUDA_DEVICES", "value": "1"}]
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
