#!/bin/bash
# dra_burst_run.sh NODE_IP [DIR] — burstable memory (docs/burst.md) through
# DRA on the one-node 1.36 cluster of ../shared/kubelet136 (./up.sh first),
# the fake driver's 8 GiB GPU in 1 GiB units.  The chart's DRA manifest with
# burstMax 4Gi; pod b1's claim asks for 1Gi with the opaque configuration
# {burst: 3Gi}; pod p1's claim for 1Gi without.  Each fills its GPU memory in
# 64 MiB blocks: b1 must get 3 GiB (2 of them borrowed), p1 its 1 GiB; the
# allocations, b1's Events and kubectl gshare are printed.  A claim asking
# for burst 8Gi (past burstMax) must stay ContainerCreating with the reason
# in its pod's events.  Not part of make test.  Needs `make image` imported
# (test/k8s/fakeimage.sh 0.1.0), root, KUBECONFIG.
set -uo pipefail
IP=$1; D=${2:-/tmp/gsburst}; ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
IMG=ghcr.io/gshare/gshare:0.1.0
ts() { date +%T.%3N; }
rm -rf $D; mkdir -p $D && cp $ROOT/$B/test/fakecuda/libcuda.so.1 $ROOT/$B/test/e2e/e2e_cuda $D/
kubectl delete pod b1 p1 b2 --ignore-not-found --wait=true >/dev/null 2>&1
kubectl delete resourceclaimtemplate b1-gpu p1-gpu b2-gpu --ignore-not-found >/dev/null 2>&1
. "$(dirname "$0")/fakedeploy.sh"
fake_deploy $ROOT $D $IP gshare-dra.yaml burstMax=4Gi
kubectl -n kube-system wait pod -l app.kubernetes.io/name=gshare --for=condition=Ready --timeout=90s >/dev/null
echo "$(ts) gshare pod Ready"
GS() { kubectl -n kube-system get pod -l app.kubernetes.io/name=gshare -o name; }
S='/opt/e2e/e2e_cuda meminfo; /opt/e2e/e2e_cuda fill 64; sleep 3600'
/usr/bin/python3 $ROOT/test/k8s/dra_workload.py b1 1Gi $D $IMG "$S" 3Gi > $D/b1.json
/usr/bin/python3 $ROOT/test/k8s/dra_workload.py p1 1Gi $D $IMG "$S" > $D/p1.json
/usr/bin/python3 $ROOT/test/k8s/dra_workload.py b2 1Gi $D $IMG "$S" 8Gi > $D/b2.json
for p in b1 p1; do kubectl apply -f $D/$p.json >/dev/null; kubectl wait pod $p --for=condition=Ready --timeout=120s >/dev/null; done
sleep 3
for p in b1 p1; do echo "-- $p:"; kubectl logs $p; done
kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock allocations
kubectl get resourceclaim -o jsonpath='{range .items[*]}{.metadata.name}: {.status.allocation.devices.config}{"\n"}{end}'
sleep 3; echo "-- b1's events:"; kubectl get events --field-selector involvedObject.name=b1 -o custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message | grep -i gpumem
echo "-- kubectl gshare pods:"; $ROOT/scripts/kubectl-gshare pods 2>&1
kubectl apply -f $D/b2.json >/dev/null; sleep 15
echo "-- b2 (burst 8Gi, past burstMax): $(kubectl get pod b2 -o jsonpath='{.status.phase}')"
kubectl get events --field-selector involvedObject.name=b2 -o custom-columns=REASON:.reason,MESSAGE:.message | grep -i burst | head -2
kubectl delete pod b1 p1 b2 --wait=false >/dev/null
