#!/usr/bin/env bash
# MPS's fault domain (issue 30: "its cost is a shared fault domain:
# measure what one pod's illegal memory access does to another pod's
# processes"): a victim (a loop of GEMMs, test/gpu/mps_fault.py) runs
# while another process makes an illegal memory access; then a new process
# tries to work.  Twice: without MPS (the driver's time-slicing, each
# process its own context) and with every process a client of one MPS
# control daemon of this script's own.  No hook: what is measured is MPS.
# Last line:
#   RESULT fault_victim_ok_native=0|1 fault_victim_ok_mps=0|1 fault_new_client_ok_mps=0|1
# Env: PYTHON_GPU; MPS_CONTROL (nvidia-cuda-mps-control).  The GPU must be
# idle and no other MPS daemon may serve it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON_GPU:-python3}
F=$here/mps_fault.py
MPS=${MPS_CONTROL:-nvidia-cuda-mps-control}
work=$(mktemp -d /tmp/gshare-mpsfault.XXXXXX)
trap 'echo quit | "$MPS" >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null; tar czf "${OUT:-/tmp}/mps-fault-logs.tgz" -C "$work" --exclude mps . 2>/dev/null' EXIT

# One round: victim, attacker once the victim is warm, victim to its end;
# then a new victim of 3 s.  Prints "victim_ok new_ok".
round() {
  local tag=$1
  "$PY" "$F" victim 10 >"$work/$tag.victim" 2>"$work/$tag.victim.err" &
  local vp=$!
  for _ in $(seq 1200); do grep -q warm "$work/$tag.victim" && break; sleep 0.1; done
  "$PY" "$F" attacker >"$work/$tag.attacker" 2>"$work/$tag.attacker.err"
  echo "$tag: attacker: $(tail -n 1 "$work/$tag.attacker")" >&2
  wait "$vp"
  echo "$tag: victim: $(tail -n 1 "$work/$tag.victim")" >&2
  timeout 120 "$PY" "$F" victim 3 >"$work/$tag.new" 2>"$work/$tag.new.err"
  echo "$tag: a new process after: $(tail -n 1 "$work/$tag.new") $(tail -n 1 "$work/$tag.new.err")" >&2
  ok() { grep -q '"ok": true' "$1" && echo 1 || echo 0; }
  echo "$(ok "$work/$tag.victim") $(ok "$work/$tag.new")"
}

read -r nv _ < <(round native)
export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
"$MPS" -d || { echo "FAIL cannot start the MPS control daemon ($MPS)"; exit 1; }
read -r mv mn < <(round mps)
echo "MPS server log (last lines):"; tail -n 20 "$CUDA_MPS_LOG_DIRECTORY/server.log" 2>/dev/null
echo "RESULT fault_victim_ok_native=$nv fault_victim_ok_mps=$mv fault_new_client_ok_mps=$mn"
