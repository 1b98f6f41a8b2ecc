#!/usr/bin/env bash
# The framework suite on a real GPU (issue: unmodified PyTorch, JAX and CuPy
# under gshare). Starts the agent on GPU 0 with the real driver, creates two
# allocations through the control socket (the path the device plugin uses),
# runs each framework script in a "container" = its allocation's socket plus
# the hook in LD_PRELOAD, and checks that every chunk is back at the end.
#
#   test/gpu/run.sh            # suite
#   GSHARE_GPU_BENCH=1 test/gpu/run.sh   # also the training-step benchmark
#   GSHARE_GPU_BENCH=1 GSHARE_GPU_BENCH_ONLY=1 test/gpu/run.sh   # only that
#   GSHARE_GPU_ONLY='torch_mp' test/gpu/run.sh   # only the entries matching
#
# Needs: build/ from `make` (gshare-agent, gsharectl, libgshare.so), python3
# with torch, jax and cupy. Env: B (build dir), GSHARE_LIBDIR (extra
# LD_LIBRARY_PATH for the agent's libprotobuf-c, libyaml, libgrpc and abseil
# if not installed: e.g. the libraries `ldd build/gshare-agent` lists, copied),
# GSHARE_SUITE_RESERVE (agent reserve, default 12Gi: room for every
# process's CUDA context, and for the native runs compared against).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
reserve=${GSHARE_SUITE_RESERVE:-12Gi}
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-gpu.XXXXXX)
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
pass=0; fail=0
ok() { echo "PASS $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
jq_py() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# shellcheck source=gpu_idle.sh
source "$here/gpu_idle.sh"
"$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
  --reserve "$reserve" --devices 0 --burst-max 16Gi >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; echo "--- agent log (tail)"; tail -n 20 "$work/agent.log"' EXIT
for _ in $(seq 300); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
ctl gpus || { bad "agent did not start"; exit 1; }
uuid=$(ctl --json gpus | jq_py 'd["gpus"][0]["uuid"]')
ids() { local a=$1 n=$2; for ((u = a; u < a + n; u++)); do printf '%s-u%d ' "$uuid" "$u"; done; }
# shellcheck disable=SC2046
A=$(ctl --json create $(ids 0 8) | jq_py 'd["allocation"]["socket_dir"]')
# shellcheck disable=SC2046
Bd=$(ctl --json create $(ids 8 4) | jq_py 'd["allocation"]["socket_dir"]')
QA=$((8 << 30)); QB=$((4 << 30))
echo "allocation A: $A (8 GiB); allocation B: $Bd (4 GiB)"

# in_alloc DIR QUOTA cmd... : run a command as a process of that container
# (a shell function, so the per-entry time limit is applied inside it).
in_alloc() {
  local dir=$1 q=$2; shift 2
  timeout "${GSHARE_TEST_TIMEOUT:-240}" env LD_PRELOAD="$B/libgshare.so" \
      GSHARE_SOCKET="$dir/agent.sock" GSHARE_EXPECT_QUOTA="$q" \
      PYTHONPATH="$here" PYTHONUNBUFFERED=1 "$@"
}
t() {  # t NAME cmd...: one suite entry (only those matching $GSHARE_GPU_ONLY, a regex, if set)
  local name=$1; shift
  [[ -n ${GSHARE_GPU_ONLY:-} && ! $name =~ $GSHARE_GPU_ONLY ]] && return 0
  echo "=== $name"
  if "$@" >"$work/$name.log" 2>&1; then ok "$name"; else bad "$name (exit $?)"; fi
  sed 's/^/    /' "$work/$name.log" | tail -n 25
}

if [[ ${GSHARE_GPU_BENCH_ONLY:-0} != 1 ]]; then
t kernel_check   in_alloc "$A" $QA "${KERNEL_CHECK:-$B/test-gpu/kernel_check}"
E2E=${E2E_CUDA:-$B/test/e2e/e2e_cuda}
t e2e_meminfo    in_alloc "$A" $QA "$E2E" meminfo
t e2e_fill       in_alloc "$A" $QA "$E2E" fill 64
t e2e_data       in_alloc "$A" $QA "$E2E" data 600
t e2e_threads    in_alloc "$A" $QA "$E2E" threads 8
t bypass         timeout 60 env GSHARE_EXPECT_QUOTA=0 "${BYPASS:-$B/test-gpu/bypass}" $((16 << 30))
t torch_quota    in_alloc "$A" $QA "$PY" "$here/fw_torch_quota.py"
t torch_quota_expandable in_alloc "$A" $QA env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$PY" "$here/fw_torch_quota.py"
t torch_quota_async in_alloc "$A" $QA env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "$PY" "$here/fw_torch_quota.py"
t torch_train_native timeout 240 env PYTHONPATH="$here" CUBLAS_WORKSPACE_CONFIG=:4096:8 "$PY" "$here/fw_torch_train.py"
t torch_train_gshare in_alloc "$A" $QA env CUBLAS_WORKSPACE_CONFIG=:4096:8 "$PY" "$here/fw_torch_train.py"
if [[ -n ${GSHARE_GPU_ONLY:-} && ! -f $work/torch_train_gshare.log ]]; then :
elif diff <(grep -E '^(LOSS|CHECKSUM)' "$work/torch_train_native.log") \
        <(grep -E '^(LOSS|CHECKSUM)' "$work/torch_train_gshare.log") >/dev/null &&
   grep -q '^LOSS' "$work/torch_train_gshare.log"; then
  ok "torch_train matches the native run bit for bit"
else bad "torch_train differs from the native run"; fi
t torch_graph    in_alloc "$A" $QA "$PY" "$here/fw_torch_graph.py"
t torch_graph_async in_alloc "$A" $QA env PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync "$PY" "$here/fw_torch_graph.py"
t torch_mp       in_alloc "$A" $QA "$PY" "$here/fw_torch_mp.py"
t torch_mp_expandable in_alloc "$A" $QA env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$PY" "$here/fw_torch_mp.py"
t vmm_refill     in_alloc "$Bd" $QB "${E2E_VMM:-$B/test/e2e/e2e_vmm}" 4 7
t jax            in_alloc "$Bd" $QB "$PY" "$here/fw_jax.py"
t cupy           in_alloc "$Bd" $QB "$PY" "$here/fw_cupy.py"
# Burstable memory (docs/burst.md): 2 units guaranteed, burst 16 GiB.
# shellcheck disable=SC2046
Cb=$(ctl --json create --burst 16Gi $(ids 12 2) | jq_py 'd["allocation"]["socket_dir"]')
t torch_burst    in_alloc "$Cb" $((2 << 30)) env GSHARE_EXPECT_BURST=$((16 << 30)) "$PY" "$here/fw_torch_burst.py"
id=$(basename "$Cb"); ctl release "${id%%-*}" >/dev/null || bad "release the burst allocation"
echo "=== two frameworks at once"
in_alloc "$A" $QA "$PY" "$here/fw_torch_quota.py" >"$work/both_torch.log" 2>&1 & p1=$!
in_alloc "$Bd" $QB "$PY" "$here/fw_cupy.py" >"$work/both_cupy.log" 2>&1 & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
[[ $r1 == 0 ]] && ok "two at once: torch in A" || { bad "two at once: torch in A"; tail -5 "$work/both_torch.log"; }
[[ $r2 == 0 ]] && ok "two at once: cupy in B" || { bad "two at once: cupy in B"; tail -5 "$work/both_cupy.log"; }

# Every chunk back: no process holds memory, and after release the system
# list holds the whole pool again.
sleep 0.5
held=$(ctl --json allocations | jq_py 'sum(p["chunks_held"] for a in (d if isinstance(d, list) else d["allocations"]) for p in a["processes"])')
[[ $held == 0 ]] && ok "no process holds a chunk after all exited" || bad "processes still hold $held chunks"
# An allocation's socket directory is <id>-<random> (fresh for each one).
for dir in "$A" "$Bd"; do id=$(basename "$dir"); id=${id%%-*}; ctl release "$id" >/dev/null || bad "release $id"; done
back=$(ctl --json gpus | jq_py 'str(d["gpus"][0]["chunks_free"]) + " " + str(d["gpus"][0]["chunks_total"])')
read -r free total <<<"$back"
[[ $free == "$total" ]] && ok "every chunk back on the system list ($free/$total)" || bad "chunks free $free of $total"
fi

if [[ ${GSHARE_GPU_BENCH:-0} == 1 ]]; then
  echo "=== training-step benchmark (native and gshare taking turns)"
  # shellcheck disable=SC2046
  C=$(ctl --json create $(ids 16 16) | jq_py 'd["allocation"]["socket_dir"]')
  timeout 580 env PYTHONPATH="$here" GS_PRELOAD="$B/libgshare.so" GS_SOCKET="$C/agent.sock" \
    "$PY" "$here/bench_step.py" "${GSHARE_BENCH_STEPS:-400}" "${GSHARE_BENCH_ROUNDS:-3}" ||
    bad "training-step benchmark"
fi
echo "gpu suite: $pass passed, $fail failed"
[[ $fail == 0 ]]
