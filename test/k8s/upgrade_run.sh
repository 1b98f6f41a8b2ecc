#!/bin/bash
# upgrade_run.sh MODE [DIR] — issue 18 on the real 1.36 cluster of
# ../shared/kubelet136 (./up.sh first), installed with Helm's own engine
# (../shared/helm: helmlite), the fake driver for the GPU.  MODE: deviceplugin
# or dra.  Not part of make test.  Needs root, `make image`,
# build/test/e2e/e2e_restart, helmlite at $HELMLITE (/tmp/helmlite/helmlite).
#
#  - images 0.1.0, 0.1.1, 0.1.2 from test/k8s/fakeimage.sh (the same build,
#    1 and 2 with other bytes in the hook and the agent);
#  - `helmlite install gshare charts/gshare --set mode=MODE` (0.1.0);
#    INSTALL_CHART=DIR installs from another chart (an earlier release's,
#    with its image imported as 0.1.0 beforehand: an upgrade from it);
#  - a workload pod w1 (2 units, or a claim of 2Gi) running e2e_restart
#    (--hold 512 --churn 8 --vmm 2): allocating, freeing, writing, verifying;
#  - while it runs, each followed by `rollout status` and a pause:
#      helm-upgrade   helmlite upgrade --set image.tag=0.1.1
#      rollout-restart kubectl rollout restart ds/gshare
#      set-image      kubectl set image ds/gshare *=...:0.1.2
#      kill-9         kill -9 of the agent process (its container restarts)
#  - nodewatch.py polls the node (capacity and allocatable of
#    gshare.io/gpumem) and the ResourceSlices every 0.5 s throughout;
#  - the figures per event (upgrade_report.py): the workload's failed calls,
#    verify failures and longest hooked call, and any capacity dip.
# Every gshare container's log is kept under DIR/logs.
set -uo pipefail
MODE=${1:?usage: upgrade_run.sh deviceplugin|dra [DIR]}; D=${2:-/tmp/gsk8s/$MODE}
ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
HL=${HELMLITE:-/tmp/helmlite/helmlite}; REPO=ghcr.io/gshare/gshare
export KUBECONFIG=/tmp/k134/etc/admin.kubeconfig PATH=/tmp/k134/bin:/tmp/k134/ctrd17/usr/bin:$PATH
CTR="ctr -a /run/containerd-k134/containerd.sock -n k8s.io"
NS=kube-system; SEL=app.kubernetes.io/name=gshare
ts() { date +%T.%3N; }
ms() { date +%s%3N; }
say() { echo "$(ts) $*" | tee -a $D/run.log; }
rm -rf $D; mkdir -p $D/logs
cp $ROOT/$B/test/e2e/e2e_restart $ROOT/$B/test/fakecuda/libcuda.so.1 $D/
IP=$(cat /tmp/k134/etc/node-ip)
# No kube-proxy on this cluster: the kubernetes service's address (what the
# agent and the DRA plugin use in a cluster) is sent to the API server as
# kube-proxy would.
iptables -t nat -C PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $IP:6443 2>/dev/null ||
  iptables -t nat -A PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $IP:6443
# This build's images, made afresh every run (an image an earlier run left
# would test old binaries); with INSTALL_CHART, 0.1.0 is the earlier
# release's, imported beforehand.
for v in 0.1.0 0.1.1 0.1.2; do
  if [[ $v == 0.1.0 && -n ${INSTALL_CHART:-} ]]; then
    $CTR images ls -q | grep -qx "$REPO:$v" || { echo "INSTALL_CHART: import its image as $REPO:$v first" >&2; exit 1; }
    continue
  fi
  $ROOT/test/k8s/fakeimage.sh $v
done
kubectl label node --all nvidia.com/gpu.present=true --overwrite >/dev/null
PLUGIN=device-plugin; [[ $MODE == dra ]] && PLUGIN=dra-plugin
# A previous run's release (helmlite has no uninstall), workload and state:
# gone before this one starts, so that each mode starts on a fresh node.
kubectl delete pod w1 --ignore-not-found --wait=true >/dev/null 2>&1
kubectl delete resourceclaimtemplate w1-gpu --ignore-not-found >/dev/null 2>&1
kubectl -n $NS delete ds,configmap,serviceaccount -l app.kubernetes.io/instance=gshare --ignore-not-found --wait=true >/dev/null 2>&1
kubectl delete clusterrole,clusterrolebinding,deviceclass -l app.kubernetes.io/instance=gshare --ignore-not-found >/dev/null 2>&1
kubectl -n $NS delete secret -l owner=helm,name=gshare --ignore-not-found >/dev/null 2>&1
for _ in $(seq 100); do [[ -z $(kubectl -n $NS get pod -l $SEL -o name 2>/dev/null) ]] && break; sleep 0.3; done
rm -rf /var/lib/gshare /run/gshare
SET="image.pullPolicy=Never,mode=$MODE"

# -- the gshare containers' logs, every container instance of every pod
follow_logs() {
  declare -A seen
  while [[ ! -e $D/stop-logs ]]; do
    while read -r pod cs; do
      for c in ${cs//,/ }; do   # name:restarts:running
        IFS=: read -r name rc run <<<"$c"
        [[ $run == true ]] || continue
        k=$pod.$name.$rc; [[ -n ${seen[$k]:-} ]] && continue; seen[$k]=1
        kubectl -n $NS logs -f --timestamps $pod -c $name > $D/logs/$k.log 2>&1 &
      done
    done < <(kubectl -n $NS get pod -l $SEL -o go-template='{{range .items}}{{.metadata.name}} {{range .status.containerStatuses}}{{.name}}:{{.restartCount}}:{{if .state.running}}true{{else}}false{{end}},{{end}}{{"\n"}}{{end}}' 2>/dev/null)
    sleep 1
  done
}
gspods() { kubectl -n $NS get pod -l $SEL -o wide --no-headers 2>/dev/null | awk '{print $1, $2, $3, $4}' | tr '\n' ';'; }
newest() { kubectl -n $NS get pod -l $SEL --sort-by=.metadata.creationTimestamp -o name | tail -1; }
snapshot() { # what the agent and the node say
  local p; p=$(newest)
  say "pods: $(gspods)"
  kubectl -n $NS exec $p -c agent -- gsharectl --socket /run/gshare/agent.sock gpus 2>&1 | sed 's/^/    /' | tee -a $D/run.log
  kubectl -n $NS exec $p -c agent -- gsharectl --socket /run/gshare/agent.sock allocations 2>&1 | sed 's/^/    /' | tee -a $D/run.log
  kubectl get node -o jsonpath='    node capacity {.items[0].status.capacity.gshare\.io/gpumem} allocatable {.items[0].status.allocatable.gshare\.io/gpumem}{"\n"}' | tee -a $D/run.log
}

say "helmlite install gshare ($MODE, $REPO:0.1.0)"
$HL install gshare ${INSTALL_CHART:-$ROOT/charts/gshare} $NS --set $SET 2>&1 | tee -a $D/run.log
follow_logs & FL=$!
kubectl -n $NS rollout status ds/gshare --timeout=180s | tee -a $D/run.log
say "gshare pod Ready"
if [[ $MODE == deviceplugin ]]; then  # the plugin's units in the node's status (its next update)
  for _ in $(seq 120); do
    [[ $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}') =~ ^[1-9] ]] && break; sleep 0.5
  done
fi
/usr/bin/python3 $ROOT/test/k8s/nodewatch.py $D/node.jsonl 0.5 & NW=$!

# -- the workload
S='exec /opt/e2e/e2e_restart --hold 512 --churn 8 --vmm 2 --tick-ms 500 --stop-file /tmp/stop'
if [[ $MODE == dra ]]; then
  FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/dra_workload.py w1 2Gi $D $REPO:0.1.0 "$S" > $D/w1.json
else
  FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/workload.py w1 2 $D $REPO:0.1.0 "$S" > $D/w1.json
fi
kubectl apply -f $D/w1.json | tee -a $D/run.log
kubectl wait pod w1 --for=condition=Ready --timeout=120s >/dev/null || { say "w1 not Ready"; kubectl describe pod w1 | tee -a $D/run.log; }
kubectl logs -f --timestamps w1 > $D/w1.log 2>&1 &
for _ in $(seq 100); do grep -q '"event":"ready"' $D/w1.log && break; sleep 0.2; done
say "w1 ready: $(grep -m1 '"ready"' $D/w1.log | cut -c1-200)"
sleep 10; snapshot
echo "baseline $(ms)" > $D/events

event() { # NAME CMD...
  local n=$1; shift
  say "== $n: $*"; local t0; t0=$(ms)
  "$@" 2>&1 | tee -a $D/run.log
  kubectl -n $NS rollout status ds/gshare --timeout=240s 2>&1 | tail -1 | tee -a $D/run.log
  say "$n done in $(( $(ms) - t0 )) ms"
  sleep 10
  echo "$n $t0 $(ms)" >> $D/events
  snapshot
}
kill_agent() {
  local p cid pid rc0
  p=$(newest)
  cid=$(kubectl -n $NS get $p -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].containerID}'); cid=${cid#containerd://}
  rc0=$(kubectl -n $NS get $p -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].restartCount}')
  pid=$($CTR task ls | awk -v c=$cid '$1==c {print $2}')
  say "kill -9 $pid ($(cat /proc/$pid/comm 2>/dev/null)), agent container ${cid:0:12} of $p"
  kill -9 $pid
  for _ in $(seq 600); do
    [[ $(kubectl -n $NS get $p -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].restartCount}') -gt $rc0 &&
       $(kubectl -n $NS get $p -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].ready}') == true ]] && break
    sleep 0.2
  done
  say "agent container restarted and Ready"
}
EVENTS=${EVENTS:-helm-upgrade rollout-restart set-image kill-9}
for e in $EVENTS; do
  case $e in
    helm-upgrade) event helm-upgrade $HL upgrade gshare $ROOT/charts/gshare $NS --set $SET,image.tag=0.1.1 ;;
    rollout-restart) event rollout-restart kubectl -n $NS rollout restart ds/gshare ;;
    set-image) event set-image kubectl -n $NS set image ds/gshare install-hook=$REPO:0.1.2 agent=$REPO:0.1.2 $PLUGIN=$REPO:0.1.2 ;;
    kill-9) event kill-9 kill_agent ;;
  esac
done

# -- the end: the workload stops, checks every block once more, prints its summary
kubectl exec w1 -- sh -c 'touch /tmp/stop' 2>&1 | tee -a $D/run.log
kubectl wait pod w1 --for=jsonpath='{.status.phase}'=Succeeded --timeout=60s >/dev/null 2>&1
say "w1 $(kubectl get pod w1 -o jsonpath='{.status.phase} exit {.status.containerStatuses[0].state.terminated.exitCode} restarts {.status.containerStatuses[0].restartCount}')"
sleep 2; kill $NW; touch $D/stop-logs; wait $FL
kubectl get events -A --sort-by=.lastTimestamp > $D/k8s-events.txt 2>&1
/usr/bin/python3 $ROOT/test/k8s/upgrade_report.py $D $MODE | tee -a $D/run.log
