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
rm -rf $D; mkdir -p $D/logs
. "$(dirname "$0")/k8slib.sh"
cp $ROOT/$B/test/e2e/e2e_restart $ROOT/$B/test/fakecuda/libcuda.so.1 $D/
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
k8s_prepare
PLUGIN=device-plugin; [[ $MODE == dra ]] && PLUGIN=dra-plugin
k8s_clean   # each mode starts on a fresh node
SET="image.pullPolicy=Never,mode=$MODE"

gspods() { kubectl -n $NS get pod -l $SEL -o wide --no-headers 2>/dev/null | awk '{print $1, $2, $3, $4}' | tr '\n' ';'; }
snapshot() { # what the agent and the node say
  local p; p=$(newest)
  say "pods: $(gspods)"
  kubectl -n $NS exec $p -c agent -- gsharectl --socket /run/gshare/agent.sock gpus 2>&1 | sed 's/^/    /' | tee -a $D/run.log
  kubectl -n $NS exec $p -c agent -- gsharectl --socket /run/gshare/agent.sock allocations 2>&1 | sed 's/^/    /' | tee -a $D/run.log
  kubectl get node -o jsonpath='    node capacity {.items[0].status.capacity.gshare\.io/gpumem} allocatable {.items[0].status.allocatable.gshare\.io/gpumem}{"\n"}' | tee -a $D/run.log
}

gs_install $MODE "$SET"
follow_logs & FL=$!
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
