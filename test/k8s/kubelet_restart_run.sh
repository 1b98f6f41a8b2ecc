#!/bin/bash
# kubelet_restart_run.sh [N] [DIR] — issue 28 item 6 on the real 1.36 cluster
# of ../shared/kubelet136 (./up.sh first; $KUBELET136 if elsewhere): a
# kubelet restart must cost the device plugin one registration and the node
# no capacity.  Not part of make test.  Needs root, `make image`, helmlite at
# $HELMLITE (/tmp/helmlite/helmlite).
#
#  - the chart installed with helmlite (mode deviceplugin), the image of
#    test/k8s/fakeimage.sh 0.1.0 (this build, the fake driver for the GPU);
#  - nodewatch.py polls the node's capacity and allocatable of
#    gshare.io/gpumem every WATCH_S (default 0.2 s) throughout;
#  - N times (default 10): the kubelet alone stopped (SIGTERM) and started
#    again, as `systemctl restart kubelet` does on a node (lib.sh's stop_p
#    and start_kubelet), then watched for SETTLE_S (default 25 s: more than
#    two of the kubelet's 10 s node status updates) once it is healthy;
#  - per restart: the device plugin's "registered ... with the kubelet"
#    lines (its container log on the host, /var/log/pods: kubectl logs goes
#    through the kubelet) and the samples in which capacity or allocatable
#    was below its value before the first restart.
# RESULT line: registrations per restart, restarts with a dip, the longest
# dip and the lowest value seen.  Exit 1 unless every restart made exactly
# one registration and no sample dipped.  The plugin's and the kubelet's log
# lines of each restart are in DIR/restart.N.
set -uo pipefail
N=${1:-10}; D=${2:-/tmp/gsk8s/kubelet-restart}
SETTLE=${SETTLE_S:-25}; WATCH=${WATCH_S:-0.2}
rm -rf $D; mkdir -p $D/logs
. "$(dirname "$0")/k8slib.sh"
KDIR=${KUBELET136:-$ROOT/../shared/kubelet136}
[[ -f $KDIR/lib.sh ]] || { echo "no $KDIR/lib.sh: set KUBELET136 to the kubelet136 directory" >&2; exit 2; }
KL=/tmp/k134/logs/kubelet.log
restart_kubelet() { # in a subshell with lib.sh's variables and functions
  (cd $KDIR && . ./lib.sh && stop_p kubelet && start_kubelet) 2>&1 | tee -a $D/run.log
  [[ ${PIPESTATUS[0]} == 0 ]] || { say "the kubelet's restart failed"; exit 1; }
}
$ROOT/test/k8s/fakeimage.sh 0.1.0 | tee -a $D/run.log
k8s_prepare; k8s_clean
gs_install deviceplugin "image.pullPolicy=Never,mode=deviceplugin"
P=$(newest); UID_=$(kubectl -n $NS get $P -o jsonpath='{.metadata.uid}')
PL=$(ls -d /var/log/pods/${NS}_${P#pod/}_$UID_/device-plugin)
regs() { cat $PL/*.log 2>/dev/null | grep -c 'registered gshare.io/gpumem with the kubelet'; }
/usr/bin/python3 $ROOT/test/k8s/nodewatch.py $D/node.jsonl $WATCH & NW=$!
sleep 3
say "before: $(tail -1 $D/node.jsonl)"
for i in $(seq $N); do
  r0=$(regs); k0=$(wc -l < $KL); p0=$(cat $PL/*.log | wc -l)
  t0=$(ms); say "== restart $i"
  restart_kubelet
  wait_healthy=0
  for _ in $(seq 240); do curl -sf http://127.0.0.1:10248/healthz >/dev/null && { wait_healthy=1; break; }; sleep 0.25; done
  say "kubelet healthy: $wait_healthy after $(( $(ms) - t0 )) ms"
  sleep $SETTLE
  r=$(( $(regs) - r0 ))
  { echo "# plugin"; cat $PL/*.log | tail -n +$((p0 + 1))
    echo "# kubelet"; tail -n +$((k0 + 1)) $KL | grep -F 'gshare.io/gpumem'
  } > $D/restart.$i
  echo "$i $t0 $(ms) $r" >> $D/restarts
  say "restart $i: $r registration(s); $(grep -cE 'is gone|\(re\)created|registering again' $D/restart.$i) plugin event line(s)"
done
kill $NW; wait $NW 2>/dev/null
/usr/bin/python3 $ROOT/test/k8s/kubelet_restart_report.py $D | tee -a $D/run.log
