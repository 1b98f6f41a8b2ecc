#!/usr/bin/env bash
# two_gpu.sh — gshare on a two-GPU machine (test/gpu/two_gpu.py does the
# work): the agent pools both GPUs; one allocation of UNITS units on each
# GPU runs peer access, an NCCL all-reduce and a tensor-parallel block
# across both (each GPU stopping the pod at its quota), a model split with
# device_map, vLLM-style sizing; then the all-reduce bus bandwidth, native,
# under gshare and under gshare in a best-effort allocation beside a
# latency-critical process (compute QoS: issue 30's >= 0.98x target), taking
# turns.
#   B=build GSHARE_LIBDIR=... test/gpu/two_gpu.sh
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the others).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
units=${UNITS:-4}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
work=$(mktemp -d /tmp/gshare-2gpu.XXXXXX)
sock=$work/agent.sock
agentenv() { if [[ -n ${GSHARE_LIBDIR:-} ]]; then env LD_LIBRARY_PATH="$GSHARE_LIBDIR" "$@"; else "$@"; fi; }
ctl() { agentenv "$B/gsharectl" --socket "$sock" "$@"; }
fail=0
agentenv "$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
  --reserve "${RESERVE:-40Gi}" --reconcile-interval 0 >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; echo "--- agent log (tail)"; tail -n 8 "$work/agent.log"' EXIT
for _ in $(seq 300); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
ctl gpus
ids=$(ctl --json gpus | python3 -c "
import json,sys
d=json.load(sys.stdin)
print(' '.join('%s-u%d' % (g['uuid'], u) for g in d['gpus'] for u in range($units)))")
dir=$(ctl --json create $ids | python3 -c 'import json,sys; print(json.load(sys.stdin)["allocation"]["socket_dir"])')
# A program (not a shell function) so that timeout can run it.
hooked=$work/hooked
printf '#!/bin/sh\nexec env LD_PRELOAD=%s GSHARE_SOCKET=%s GSHARE_EXPECT_QUOTA=%s "$@"\n' \
  "$B/libgshare.so" "$dir/agent.sock" $((units << 30)) >"$hooked"
chmod +x "$hooked"
run() { local name=$1; shift; echo "=== $name"; timeout 240 "$@" || fail=1; }
run "peer (gshare)" "$hooked" python3 "$here/two_gpu.py" peer
two() {  # two ranks, wrapper $1 ($hooked or env)
  local w=$1 mode=$2 f; f=$(mktemp -u /tmp/gshare-2gpu-init.XXXXXX)
  timeout 200 $w python3 "$here/two_gpu.py" "$mode" 1 "$f" & local p1=$!
  timeout 200 $w python3 "$here/two_gpu.py" "$mode" 0 "$f"; local r0=$?
  wait $p1; local r1=$?; rm -f "$f"; return $(( r0 | r1 ))
}
echo "=== all-reduce, tensor parallel, quota (gshare)"; two "$hooked" dist || fail=1
run "model over both GPUs (gshare)" "$hooked" python3 "$here/two_gpu.py" hf
run "vLLM-style sizing (gshare)" "$hooked" python3 "$here/two_gpu.py" size
# Compute QoS (docs/compute.md): the ranks in a best-effort allocation
# while a latency-critical process (idle, holding its board slot) is on the
# GPUs, so that their launches go through admission (NCCL's kernels never
# held).
bedir=$(ctl --json create --compute-class best-effort $(ctl --json gpus | python3 -c "
import json,sys
d=json.load(sys.stdin)
print(' '.join('%s-u%d' % (g['uuid'], u) for g in d['gpus'] for u in range($units, 2 * $units)))") |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["allocation"]["socket_dir"])')
lcdir=$(ctl --json create --compute-class latency-critical $(ctl --json gpus | python3 -c "
import json,sys
d=json.load(sys.stdin)
print(' '.join('%s-u%d' % (g['uuid'], u) for g in d['gpus'] for u in range(2 * $units, 2 * $units + 1)))") |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["allocation"]["socket_dir"])')
behooked=$work/behooked
printf '#!/bin/sh\nexec env LD_PRELOAD=%s GSHARE_SOCKET=%s "$@"\n' "$B/libgshare.so" "$bedir/agent.sock" >"$behooked"
chmod +x "$behooked"
env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$lcdir/agent.sock" python3 -c '
import time, torch
x = torch.ones(1, device="cuda:0"); y = x + 1; torch.cuda.synchronize()
print("lc ready", flush=True); time.sleep(600)' >"$work/lc.out" 2>&1 &
lcpid=$!
for _ in $(seq 600); do grep -q "lc ready" "$work/lc.out" && break; sleep 0.1; done
echo "=== all-reduce bus bandwidth, native, gshare and gshare best-effort (a latency-critical process on the GPUs) taking turns"
for round in 1 2; do
  echo "round $round native"; two env bench | tee -a "$work/native.bw"
  echo "round $round gshare"; two "$hooked" bench | tee -a "$work/gshare.bw"
  echo "round $round gshare best-effort"; two "$behooked" bench | tee -a "$work/be.bw"
done
kill $lcpid 2>/dev/null; wait $lcpid 2>/dev/null
python3 - "$work/native.bw" "$work/gshare.bw" "$work/be.bw" <<'PY'
import re, sys
def best(p):
    d = {}
    for l in open(p):
        m = re.match(r"BW (\d+) MiB ([\d.]+)", l)
        if m:
            d[int(m.group(1))] = max(d.get(int(m.group(1)), 0), float(m.group(2)))
    return d
n, g, b = best(sys.argv[1]), best(sys.argv[2]), best(sys.argv[3])
for k in sorted(n):
    print("%5d MiB native %.1f GB/s gshare %.1f GB/s ratio %.3f best-effort %.1f GB/s ratio %.3f"
          % (k, n[k], g.get(k, 0), g.get(k, 0) / n[k], b.get(k, 0), b.get(k, 0) / n[k]))
print("RESULT allreduce_busbw_ratio_1GiB=%.3f busbw_1GiB_native=%.1f busbw_1GiB_gshare=%.1f "
      "allreduce_busbw_ratio_1GiB_best_effort=%.3f"
      % (g.get(1024, 0) / n[1024] if n.get(1024) else 0, n.get(1024, 0), g.get(1024, 0),
         b.get(1024, 0) / n[1024] if n.get(1024) else 0))
PY
ctl allocations
exit $fail
