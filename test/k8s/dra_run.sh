#!/bin/bash
# dra_run.sh — the DRA run of docs/install.md ("Checked on real kubelets",
# mode dra) on the one-node 1.36 cluster of the development setup
# (../shared/kubelet136: ./up.sh first), with the fake driver for the GPU.
# Not part of make test.  Needs `make image` imported into the cluster's
# containerd, root, KUBECONFIG.  Usage: test/k8s/dra_run.sh NODE_IP [DIR]
set -uo pipefail
IP=$1; D=${2:-/tmp/gsdra}; ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
IMG=ghcr.io/gshare/gshare:0.1.0; KS=/work/shared/kubelet136
ts() { date +%T.%3N; }
mkdir -p $D && cp $ROOT/$B/test/fakecuda/libcuda.so.1 $ROOT/$B/test/e2e/e2e_cuda $D/
/usr/bin/python3 $ROOT/test/k8s/fakegpu.py $ROOT/manifests/gshare-dra.yaml $D 8Gi > $D/gs.yaml
# This cluster has no kube-proxy: the service address is unreachable, so the
# config names the API server directly.
/usr/bin/python3 - "$D/gs.yaml" "$IP" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "ConfigMap":
        d["data"]["config.yaml"] += "apiServer: https://%s:6443\n" % sys.argv[2]
yaml.safe_dump_all(docs, open(sys.argv[1], "w"))
PY
kubectl label node --all nvidia.com/gpu.present=true --overwrite >/dev/null
echo "$(ts) apply"; kubectl apply -f $D/gs.yaml >/dev/null
kubectl -n kube-system wait pod -l app.kubernetes.io/name=gshare --for=condition=Ready --timeout=60s >/dev/null
echo "$(ts) gshare pod Ready"
for _ in $(seq 50); do kubectl get resourceslice -o name | grep -q gpumem && break; sleep 0.2; done
kubectl get resourceslice -o yaml | sed -n '/^  spec:/,/^kind/p'
GS() { kubectl -n kube-system get pod -l app.kubernetes.io/name=gshare -o name; }
S='/opt/e2e/e2e_cuda meminfo; /opt/e2e/e2e_cuda fill 64; env | grep ^GSHARE_MEM; sleep 3600'
mk() { /usr/bin/python3 $ROOT/test/k8s/dra_workload.py $1 $2 $D $IMG "$S" > $D/$1.json; }
# pod creation -> Running, by polling every 0.1 s
running() { local t0=$(date +%s.%N); kubectl apply -f $D/$1.json >/dev/null
  for _ in $(seq 600); do [[ $(kubectl get pod $1 -o jsonpath='{.status.phase}') == Running ]] && break; sleep 0.1; done
  echo "$(ts) $1 $(kubectl get pod $1 -o jsonpath='{.status.phase}') $(echo "$(date +%s.%N) - $t0" | bc) s after its creation"; }
mk w1 2Gi; mk w2 3Gi; mk w3 3Gi; mk w4 1Gi
running w1; running w2
sleep 2; for p in w1 w2; do echo "-- $p:"; kubectl logs $p; done
echo "$(ts) w3 (3Gi; 7Gi - 2Gi - 3Gi left 2Gi)"; kubectl apply -f $D/w3.json >/dev/null; sleep 8
echo "w3: $(kubectl get pod w3 -o jsonpath='{.status.phase}: {.status.conditions[0].message}')"
t0=$(date +%s.%N); echo "$(ts) delete w1"; kubectl delete pod w1 --wait=false >/dev/null
for _ in $(seq 600); do [[ $(kubectl get pod w3 -o jsonpath='{.status.phase}') == Running ]] && break; sleep 0.1; done
echo "$(ts) w3 $(kubectl get pod w3 -o jsonpath='{.status.phase}') $(echo "$(date +%s.%N) - $t0" | bc) s after w1's delete"; sleep 2; kubectl logs w3
ids() { kubectl get pod w2 w3 -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.containerStatuses[0].containerID} restarts {.status.containerStatuses[0].restartCount}{"\n"}{end}'; }
echo "-- before the kubelet restart:"; ids
( cd $KS && . ./lib.sh && stop_p kubelet && start_kubelet ) >/dev/null 2>&1; echo "$(ts) kubelet restarted"; sleep 20
echo "-- after:"; ids; for p in w2 w3; do echo "$p: $(kubectl exec $p -- /opt/e2e/e2e_cuda fill 64)"; done
AG=$(kubectl -n kube-system get $(GS) -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].containerID}')
echo "$(ts) agent restart: SIGTERM to its container ${AG#containerd://}"
ctr --address /run/containerd-k134/containerd.sock -n k8s.io task kill -s SIGTERM ${AG#containerd://}
for _ in $(seq 300); do [[ $(kubectl -n kube-system get $(GS) -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].restartCount}') -ge 1 ]] &&
  kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock gpus >/dev/null 2>&1 && break; sleep 0.2; done
echo "$(ts) agent back"; kubectl -n kube-system logs $(GS) -c agent | grep -E "restored|claims"
echo "-- after:"; ids; for p in w2 w3; do echo "$p: $(kubectl exec $p -- /opt/e2e/e2e_cuda fill 64)"; done
running w4; sleep 2; kubectl logs w4
kubectl -n kube-system exec $(GS) -c agent -- gsharectl --socket /run/gshare/agent.sock allocations
echo "-- the DRA plugin's log:"; kubectl -n kube-system logs $(GS) -c dra-plugin
