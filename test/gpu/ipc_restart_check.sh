#!/usr/bin/env bash
# ipc_restart_check.sh — on a GPU (issue 28 item 3): a CUDA IPC handle
# exported before a kill -9 of the agent still opens in a sibling process
# of the same allocation after the new agent starts.  The exporter keeps
# the fds of the memory under its block (the real driver's memory outlives
# the agent that made it while a process holds it); the sibling imports
# them through the new agent, reads the exporter's pattern and writes; the
# exporter sees the writes.  Usage: B=build [GSHARE_LIBDIR=...] test/gpu/ipc_restart_check.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-ipcr.XXXXXX)
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail=0
start_agent() {
  "$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
    --reconcile-interval 0 --devices 0 --reserve "${RESERVE:-8Gi}" >>"$work/agent.log" 2>&1 &
  agent=$!
  for _ in $(seq 600); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "FAIL the agent did not start"; return 1
}
start_agent || exit 1
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; tail -n 20 "$work/agent.log"' EXIT
uuid=$(ctl --json gpus | py 'd["gpus"][0]["uuid"]')
a=$(ctl --json create "$uuid-u0" "$uuid-u1" | py 'd["allocation"]["socket_dir"]')
hook() { env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$a/agent.sock" GSHARE_AGENT_WAIT=30 "$@"; }
coproc EXP { hook "$B/test/e2e/e2e_cuda" ipc-export 300; }
read -r -t 120 w h <&"${EXP[0]}"
if [[ $w != handle ]]; then echo "FAIL the exporter got no handle ($w $h)"; exit 1; fi
echo "exporter: handle $h (a 300 MiB block)"
r=$(hook "$B/test/e2e/e2e_cuda" ipc-import "$h" 300 2>&1); rc=$?
echo "$r" | tail -2
if [[ $rc -eq 0 ]]; then echo "PASS before the restart: the sibling opens the handle"; else echo "FAIL before: rc $rc"; fail=1; fi
echo check >&"${EXP[1]}"; read -r -t 60 seen <&"${EXP[0]}"; echo reset >&"${EXP[1]}"; read -r -t 60 _ <&"${EXP[0]}"
n0=$(grep -c "resolve again" "$work/agent.log")
kill -9 $agent; wait $agent 2>/dev/null
t0=$(date +%s%N)
start_agent || exit 1
for _ in $(seq 300); do (( $(grep -c "resolve again" "$work/agent.log") > n0 )) && break; sleep 0.1; done
echo "the exporter's handles registered again $(( ($(date +%s%N) - t0) / 1000000 )) ms after the new agent started (its hook's thread)"
(( $(grep -c "resolve again" "$work/agent.log") > n0 )) || { echo "FAIL the new agent never logged the exporter's handles"; fail=1; }
r=$(hook "$B/test/e2e/e2e_cuda" ipc-import "$h" 300 2>&1); rc=$?
echo "$r" | tail -2
if [[ $rc -eq 0 ]]; then echo "PASS after a kill -9: the sibling opens the handle exported before, reads the pattern, writes"
else echo "FAIL after the kill -9: ipc-import rc $rc"; fail=1; fi
echo check >&"${EXP[1]}"; read -r -t 60 seen <&"${EXP[0]}"
if [[ $seen == seen-ok ]]; then echo "PASS the exporter sees the sibling's writes"; else echo "FAIL exporter: $seen"; fail=1; fi
echo exit >&"${EXP[1]}"; wait "$EXP_PID" 2>/dev/null
echo "RESULT ipc_after_restart_ok=$((1 - fail))"
exit $fail
