#!/bin/bash
# late_start_run.sh MODE [DIR] — issue 28 item 5 on the real 1.36 cluster of
# ../shared/kubelet136 (./up.sh first): a process that starts while the
# agent is away must work once the agent is back (wait as a connected one
# does, then register).  MODE: deviceplugin or dra.  Not part of make test.
# Needs root, `make image`, build/test/e2e/e2e_cuda and e2e_restart, helmlite
# at $HELMLITE (/tmp/helmlite/helmlite).
#
#  - the chart installed with helmlite (--set mode=MODE), the image of
#    test/k8s/fakeimage.sh 0.1.0 (this build, the fake driver for the GPU),
#    config.agentWait AGENT_WAIT (default 90s: the third gap, a 20 s
#    back-off and the agent's start, came within 0.1 s of the default 30 s
#    on the 2-core VM; a process waiting longer fails, as it should);
#  - a workload pod w1 (4 units, or a claim of 4Gi) running e2e_restart
#    (--hold 128 --churn 4): the process that was connected;
#  - KILLS times (default 3): kill -9 of the agent process (the kubelet
#    restarts its container, after a back-off that grows with each kill);
#    once its socket (/run/gshare/agent.sock) refuses connections, every
#    EXEC_EVERY_MS (default 250) a new process is exec'd into w1 (`kubectl
#    exec w1 -- e2e_cuda data 8`: allocate 8 MiB, write, read back, free,
#    exit 0), at most MAX_PER_GAP (default 16), until the socket accepts
#    connections again; then 2 more once the agent is back (the control);
#  - during the last gap a pod w2 (1 unit, or a claim of 1Gi) running
#    e2e_cuda data 8 is created;
#  - each exec'd process prints its start time (in the container, the same
#    clock): started before the socket accepted again = started in the gap.
# RESULT line: per gap its length (kill to socket accepting), the processes
# started in it, how many of them succeeded and failed; the control; w1's
# failed calls and bytes read back wrong; w2's phase.  Exit 1 unless every
# process started in a gap succeeded (and at least one did start in one),
# the control, w1 and w2 too.  Every gshare container's log is in DIR/logs,
# each exec'd process's output in DIR/exec.
set -uo pipefail
MODE=${1:?usage: late_start_run.sh deviceplugin|dra [DIR]}; D=${2:-/tmp/gsk8s/late-$MODE}
KILLS=${KILLS:-3}; EVERY_MS=${EXEC_EVERY_MS:-250}; MAXN=${MAX_PER_GAP:-16}
rm -rf $D; mkdir -p $D/logs $D/exec
. "$(dirname "$0")/k8slib.sh"
SOCK=/run/gshare/agent.sock; SW="/usr/bin/python3 $ROOT/test/k8s/sockwait.py $SOCK"
cp $ROOT/$B/test/e2e/e2e_restart $ROOT/$B/test/e2e/e2e_cuda $ROOT/$B/test/fakecuda/libcuda.so.1 $D/
$ROOT/test/k8s/fakeimage.sh 0.1.0 | tee -a $D/run.log
k8s_prepare; k8s_clean
gs_install $MODE "image.pullPolicy=Never,mode=$MODE,config.agentWait=${AGENT_WAIT:-90s}"
follow_logs & FL=$!

mkpod() { # NAME UNITS SCRIPT: the pod's objects applied
  if [[ $MODE == dra ]]; then
    FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/dra_workload.py $1 ${2}Gi $D $REPO:0.1.0 "$3" > $D/$1.json
  else
    FAKEGPU_DIR=/run/gshare/fakegpu /usr/bin/python3 $ROOT/test/k8s/workload.py $1 $2 $D $REPO:0.1.0 "$3" > $D/$1.json
  fi
  kubectl apply -f $D/$1.json | tee -a $D/run.log
}
DATA='echo "start $(date +%s%3N)"; /opt/e2e/e2e_cuda data 8; r=$?; echo "rc $r"; exit $r'
PIDS=()
launch() { # NAME: one new hooked process exec'd into w1, in the background
  timeout 240 kubectl exec w1 -- sh -c "$DATA" > $D/exec/$1.out 2> $D/exec/$1.err &
  PIDS+=($!)
}

mkpod w1 4 'exec /opt/e2e/e2e_restart --hold 128 --churn 4 --tick-ms 1000 --stop-file /tmp/stop'
kubectl wait pod w1 --for=condition=Ready --timeout=120s >/dev/null || { say "w1 not Ready"; kubectl describe pod w1 | tee -a $D/run.log; }
kubectl logs -f --timestamps w1 > $D/w1.log 2>&1 &
for _ in $(seq 100); do grep -q '"event":"ready"' $D/w1.log && break; sleep 0.2; done
say "w1 ready: $(grep -m1 '"ready"' $D/w1.log | cut -c1-160)"
$SW up 60 >/dev/null || say "the agent's socket does not accept connections"
launch before; wait ${PIDS[-1]}; say "before the kills: $(tr '\n' ' ' < $D/exec/before.out)"

for i in $(seq $KILLS); do
  p=$(newest); pid=$(agent_pid)
  [[ -n $pid ]] || { say "no agent process found"; break; }
  say "== kill $i: kill -9 $pid ($(cat /proc/$pid/comm 2>/dev/null)) of $p"
  t0=$(ms); kill -9 $pid
  d=$($SW down 10) || { say "the socket still accepts connections 10 s after the kill"; continue; }
  $SW up 300 > $D/up.$i & W=$!
  echo "$i $t0 $d" >> $D/gaps
  (( i == KILLS )) && mkpod w2 1 "$DATA"
  n=0
  while kill -0 $W 2>/dev/null && (( n < MAXN )); do
    launch g$i-$n; n=$((n + 1)); sleep $(printf '0.%03d' $EVERY_MS)
  done
  wait $W; up=$(cat $D/up.$i)
  say "kill $i: socket refused from +$((d - t0)) ms, accepted again at +$((up - t0)) ms; $n processes exec'd meanwhile"
  kubectl -n $NS wait $p --for=condition=Ready --timeout=120s >/dev/null
  launch a$i-0; launch a$i-1
  say "kill $i: waiting for the $((n + 2)) processes"
  wait "${PIDS[@]}"; PIDS=()
  sleep 5
done

for _ in $(seq 240); do [[ $(kubectl get pod w2 -o jsonpath='{.status.phase}') =~ ^(Succeeded|Failed)$ ]] && break; sleep 0.5; done
kubectl get pod w2 -o json > $D/w2.pod.json; kubectl logs w2 > $D/w2.log 2>&1
kubectl exec w1 -- sh -c 'touch /tmp/stop' 2>&1 | tee -a $D/run.log
kubectl wait pod w1 --for=jsonpath='{.status.phase}'=Succeeded --timeout=60s >/dev/null 2>&1
say "w1 $(kubectl get pod w1 -o jsonpath='{.status.phase} exit {.status.containerStatuses[0].state.terminated.exitCode}')"
sleep 2; touch $D/stop-logs; wait $FL
kubectl get events -A --sort-by=.lastTimestamp > $D/k8s-events.txt 2>&1
/usr/bin/python3 $ROOT/test/k8s/late_start_report.py $D $MODE | tee -a $D/run.log
