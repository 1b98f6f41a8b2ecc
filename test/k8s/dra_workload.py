#!/usr/bin/python3
"""dra_workload.py NAME MEM DIR IMAGE SCRIPT [BURST] > objects.json — a workload pod
whose ResourceClaimTemplate asks the DeviceClass gpumem.gshare.io for MEM of
GPU memory (e.g. 2Gi), running the shell SCRIPT in IMAGE with DIR mounted at
/opt/e2e and the fake driver as the NVIDIA runtime would give it (as
workload.py does for the device plugin).  The hook, ld.so.preload and the
agent's socket come from the claim's CDI spec, not from the pod.  BURST
(e.g. 3Gi): the claim's opaque configuration for the driver,
{burst: BURST} (docs/burst.md)."""
import json
import os
import subprocess
import sys

name, mem, d, image, script = sys.argv[1:6]
burst = sys.argv[6] if len(sys.argv) > 6 else None
tmpl = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": name + "-gpu", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpumem.gshare.io", "capacity": {"requests": {"memory": mem}}}}]}}},
}
if burst:
    tmpl["spec"]["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": "gpumem.gshare.io", "parameters": {"burst": burst}}}]
# The device plugin's workload pod (workload.py), its resource limit
# replaced by the claim.
pod = json.loads(subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workload.py"),
                                 name, "0", d, image, script], check=True, capture_output=True, text=True).stdout)
pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": name + "-gpu"}]
pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
json.dump({"apiVersion": "v1", "kind": "List", "items": [tmpl, pod]}, sys.stdout, indent=1)
