#!/bin/bash
# dp_reregister_race.sh [N] — after upgrade_run.sh deviceplugin (the release
# installed): up to N `kubectl rollout restart ds/gshare`, each followed by
# 12 s (more than the kubelet's node status period); stops at the first one
# after which the node's allocatable gshare.io/gpumem is 0, then watches it
# for 60 s more.  What it looks for: the 1.36 kubelet's device-plugin
# handler, when the OLD plugin's ListAndWatch ends after the new plugin
# registered under the same resource name, disconnects the NEW client
# (pkg/kubelet/cm/devicemanager/plugin/v1beta1/handler.go runClient:
# c = s.getClient(name); s.disconnectClient(name, c)) and marks all units
# unhealthy; the new plugin does not notice and does not register again.
# The kubelet's log lines of each restart are printed.
set -uo pipefail
N=${1:-15}; NS=kube-system
export KUBECONFIG=/tmp/k134/etc/admin.kubeconfig PATH=/tmp/k134/bin:$PATH
KL=/tmp/k134/logs/kubelet.log
alloc() { kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}'; }
for i in $(seq $N); do
  l0=$(wc -l < $KL)
  kubectl -n $NS rollout restart ds/gshare >/dev/null; kubectl -n $NS rollout status ds/gshare >/dev/null
  sleep 12
  a=$(alloc)
  echo "restart $i: allocatable $a"
  tail -n +$l0 $KL | grep -E '"(Registered|Deregistered) client"|client connection is closing|Mark all|healthyCount' |
    awk '{printf "    %s %s\n", $2, substr($0, index($0, "\""), 110)}'
  if [[ $a == 0 ]]; then
    for t in 20 40 60; do sleep 20; echo "  +${t}s: allocatable $(alloc), capacity $(kubectl get node -o jsonpath='{.items[0].status.capacity.gshare\.io/gpumem}')"; done
    P=$(kubectl -n $NS get pod -l app.kubernetes.io/name=gshare -o name)
    echo "  the serving plugin's log:"; kubectl -n $NS logs $P -c device-plugin | sed 's/^/    /'
    exit 1
  fi
done
echo "no restart of $N left the units unhealthy"
