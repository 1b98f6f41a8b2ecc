#!/bin/bash
# qos_run.sh NODE_IP [DIR] — compute classes and weights (docs/compute.md)
# set as a user sets them, on the one-node 1.36 cluster of
# ../shared/kubelet136 (./up.sh first), device-plugin mode, the fake
# driver's 8 GiB GPU: a PriorityClass of value 1000000 (the agent's
# computeLatencyPriority) and pods
#   q1  priorityClassName gshare-latency: latency-critical
#   q2  annotations compute-class best-effort, compute-weight 30
#   q3  no priority; annotation compute-class latency-critical (cannot
#       raise itself) and its own environment claiming the class
#       (GSHARE_COMPUTE_CLASS, GSHARE_QOS_CLASS, GSHARE_QOS_SLOT): standard
# Each holds 64 MiB with the hook's debug on, so its log shows the policy
# its hook got from the agent ("compute: class N, cap C, weight W, slot S";
# class 1 latency-critical, 0 standard, 2 best-effort).  Prints each pod's
# line, gsharectl allocations (COMPUTE) and the agent's log lines about the
# pods' policies.  Not part of make test.  Needs `make image` imported
# (test/k8s/fakeimage.sh 0.1.0), root, KUBECONFIG.
set -uo pipefail
IP=$1; D=${2:-/tmp/gsqos}; ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
IMG=ghcr.io/gshare/gshare:0.1.0
ts() { date +%T.%3N; }
rm -rf $D; mkdir -p $D && cp $ROOT/$B/test/fakecuda/libcuda.so.1 $ROOT/$B/test/e2e/e2e_cuda $D/
kubectl delete pod q1 q2 q3 --ignore-not-found --wait=true >/dev/null 2>&1
. "$(dirname "$0")/fakedeploy.sh"
fake_deploy $ROOT $D $IP gshare.yaml reconcileInterval=2s
echo "$(ts) gshare ready, allocatable $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}')"
kubectl apply -f - >/dev/null <<'YAML'
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: gshare-latency}
value: 1000000
description: latency-critical GPU work (gshare's computeLatencyPriority)
YAML
GS() { kubectl -n kube-system get pod -l app.kubernetes.io/name=gshare -o name; }
# The reconciler (every 2 s) sees the pod before its process starts.
S='sleep 6; GSHARE_HOOK_DEBUG=1 /opt/e2e/e2e_cuda hold 64 2>&1'
for n in q1 q2 q3; do
  /usr/bin/python3 $ROOT/test/k8s/workload.py $n 1 $D $IMG "$S" | /usr/bin/python3 -c '
import json, sys
pod, n = json.load(sys.stdin), sys.argv[1]
c = pod["spec"]["containers"][0]
if n == "q1":
    pod["spec"]["priorityClassName"] = "gshare-latency"
elif n == "q2":
    pod["metadata"]["annotations"] = {"gshare.io/compute-class": "best-effort", "gshare.io/compute-weight": "30"}
else:
    pod["metadata"]["annotations"] = {"gshare.io/compute-class": "latency-critical"}
    c["env"] += [{"name": k, "value": v} for k, v in (("GSHARE_COMPUTE_CLASS", "latency-critical"),
                 ("GSHARE_QOS_CLASS", "1"), ("GSHARE_QOS_SLOT", "0"))]
json.dump(pod, sys.stdout)' "$n" > $D/$n.json
  kubectl apply -f $D/$n.json >/dev/null
done
for n in q1 q2 q3; do kubectl wait pod $n --for=condition=Ready --timeout=120s >/dev/null; done
for n in q1 q2 q3; do
  for _ in $(seq 100); do kubectl logs $n 2>/dev/null | grep -q "compute: class" && break; sleep 0.2; done
  echo "-- $n (priority $(kubectl get pod $n -o jsonpath='{.spec.priority}'), $(kubectl get pod $n -o json | /usr/bin/python3 -c '
import json, sys
a = json.load(sys.stdin)["metadata"].get("annotations", {})
print("annotations %s" % {k: v for k, v in a.items() if k.startswith("gshare.io/")})')):"
  kubectl logs $n | grep -E "compute: class|registered" | sed 's/^/    /'
done
kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock allocations
echo "-- the agent's log:"; kubectl -n kube-system logs $(GS) -c agent | grep -E "compute|annotation" | sed 's/^/    /'
kubectl delete pod q1 q2 q3 --wait=false >/dev/null
