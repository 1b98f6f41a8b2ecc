#!/bin/bash
# handover_ab.sh N [CONTEXT_SIZE] — after upgrade_run.sh deviceplugin (the
# release installed, no workload running): a workload w3 running e2e_restart,
# then N `kubectl rollout restart ds/gshare`, each printing the handover's
# phases from the agents' logs (ROOM: old agent's make_room; gap: TAKE to
# serving; loop: new agent serving to the process's reconnect) and the
# workload's longest hooked call around it.  CONTEXT_SIZE: written into the
# ConfigMap as contextSize first (the room the old agent gives back for the
# new agent's context; with the fake driver contexts cost nothing), to see
# what the chunks given back and made again cost the reconnect.
set -uo pipefail
N=${1:-3}; CS=${2:-}; D=/tmp/gsk8s/ab; ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export KUBECONFIG=/tmp/k134/etc/admin.kubeconfig PATH=/tmp/k134/bin:$PATH
NS=kube-system; SEL=app.kubernetes.io/name=gshare
mkdir -p $D; cp $ROOT/${B:-build}/test/e2e/e2e_restart $ROOT/${B:-build}/test/fakecuda/libcuda.so.1 $D/
kubectl -n $NS get cm gshare-config -o jsonpath='{.data.config\.yaml}' | grep -v '^contextSize:' > $D/config.yaml
[[ -n $CS ]] && echo "contextSize: $CS" >> $D/config.yaml
kubectl -n $NS create cm gshare-config --from-file=config.yaml=$D/config.yaml --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl delete pod w3 --ignore-not-found --wait=true >/dev/null
S='exec /opt/e2e/e2e_restart --hold 512 --churn 8 --vmm 2 --tick-ms 500 --stop-file /tmp/stop'
FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/workload.py w3 2 $D ghcr.io/gshare/gshare:0.1.0 "$S" | kubectl apply -f - >/dev/null
kubectl wait pod w3 --for=condition=Ready --timeout=60s >/dev/null; sleep 3
ms_of() { date -d "$1" +%s%3N; }
for i in $(seq $N); do
  old=$(kubectl -n $NS get pod -l $SEL -o name)
  t0=$(date +%s%3N)
  kubectl -n $NS rollout restart ds/gshare >/dev/null
  for _ in $(seq 200); do grep -q "waiting for the end" <(kubectl -n $NS logs $old -c agent 2>/dev/null) && break; sleep 0.1; done
  ol=$(kubectl -n $NS logs $old -c agent 2>/dev/null)
  kubectl -n $NS rollout status ds/gshare >/dev/null; sleep 3
  new=$(kubectl -n $NS get pod -l $SEL -o name)
  nl=$(kubectl -n $NS logs $new -c agent)
  t() { grep -m1 "$2" <<<"$1" | awk '{print $1}'; }
  a=$(t "$ol" "making room"); b=$(t "$ol" "given back"); c=$(t "$nl" "lets its processes go"); e=$(t "$nl" "reconnected")
  mx=$(kubectl logs w3 | /usr/bin/python3 -c "
import json,sys
m=0
for l in sys.stdin:
    if l.startswith('{'):
        o=json.loads(l)
        if o['event']=='tick' and o['unix_ms']>=$t0: m=max(m,o['interval_max_hooked_ms'])
print(m)")
  echo "restart $i${CS:+ (contextSize $CS)}: ROOM $(( $(ms_of $b) - $(ms_of $a) )) ms, serving->reconnected $(( $(ms_of $e) - $(ms_of $c) )) ms, longest hooked call $mx ms; $(grep -m1 'made anew' <<<"$nl" | cut -c36-)"
done
kubectl exec w3 -- touch /tmp/stop; sleep 2
echo "w3: $(kubectl logs w3 | grep summary | /usr/bin/python3 -c "import json,sys; o=json.loads(sys.stdin.read()); print({k: o[k] for k in ('failed_calls','verify_failures','max_hooked_ms','max_hooked_call')})")"
kubectl delete pod w3 --wait=false >/dev/null
