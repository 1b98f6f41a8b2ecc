#!/usr/bin/python3
"""workload.py NAME UNITS DIR IMAGE SCRIPT [NODE] > pod.json — a workload pod
requesting UNITS of gshare.io/gpumem that runs the shell SCRIPT in IMAGE with
DIR mounted at /opt/e2e (DIR holds e2e_cuda, the test program of test/e2e,
and the fake driver's libcuda.so.1), the fake driver's library and state
mounted as the NVIDIA runtime would (see fakegpu.py).  NODE: spec.nodeName,
for a cluster without a scheduler.  FAKEGPU_DIR in the environment: the
host directory of the fake driver's state (default /run/gshare-fakegpu, as
fakegpu.py mounts it; /run/gshare/fakegpu with fakeimage.sh's image)."""
import json
import os
import sys

name, units, d, image, script = sys.argv[1:6]
node = sys.argv[6] if len(sys.argv) > 6 else None
pod = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": name, "namespace": "default"},
    "spec": {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "containers": [{
            "name": "cuda", "image": image, "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", script],
            "env": [{"name": "GSHARE_FAKECUDA_STATE", "value": "/run/gshare-fakegpu/state"},
                    {"name": "GSHARE_FAKECUDA_DEVICES", "value": "1"}],
            "resources": {"limits": {"gshare.io/gpumem": int(units)}},
            "volumeMounts": [
                {"name": "e2e", "mountPath": "/opt/e2e", "readOnly": True},
                {"name": "fake-libcuda", "mountPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "readOnly": True},
                {"name": "fake-gpu", "mountPath": "/run/gshare-fakegpu"}],
        }],
        "volumes": [
            {"name": "e2e", "hostPath": {"path": d, "type": "Directory"}},
            {"name": "fake-libcuda", "hostPath": {"path": d + "/libcuda.so.1", "type": "File"}},
            {"name": "fake-gpu", "hostPath": {"path": os.environ.get("FAKEGPU_DIR", "/run/gshare-fakegpu"),
                                              "type": "DirectoryOrCreate"}}],
    },
}
if node:
    pod["spec"]["nodeName"] = node
json.dump(pod, sys.stdout, indent=1)
