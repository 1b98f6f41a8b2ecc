#!/bin/bash
# dp_burst_run.sh NODE_IP [DIR] — burstable memory (docs/burst.md) for
# device-plugin pods on the one-node 1.36 cluster of ../shared/kubelet136
# (./up.sh first), the fake driver's 8 GiB GPU in 1 GiB units: the chart's
# device-plugin manifest with burstMax 3Gi; pod a1 asks for 1 unit with the
# annotation gshare.io/gpumem-burst: 3Gi, pod a2 for 1 unit without, pod a3
# for 1 unit with 6Gi (past burstMax).  Each waits until the agent has seen
# it (reconcileInterval), prints cuMemGetInfo and fills its GPU memory in
# 64 MiB blocks: a1 must get 3 GiB, a2 and a3 1 GiB, and the agent's log
# says why a3's was refused.  Not part of make test.  Needs `make image`
# imported (test/k8s/fakeimage.sh 0.1.0), root, KUBECONFIG.
set -uo pipefail
IP=$1; D=${2:-/tmp/gsdpburst}; ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
IMG=ghcr.io/gshare/gshare:0.1.0
ts() { date +%T.%3N; }
rm -rf $D; mkdir -p $D && cp $ROOT/$B/test/fakecuda/libcuda.so.1 $ROOT/$B/test/e2e/e2e_cuda $D/
kubectl delete pod a1 a2 a3 --ignore-not-found --wait=true >/dev/null 2>&1
. "$(dirname "$0")/fakedeploy.sh"
fake_deploy $ROOT $D $IP gshare.yaml burstMax=3Gi reconcileInterval=2s
echo "$(ts) gshare ready, allocatable $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}')"
GS() { kubectl -n kube-system get pod -l app.kubernetes.io/name=gshare -o name; }
# Give the reconciler (every 2 s) time to see the pod before filling.
S='sleep 6; /opt/e2e/e2e_cuda meminfo; /opt/e2e/e2e_cuda fill 64; sleep 3600'
for p in a1:3Gi a2: a3:6Gi; do
  n=${p%%:*}; b=${p#*:}
  /usr/bin/python3 $ROOT/test/k8s/workload.py $n 1 $D $IMG "$S" | /usr/bin/python3 -c '
import json, sys
pod = json.load(sys.stdin)
if sys.argv[1]:
    pod["metadata"]["annotations"] = {"gshare.io/gpumem-burst": sys.argv[1]}
json.dump(pod, sys.stdout)' "$b" > $D/$n.json
  kubectl apply -f $D/$n.json >/dev/null
done
for n in a1 a2 a3; do kubectl wait pod $n --for=condition=Ready --timeout=120s >/dev/null; done
sleep 10
for n in a1 a2 a3; do echo "-- $n (burst annotation: $(kubectl get pod $n -o jsonpath='{.metadata.annotations.gshare\.io/gpumem-burst}')):"; kubectl logs $n; done
kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock allocations
echo "-- the agent's log:"; kubectl -n kube-system logs $(GS) -c agent | grep -E "burst|annotation" | sed 's/^/    /'
kubectl delete pod a1 a2 a3 --wait=false >/dev/null
