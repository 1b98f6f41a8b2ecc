#!/usr/bin/env bash
# What compute QoS costs a latency-critical process alone on its GPU
# (issue 30: "with QoS configured and no contention, step time <= 1.01x
# native"; docs/compute.md "Nobody to hold"): HP of test/gpu/qos_workload.py
# (a CUDA-graph TransformerEncoder forward every 10 ms) alone, in a
# latency-critical allocation and in a standard one (hooked, no policy),
# one after the other, ROUNDS times each; with HOOK_B set (another build's
# libgshare.so, e.g. one that tracks its work even alone), latency-critical
# through that hook too in each round.  Last line:
#   RESULT qos_overhead_ratio=O [qos_overhead_ratio_b=OB]
# O: the median of the latency-critical runs' p50 over the median of the
# standard runs' (OB: the same through HOOK_B).
# Env: B, GSHARE_LIBDIR (as run.sh, for the agent and gsharectl), PYTHON_GPU, ROUNDS (3), REQUESTS
# (1000), HOOK_B.  The GPU must be idle.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-1000}
HOOK_B=${HOOK_B:-}
# The agent's libraries for the agent and gsharectl only (python's own
# stay as they are).
lib=${GSHARE_LIBDIR:+$GSHARE_LIBDIR}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-qosoh.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; tar czf "${OUT:-/tmp}/qos-overhead-logs.tgz" -C "$work" --exclude "*.sock" --exclude alloc . 2>/dev/null' EXIT
sock=$work/agent.sock
ctl() { LD_LIBRARY_PATH=$lib "$B/gsharectl" --socket "$sock" "$@"; }
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
W=$here/qos_workload.py

free=$("$PY" -c 'import torch; print(torch.cuda.mem_get_info()[0])')
# A pool of 24 GiB: 3 allocations of 8 units of 1 GiB.
reserve=$(((free - (24 << 30)) >> 20))
LD_LIBRARY_PATH=$lib "$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" --devices 0 \
  --reserve "${reserve}Mi" --unit-size 1Gi -v >>"$work/agent.log" 2>&1 &
for _ in $(seq 1200); do ctl gpus >/dev/null 2>&1 && break; sleep 0.05; done
uuid=$(ctl --json gpus | js "d['gpus'][0]['uuid']")
ids() { for u in $(seq "$1" $(($1 + 7))); do printf '%s-u%d ' "$uuid" "$u"; done; }
# shellcheck disable=SC2046
mk() { local first=$1; shift; ctl --json create "$@" $(ids "$first") | js 'd["allocation"]["socket_dir"]'; }
LCd=$(mk 0 --compute-class latency-critical)
STd=$(mk 8)
LCBd=$(mk 16 --compute-class latency-critical)
# HP in allocation $1 through hook $2, log tag $3: its p50 (ms).
hp() {
  env LD_PRELOAD="$2" GSHARE_SOCKET="$1/agent.sock" GSHARE_HOOK_DEBUG=1 PYTHONUNBUFFERED=1 \
    "$PY" "$W" hp --requests "$REQUESTS" >"$work/$3.hp" 2>"$work/$3.err"
  tail -n 1 "$work/$3.hp" | js 'd["p50_ms"]'
}
lc=() st=() lcb=()
for r in $(seq "$ROUNDS"); do
  lc+=("$(hp "$LCd" "$B/libgshare.so" "lc$r")")
  st+=("$(hp "$STd" "$B/libgshare.so" "st$r")")
  [[ -n $HOOK_B ]] && lcb+=("$(hp "$LCBd" "$HOOK_B" "lcb$r")")
  echo "round $r: p50 latency-critical ${lc[-1]} ms, standard ${st[-1]} ms${HOOK_B:+, latency-critical through HOOK_B ${lcb[-1]} ms}"
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ratio() { "$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('%.3f' % (a / b if b else 0))" "$1" "$2"; }
echo "the latency-critical hook's log: $(grep -h 'compute:' "$work"/lc1.err | head -n 3 | tr '\n' ' ')"
res="qos_overhead_ratio=$(ratio "$(med "${lc[@]}")" "$(med "${st[@]}")")"
[[ -n $HOOK_B ]] && res="$res qos_overhead_ratio_b=$(ratio "$(med "${lcb[@]}")" "$(med "${st[@]}")")"
echo "RESULT $res"
