#!/usr/bin/env bash
# NVML under gshare on a real GPU (not run in CI): nvidia-smi and a python3
# ctypes NVML program (as pynvml does it), run as processes of a gshare
# allocation, must report the allocation's quota as the GPU's total memory,
# count a process of the allocation holding memory as used, and fail closed
# (never the whole GPU) when the agent cannot be reached.  Prints what it
# saw; exits non-zero on any mismatch.
#
#   test/gpu/nvml_check.sh
#
# Needs: build/ from `make` (gshare-agent, gsharectl, libgshare.so,
# test/e2e/e2e_cuda), nvidia-smi and libnvidia-ml.so.1, python3.
# Env: B (build dir), GSHARE_LIBDIR (extra LD_LIBRARY_PATH for the agent),
# NVML_CHECK_UNITS (units in the allocation, default 4), GSHARE_SUITE_RESERVE
# (agent reserve, default 4Gi), NVML_CHECK_AGENT_ARGS (extra agent arguments;
# with --cuda-library the fake driver, a fake nvidia-smi and test/fakenvml the
# script was checked on a machine without a GPU).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
units=${NVML_CHECK_UNITS:-4}
work=$(mktemp -d /tmp/gshare-nvml.XXXXXX)
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
jq_py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }
holder=

"$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
  --reserve "${GSHARE_SUITE_RESERVE:-4Gi}" --devices 0 ${NVML_CHECK_AGENT_ARGS:-} >"$work/agent.log" 2>&1 &
agent=$!
cleanup() {
  [[ -n $holder ]] && kill "$holder" 2>/dev/null
  kill $agent 2>/dev/null; wait $agent 2>/dev/null
  echo "--- agent log (tail)"; tail -n 10 "$work/agent.log"
}
trap cleanup EXIT
for _ in $(seq 300); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
ctl gpus || { bad "agent did not start"; exit 1; }
uuid=$(ctl --json gpus | jq_py 'd["gpus"][0]["uuid"]')
ids=$(for ((u = 0; u < units; u++)); do printf '%s-u%d ' "$uuid" "$u"; done)
# shellcheck disable=SC2086
alloc=$(ctl --json create $ids)
dir=$(jq_py 'd["allocation"]["socket_dir"]' <<<"$alloc")
quota=$(jq_py 'd["allocation"]["parts"][0]["quota_bytes"]' <<<"$alloc")
qmib=$((quota >> 20))
echo "allocation: $dir, quota $quota bytes ($qmib MiB) on $uuid"

hooked() { env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$1/agent.sock" "${@:2}"; }
SMI=(nvidia-smi --query-gpu=uuid,memory.total,memory.used,memory.free --format=csv,noheader,nounits)
# The row of our GPU: "total used free" in MiB.
row() { awk -F', *' -v u="$uuid" 'tolower($1) == tolower(u) { print $2, $3, $4 }'; }

echo "--- nvidia-smi without the hook (the whole GPU)"
"${SMI[@]}" | tee "$work/native"
read -r ntotal _ _ < <(row <"$work/native")

echo "--- nvidia-smi --query-gpu=memory.total,memory.used --format=csv, in the allocation"
hooked "$dir" nvidia-smi --query-gpu=memory.total,memory.used --format=csv
hooked "$dir" "${SMI[@]}" | tee "$work/idle"
read -r t u f < <(row <"$work/idle")
if [[ ${t:-} == "$qmib" && ${u:-} == 0 && ${f:-} == "$qmib" ]]; then ok "nvidia-smi idle: total = quota, used 0"
else bad "nvidia-smi idle: total ${t:-?} used ${u:-?} free ${f:-?}, want $qmib 0 $qmib"; fi

hold=$((qmib / 2))
hooked "$dir" "$B/test/e2e/e2e_cuda" hold "$hold" >"$work/holder" 2>&1 &
holder=$!
for _ in $(seq 300); do grep -q held "$work/holder" && break; sleep 0.1; done
echo "--- nvidia-smi while another process of the allocation holds $hold MiB"
hooked "$dir" "${SMI[@]}" | tee "$work/busy"
read -r t u f < <(row <"$work/busy")
if [[ ${t:-} == "$qmib" && -n ${u:-} && $u -ge $hold && $((u + f)) == "$qmib" ]]; then
  ok "nvidia-smi busy: total = quota, used >= $hold MiB, used + free = total"
else bad "nvidia-smi busy: total ${t:-?} used ${u:-?} free ${f:-?}"; fi

echo "--- python3 ctypes NVML (as pynvml), in the allocation"
hooked "$dir" python3 - "$uuid" "$quota" "$hold" <<'PY'
import ctypes, sys
uuid, quota, hold = sys.argv[1].lower(), int(sys.argv[2]), int(sys.argv[3]) << 20
class M1(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
class M2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
n = ctypes.c_uint()
assert nv.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0
bad = 0
for i in range(n.value):
    h = ctypes.c_void_p()
    assert nv.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    s = ctypes.create_string_buffer(96)
    assert nv.nvmlDeviceGetUUID(h, s, 96) == 0
    a, b = M1(), M2()
    b.version = ctypes.sizeof(M2) | (2 << 24)
    r1 = nv.nvmlDeviceGetMemoryInfo(h, ctypes.byref(a))
    r2 = nv.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(b))
    print("device %d %s: v1 rc %d total %d free %d used %d; v2 rc %d total %d free %d used %d reserved %d"
          % (i, s.value.decode(), r1, a.total, a.free, a.used, r2, b.total, b.free, b.used, b.reserved))
    want_total = quota if s.value.decode().lower() == uuid else 0
    for rc, m in ((r1, a), (r2, b)):
        if rc != 0 or m.total != want_total or m.free + m.used != m.total or (want_total and m.used < hold):
            bad = 1
print("ctypes: " + ("mismatch" if bad else "all devices as expected"))
sys.exit(bad)
PY
if [[ $? == 0 ]]; then ok "python3 ctypes NVML"; else bad "python3 ctypes NVML"; fi
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=

echo "--- nvidia-smi with the agent unreachable (must not show the whole GPU)"
hooked "$work/nowhere" "${SMI[@]}" 2>&1 | tee "$work/down"
read -r t _ _ < <(row <"$work/down")
if [[ ${t:-} != "${ntotal:-none}" && ${t:-} != "$qmib" ]]; then ok "agent unreachable: no memory figures (${t:-none})"
else bad "agent unreachable: nvidia-smi still shows total ${t:-?} MiB"; fi

echo "nvml_check: $([[ $fail == 0 ]] && echo all passed || echo FAILED)"
exit $fail
