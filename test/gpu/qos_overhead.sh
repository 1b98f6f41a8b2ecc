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
# The agent, its allocations and the measures are qos_lib.sh's.
# Env: B, GSHARE_LIBDIR (as run.sh), PYTHON_GPU, ROUNDS (3), REQUESTS
# (1000), HOOK_B.  The GPU must be idle.
set -u
QOS_WORK=qos-overhead
# shellcheck source=qos_lib.sh
source "$(cd "$(dirname "$0")" && pwd)/qos_lib.sh"
ROUNDS=${ROUNDS:-3}
REQUESTS=${REQUESTS:-1000}
HOOK_B=${HOOK_B:-}
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
echo "the latency-critical hook's log: $(grep -h 'compute:' "$work"/lc1.err | head -n 3 | tr '\n' ' ')"
res="qos_overhead_ratio=$(ratio "$(med "${lc[@]}")" "$(med "${st[@]}")")"
[[ -n $HOOK_B ]] && res="$res qos_overhead_ratio_b=$(ratio "$(med "${lcb[@]}")" "$(med "${st[@]}")")"
echo "RESULT $res"
