#!/usr/bin/env bash
# demo.sh — gshare on this machine in one minute: starts gshare-agent (on the
# real GPU when `nvidia-smi -L` works, else on the fake driver with a
# temporary state file), creates two allocations of different sizes, runs a
# CUDA program under the hook in each that allocates until it gets
# CUDA_ERROR_OUT_OF_MEMORY, and shows each one's limit held.  Then stops
# everything.  Run by `make demo`; B selects the build directory.
#
# Overrides: GSHARE_DEMO_FAKE=1|0, GSHARE_DEMO_CUDA_LIBRARY (the agent's
# driver), GSHARE_DEMO_UNITS="1 2" (sizes of the two allocations, in units).
set -euo pipefail
B=${B:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
bd=$root/$B
for f in gshare-agent gsharectl libgshare.so test/e2e/e2e_cuda; do
  [[ -e $bd/$f ]] || { echo "demo: $bd/$f missing: run make first" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/gshare-demo.XXXXXX)
agent_pid=""
cleanup() {
  if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid"; wait "$agent_pid" || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z ${GSHARE_DEMO_FAKE:-} ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then GSHARE_DEMO_FAKE=0; else GSHARE_DEMO_FAKE=1; fi
fi
if [[ $GSHARE_DEMO_FAKE == 1 ]]; then
  export GSHARE_FAKECUDA_STATE=$tmp/fakecuda.state GSHARE_FAKECUDA_MEM=4Gi GSHARE_FAKECUDA_DEVICES=1
  export LD_LIBRARY_PATH=$bd/test/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cudalib=${GSHARE_DEMO_CUDA_LIBRARY:-$bd/test/fakecuda/libcuda.so.1}
  sizes=(--chunk-size 64Mi --unit-size 256Mi --reserve 512Mi)
  block=16
  echo "demo: no GPU here: the fake driver with 4 GiB of 'device memory'"
else
  cudalib=${GSHARE_DEMO_CUDA_LIBRARY:-libcuda.so.1}
  sizes=(--chunk-size 256Mi --unit-size 1Gi)
  block=64
  echo "demo: on the GPU: $(nvidia-smi -L | head -1)"
fi
read -r u1 u2 <<<"${GSHARE_DEMO_UNITS:-1 2}"

sock=$tmp/agent.sock
"$bd/gshare-agent" --cuda-library "$cudalib" --socket "$sock" --socket-root "$tmp/alloc" \
  --state-dir "$tmp/state" "${sizes[@]}" 2>"$tmp/agent.log" &
agent_pid=$!
for _ in $(seq 200); do [[ -S $sock ]] && break; kill -0 $agent_pid 2>/dev/null || break; sleep 0.05; done
[[ -S $sock ]] || { echo "demo: the agent did not start:" >&2; cat "$tmp/agent.log" >&2; exit 1; }
ctl() { "$bd/gsharectl" --socket "$sock" "$@"; }

echo; echo "== the agent's GPUs"; ctl gpus
uuid=$(ctl --json gpus | sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p' | head -1)
ids1=(); ids2=()
for ((i = 0; i < u1; i++)); do ids1+=("$uuid-u$i"); done
for ((i = u1; i < u1 + u2; i++)); do ids2+=("$uuid-u$i"); done
c1=$(ctl create "${ids1[@]}"); c2=$(ctl create "${ids2[@]}")
a1=$(awk 'NR==1{print $1}' <<<"$c1"); a2=$(awk 'NR==1{print $1}' <<<"$c2")
declare -A sockof=([$a1]=$(sed -n 's/^socket //p' <<<"$c1") [$a2]=$(sed -n 's/^socket //p' <<<"$c2"))
echo; echo "== two allocations: $a1 ($u1 units) and $a2 ($u2 units)"; ctl allocations

asan_pre=""
if [[ ${SANITIZE:-} == asan ]]; then asan_pre="$(gcc -print-file-name=libasan.so):"; export ASAN_OPTIONS=detect_leaks=0; fi
for a in "$a1" "$a2"; do
  echo; echo "== allocation $a: a CUDA program allocates ${block} MiB blocks until the driver says no"
  LD_PRELOAD="$asan_pre$bd/libgshare.so" GSHARE_SOCKET="${sockof[$a]}" \
    "$bd/test/e2e/e2e_cuda" fill "$block"
done
echo; echo "== a program without the hook: the pool is the agent's, only the reserve is left"
"$bd/test/e2e/e2e_cuda" bypass 1024 || true
echo; echo "== agent log"; cat "$tmp/agent.log"
