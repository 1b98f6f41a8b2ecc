#!/bin/bash
# monitoring_run.sh [deviceplugin|dra] [DIR] — issue 21 on the real 1.36 cluster of
# ../shared/kubelet136 (./up.sh first): the DaemonSet as shipped (Helm's own
# engine, helmlite at $HELMLITE) with config.metricsAddress and the
# dashboard's ConfigMap on, the fake driver for the GPU (fakeimage.sh), two
# workload pods holding memory; then `kubectl gshare nodes`, `kubectl gshare
# pods -A` (and -o json), and Debian's Prometheus discovering the agent by
# the pod annotations with the scrape job of docs/metrics.md, the alerts
# loaded: its targets, a few series, and every dashboard panel's query.
# Not part of make test.  Needs root, `make image`, build/test/e2e/e2e_cuda.
set -uo pipefail
MODE=${1:-deviceplugin}; D=${2:-/tmp/gsk8s/monitoring-$MODE}
ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
HL=${HELMLITE:-/tmp/helmlite/helmlite}; REPO=ghcr.io/gshare/gshare
export KUBECONFIG=/tmp/k134/etc/admin.kubeconfig PATH=/tmp/k134/bin:/tmp/k134/ctrd17/usr/bin:$PATH
CTR="ctr -a /run/containerd-k134/containerd.sock -n k8s.io"
NS=kube-system; SEL=app.kubernetes.io/name=gshare
say() { echo "$(date +%T) $*" | tee -a $D/run.log; }
rm -rf $D; mkdir -p $D
cp $ROOT/$B/test/e2e/e2e_cuda $ROOT/$B/test/fakecuda/libcuda.so.1 $D/
IP=$(cat /tmp/k134/etc/node-ip)
# No kube-proxy here: the kubernetes service's address goes to the API server.
iptables -t nat -C PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $IP:6443 2>/dev/null ||
  iptables -t nat -A PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $IP:6443
$CTR images ls -q | grep -qx "$REPO:0.1.0" || $ROOT/test/k8s/fakeimage.sh 0.1.0
kubectl label node --all nvidia.com/gpu.present=true --overwrite >/dev/null
for p in w1 w2; do kubectl delete pod $p --ignore-not-found --wait=true >/dev/null 2>&1; done
kubectl delete resourceclaimtemplate w1-gpu w2-gpu --ignore-not-found >/dev/null 2>&1
kubectl -n $NS delete ds,configmap,serviceaccount -l app.kubernetes.io/instance=gshare --ignore-not-found --wait=true >/dev/null 2>&1
kubectl delete clusterrole,clusterrolebinding,deviceclass -l app.kubernetes.io/instance=gshare --ignore-not-found >/dev/null 2>&1
kubectl -n $NS delete secret -l owner=helm,name=gshare --ignore-not-found >/dev/null 2>&1
for _ in $(seq 100); do [[ -z $(kubectl -n $NS get pod -l $SEL -o name 2>/dev/null) ]] && break; sleep 0.3; done
rm -rf /var/lib/gshare /run/gshare

SET="image.pullPolicy=Never,mode=$MODE,config.metricsAddress=0.0.0.0:9400,monitoring.dashboard.enabled=true"
say "helmlite install gshare --set $SET"
$HL install gshare $ROOT/charts/gshare $NS --set $SET 2>&1 | tee -a $D/run.log
kubectl -n $NS rollout status ds/gshare --timeout=180s | tee -a $D/run.log
for _ in $(seq 120); do
  [[ $MODE == dra ]] && { kubectl get resourceslice -o name | grep -q . && break; sleep 0.5; continue; }
  [[ $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}') =~ ^[1-9] ]] && break; sleep 0.5
done
kubectl -n $NS get configmap gshare-dashboard -o jsonpath='{.metadata.labels.grafana_dashboard}{"\n"}' |
  sed 's/^/dashboard ConfigMap label grafana_dashboard=/' | tee -a $D/run.log

for w in "w1 2 1024" "w2 1 300"; do
  set -- $w
  if [[ $MODE == dra ]]; then
    FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/dra_workload.py $1 ${2}Gi $D $REPO:0.1.0 \
      "exec /opt/e2e/e2e_cuda hold $3" > $D/$1.json
  else
    FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/workload.py $1 $2 $D $REPO:0.1.0 \
      "exec /opt/e2e/e2e_cuda hold $3" > $D/$1.json
  fi
  kubectl apply -f $D/$1.json | tee -a $D/run.log
done
kubectl wait pod w1 w2 --for=condition=Ready --timeout=120s | tee -a $D/run.log
for _ in $(seq 100); do grep -q held <(kubectl logs w1) && grep -q held <(kubectl logs w2) && break; sleep 0.3; done
sleep 12   # the reconciler (10 s) names the pods
AG=$(kubectl -n $NS get pod -l $SEL -o name | head -1)
say "gsharectl in the agent container:"
kubectl -n $NS exec $AG -c agent -- gsharectl --socket /run/gshare/agent.sock gpus 2>&1 | tee -a $D/run.log
kubectl -n $NS exec $AG -c agent -- gsharectl --socket /run/gshare/agent.sock allocations 2>&1 | tee -a $D/run.log
kubectl get node -o custom-columns='NODE:.metadata.name,CAPACITY:.status.capacity.gshare\.io/gpumem,ALLOCATABLE:.status.allocatable.gshare\.io/gpumem' | tee -a $D/run.log
say "kubectl gshare nodes"
PATH=$ROOT/scripts:$PATH kubectl gshare nodes 2>&1 | tee -a $D/run.log
say "kubectl gshare pods -A"
PATH=$ROOT/scripts:$PATH kubectl gshare pods -A 2>&1 | tee -a $D/run.log
PATH=$ROOT/scripts:$PATH kubectl gshare pods -A -o json > $D/pods.json 2>&1
PATH=$ROOT/scripts:$PATH kubectl gshare nodes -o json > $D/nodes.json 2>&1
# What kubectl gshare read, as recorded answers.
mkdir -p $D/raw
kubectl get --raw /api/v1/nodes > $D/raw/nodes.json
kubectl get --raw "/api/v1/pods" > $D/raw/pods-all.json
kubectl get --raw "/api/v1/namespaces/$NS/pods/${AG#pod/}:9400/proxy/metrics" > $D/raw/metrics.txt

# Prometheus: Debian's is built without Kubernetes service discovery
# (kubernetes_sd_configs is not a field of its config), so the pods the
# annotation job of docs/metrics.md would keep are written as file_sd
# targets, with the same rules: prometheus.io/scrape "true", the pod's IP and
# prometheus.io/port, prometheus.io/path; honor_labels as in the PodMonitor.
PP=$D/prometheus; mkdir -p $PP
cp $ROOT/charts/gshare/files/gshare-rules.yaml $PP/
kubectl get pods -A -o json | /usr/bin/python3 -c '
import json, sys
out = []
for p in json.load(sys.stdin)["items"]:
    a = p["metadata"].get("annotations", {})
    if a.get("prometheus.io/scrape") != "true" or not p["status"].get("podIP"):
        continue
    out.append({"targets": ["%s:%s" % (p["status"]["podIP"], a["prometheus.io/port"])],
                "labels": {"__metrics_path__": a.get("prometheus.io/path", "/metrics"),
                           "kubernetes_pod": p["metadata"]["name"]}})
json.dump(out, sys.stdout, indent=1)' > $PP/targets.json
cat $PP/targets.json | tee -a $D/run.log
cat > $PP/prometheus.yml <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
rule_files: [gshare-rules.yaml]
scrape_configs:
  - job_name: gshare
    honor_labels: true
    file_sd_configs: [{files: [$PP/targets.json]}]
EOF
promtool check config $PP/prometheus.yml 2>&1 | tee -a $D/run.log
prometheus --config.file=$PP/prometheus.yml --storage.tsdb.path=$PP/data --web.listen-address=127.0.0.1:19090 \
  --log.level=warn > $PP/log 2>&1 & PR=$!
sleep 20
/usr/bin/python3 $ROOT/test/k8s/prom_report.py http://127.0.0.1:19090 2>&1 | tee -a $D/run.log
kill $PR; wait $PR 2>/dev/null
say "done: $D"
