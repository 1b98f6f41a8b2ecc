#!/usr/bin/python3
"""dra_workload.py NAME MEM DIR IMAGE SCRIPT > objects.json — a workload pod
whose ResourceClaimTemplate asks the DeviceClass gpumem.gshare.io for MEM of
GPU memory (e.g. 2Gi), running the shell SCRIPT in IMAGE with DIR mounted at
/opt/e2e and the fake driver as the NVIDIA runtime would give it (as
workload.py does for the device plugin).  The hook, ld.so.preload and the
agent's socket come from the claim's CDI spec, not from the pod."""
import json
import sys

name, mem, d, image, script = sys.argv[1:6]
tmpl = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": name + "-gpu", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpumem.gshare.io", "capacity": {"requests": {"memory": mem}}}}]}}},
}
pod = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": name, "namespace": "default"},
    "spec": {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name + "-gpu"}],
        "containers": [{
            "name": "cuda", "image": image, "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", script],
            "env": [{"name": "GSHARE_FAKECUDA_STATE", "value": "/run/gshare-fakegpu/state"},
                    {"name": "GSHARE_FAKECUDA_DEVICES", "value": "1"}],
            "resources": {"claims": [{"name": "gpu"}]},
            "volumeMounts": [
                {"name": "e2e", "mountPath": "/opt/e2e", "readOnly": True},
                {"name": "fake-libcuda", "mountPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "readOnly": True},
                {"name": "fake-gpu", "mountPath": "/run/gshare-fakegpu"}],
        }],
        "volumes": [
            {"name": "e2e", "hostPath": {"path": d, "type": "Directory"}},
            {"name": "fake-libcuda", "hostPath": {"path": d + "/libcuda.so.1", "type": "File"}},
            {"name": "fake-gpu", "hostPath": {"path": "/run/gshare-fakegpu", "type": "DirectoryOrCreate"}}],
    },
}
json.dump({"apiVersion": "v1", "kind": "List", "items": [tmpl, pod]}, sys.stdout, indent=1)
