#!/bin/bash
# dra_qos_run.sh NODE_IP [DIR] — compute classes, caps and weights set
# through DRA (docs/compute.md, docs/dra.md) on the one-node 1.36 cluster of
# ../shared/kubelet136 (./up.sh first), the fake driver's 8 GiB GPU:
#   d1  a claim of memory 1Gi and compute 30, its opaque configuration
#       {computeClass: best-effort, computeWeight: "20"}: best-effort, cap 30,
#       weight 20
#   d2  a claim of the DeviceClass latency.gpumem.gshare.io, which an
#       administrator made with {computeClass: latency-critical} (FromClass):
#       latency-critical
#   d3  a claim asking for latency-critical itself: its preparation fails,
#       saying so (the pod's events)
#   d4  a claim with no configuration, its container's environment claiming
#       the class: standard
# Each holds 64 MiB with the hook's debug on, so its log shows the policy
# its hook got.  Not part of make test.  Needs `make image` imported, root,
# KUBECONFIG.
set -uo pipefail
IP=$1; D=${2:-/tmp/gsdraqos}; ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
IMG=ghcr.io/gshare/gshare:0.1.0
ts() { date +%T.%3N; }
rm -rf $D; mkdir -p $D && cp $ROOT/$B/test/fakecuda/libcuda.so.1 $ROOT/$B/test/e2e/e2e_cuda $D/
kubectl delete pod d1 d2 d3 d4 --ignore-not-found --wait=true >/dev/null 2>&1
kubectl delete resourceclaimtemplate d1-gpu d2-gpu d3-gpu d4-gpu --ignore-not-found >/dev/null 2>&1
. "$(dirname "$0")/fakedeploy.sh"
fake_deploy $ROOT $D $IP gshare-dra.yaml
echo "$(ts) gshare ready: $(kubectl get resourceslice -o jsonpath='{.items[0].spec.devices[0].capacity}')"
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: latency.gpumem.gshare.io}
spec:
  selectors:
    - cel: {expression: device.driver == "gpumem.gshare.io"}
  config:
    - opaque: {driver: gpumem.gshare.io, parameters: {computeClass: latency-critical}}
YAML
GS() { kubectl -n kube-system get pod -l app.kubernetes.io/name=gshare -o name; }
S='GSHARE_HOOK_DEBUG=1 /opt/e2e/e2e_cuda hold 64 2>&1'
for n in d1 d2 d3 d4; do
  /usr/bin/python3 $ROOT/test/k8s/dra_workload.py $n 1Gi $D $IMG "$S" | /usr/bin/python3 -c '
import json, sys
objs, n = json.load(sys.stdin), sys.argv[1]
tmpl, pod = objs["items"]
req = tmpl["spec"]["spec"]["devices"]["requests"][0]["exactly"]
cfg = None
if n == "d1":
    req["capacity"]["requests"]["compute"] = "30"
    cfg = {"computeClass": "best-effort", "computeWeight": "20"}
elif n == "d2":
    req["deviceClassName"] = "latency.gpumem.gshare.io"
elif n == "d3":
    cfg = {"computeClass": "latency-critical"}
else:
    pod["spec"]["containers"][0]["env"] += [{"name": "GSHARE_COMPUTE_CLASS", "value": "latency-critical"},
                                            {"name": "GSHARE_QOS_CLASS", "value": "1"}]
if cfg:
    tmpl["spec"]["spec"]["devices"]["config"] = [
        {"requests": ["gpu"], "opaque": {"driver": "gpumem.gshare.io", "parameters": cfg}}]
json.dump(objs, sys.stdout)' "$n" > $D/$n.json
  kubectl apply -f $D/$n.json >/dev/null
done
for n in d1 d2 d4; do kubectl wait pod $n --for=condition=Ready --timeout=120s >/dev/null; done
for n in d1 d2 d4; do
  for _ in $(seq 100); do kubectl logs $n 2>/dev/null | grep -q "compute: class" && break; sleep 0.2; done
  echo "-- $n: $(kubectl get resourceclaim -o json | /usr/bin/python3 -c '
import json, sys
for c in json.load(sys.stdin)["items"]:
    if c["metadata"]["name"].startswith(sys.argv[1] + "-"):
        r = c["status"]["allocation"]["devices"]["results"][0]
        print("device", r["device"], "consumed", r.get("consumedCapacity"))' "$n")"
  kubectl logs $n | grep -E "compute: class" | sed 's/^/    /'
done
for _ in $(seq 100); do kubectl get events --field-selector involvedObject.name=d3 -o jsonpath='{.items[*].message}' | grep -q latency && break; sleep 0.3; done
echo "-- d3 ($(kubectl get pod d3 -o jsonpath='{.status.phase}')): $(kubectl get events --field-selector involvedObject.name=d3 -o jsonpath='{.items[*].message}' | grep -o '[^.]*latency-critical[^.]*' | head -1)"
kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock allocations
kubectl delete pod d1 d2 d3 d4 --wait=false >/dev/null
