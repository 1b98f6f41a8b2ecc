#!/usr/bin/env bash
# Issue 18 on a real GPU: a PyTorch process holds HOLD_GIB GiB and trains
# (test/gpu/restart_torch.py) in an 8-unit allocation while the agent is
# killed (kill -9) and started again, then upgraded: a second build (a copy
# of the binary, AGENT2 to name another) started beside it takes over
# through the handover socket, and the old one gets SIGTERM as the DaemonSet
# controller would.  Prints the figures and "RESULT ..." lines:
#   failed calls, the longest step (stall) around each event, units before
#   and after, what a new process of the same pod obtains (quota less what
#   the trainer holds), chunks back at the end.
# Env: B, GSHARE_LIBDIR (as run.sh), PYTHON_GPU, HOLD_GIB (4), RESERVE (12Gi).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-restart.XXXXXX)
trap '' PIPE
trap 'tar czf "${OUT:-/tmp}/restart-logs.tgz" -C "$work" --exclude in --exclude "*.sock" --exclude alloc . 2>/dev/null' EXIT
sock=$work/agent.sock
AGENT1=$B/gshare-agent
AGENT2=${AGENT2:-$work/gshare-agent-next}
[[ -x $AGENT2 ]] || cp "$AGENT1" "$AGENT2"
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail=0
note() { echo "$*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
args=(--socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" --reserve "${RESERVE:-12Gi}" --devices 0)
start() {  # start BINARY LOG: starts an agent, waits for its control socket
  "$1" "${args[@]}" >>"$2" 2>&1 &
  echo $!
}
wait_ctl() { for _ in $(seq 600); do ctl gpus >/dev/null 2>&1 && return 0; sleep 0.05; done; return 1; }
units() { ctl --json gpus | js 'd["gpus"][0]["units_total"]'; }
free_chunks() { ctl --json gpus | js '"%d/%d" % (d["gpus"][0]["chunks_free"], d["gpus"][0]["chunks_total"])'; }

a1=$(start "$AGENT1" "$work/agent1.log"); wait_ctl || { bad "agent 1 did not start"; exit 1; }
uuid=$(ctl --json gpus | js 'd["gpus"][0]["uuid"]')
units0=$(units); chunks0=$(free_chunks)
# shellcheck disable=SC2046
dir=$(ctl --json create $(for u in 0 1 2 3 4 5 6 7; do printf '%s-u%d ' "$uuid" $u; done) | js 'd["allocation"]["socket_dir"]')
Q=$((8 << 30))
note "units $units0, chunks free $chunks0; allocation $dir (8 GiB)"
hooked() { env GSHARE_HOOK_DEBUG=1 LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$dir/agent.sock" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
           PYTHONUNBUFFERED=1 "$@"; }
mkfifo "$work/in"
hooked "$PY" "$here/restart_torch.py" <"$work/in" >"$work/trainer.out" 2>"$work/trainer.err" &
tr=$!
exec 7>"$work/in"   # the trainer's stdin, kept open
say() { echo "$1" >&7; }
for _ in $(seq 1200); do grep -q ready "$work/trainer.out" 2>/dev/null && break; kill -0 $tr 2>/dev/null || break; sleep 0.1; done
grep -q ready "$work/trainer.out" || { bad "trainer did not start"; tail -n 30 "$work/trainer.err"; exit 1; }
note "trainer: $(head -n 1 "$work/trainer.out")"
last=""
drain() {  # waits $1 seconds; the trainer's last tick (or grown line) in $last
  sleep "$1"
  last=$(grep -E '"(tick|grown)"' "$work/trainer.out" | tail -n 1)
  kill -0 $tr 2>/dev/null || { bad "the trainer died"; tail -n 20 "$work/trainer.err"; }
}
grown() {  # a new process of the same pod: what it obtains
  hooked "$PY" -c '
import torch, json
got = []
try:
    while True:
        got.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
except (torch.OutOfMemoryError, RuntimeError) as e:
    if "out of memory" not in str(e):
        raise
print(len(got) * (64 << 20))' 2>>"$work/grow.err" | tail -n 1
}
snap() { ctl --json allocations >"$work/alloc-$1.json"; ctl --json gpus >"$work/gpus-$1.json"; }
measure() {  # what a new process of the pod obtains, the trainer paused
  say pause
  for _ in $(seq 100); do [[ $(grep -c paused "$work/trainer.out") -gt $npause ]] && break; sleep 0.05; done
  npause=$((npause + 1))
  grown
  say resume
}
npause=0
drain 5
note "before: $last"; snap before
g0=$(measure); note "before: a new process of the pod obtains $((g0 >> 20)) MiB"

# ---- crash: kill -9, a new agent started at once (a container restart)
say reset; sleep 1
kill -9 "$a1"; while kill -0 "$a1" 2>/dev/null; do sleep 0.01; done
t0=$(date +%s%N)
a2=$(start "$AGENT1" "$work/agent2.log"); wait_ctl || bad "agent 2 did not start"
note "crash: the new agent answers after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
drain 8
crash_tick=$last; note "crash: $crash_tick"; snap crash
units1=$(units); note "crash: units $units0 -> $units1"
g1=$(measure); note "crash: a new process of the pod obtains $((g1 >> 20)) MiB (before the crash $((g0 >> 20)))"

# ---- upgrade: another build beside it takes over, then the old one stops
say reset; sleep 1
a3=$(start "$AGENT2" "$work/agent3.log")
for _ in $(seq 600); do grep -q "upgrade: handed over" "$work/agent2.log" && break; sleep 0.05; done
grep -q "upgrade: handed over" "$work/agent2.log" || bad "no handover in agent 2's log"
kill -TERM "$a2"; while kill -0 "$a2" 2>/dev/null; do sleep 0.01; done
drain 8
up_tick=$last; note "upgrade: $up_tick"; snap upgrade
units2=$(units); note "upgrade: units $units0 -> $units2"
g2=$(measure); note "upgrade: a new process of the pod obtains $((g2 >> 20)) MiB"

say pause; sleep 1; say grow; drain 10; note "trainer grown: $(grep grown "$work/trainer.out" | tail -n 1)"
say quit
for _ in $(seq 600); do kill -0 $tr 2>/dev/null || break; sleep 0.1; done
summary=$(grep summary "$work/trainer.out" | tail -n 1)
note "summary: $summary"
for _ in $(seq 100); do [[ $(ctl --json allocations | js 'len(d[0]["processes"])') == 0 ]] && break; sleep 0.1; done
ctl release "$(ctl --json allocations | js 'd[0]["id"]')" >/dev/null
for _ in $(seq 100); do [[ $(free_chunks) == "$chunks0" ]] && break; sleep 0.2; done
chunks_end=$(free_chunks); note "chunks free at the end $chunks_end (at the start $chunks0)"
kill -TERM "$a3"; while kill -0 "$a3" 2>/dev/null; do sleep 0.01; done
"$PY" - "$crash_tick" "$up_tick" "$summary" "$units0" "$units1" "$units2" "$g0" "$g1" "$g2" "$chunks0" "$chunks_end" <<'PYEOF'
import json, sys
c, u, s = (json.loads(x) if x else {} for x in sys.argv[1:4])
u0, u1, u2, g0, g1, g2 = map(int, sys.argv[4:10])
print("RESULT restart_failed_calls=%d restart_units_lost=%d crash_max_step_ms=%.0f upgrade_max_stall_ms=%.0f "
      "upgrade_failed_calls=%d data_check_failures=%d quota_after_crash_mib=%d quota_after_upgrade_mib=%d "
      "quota_before_mib=%d chunks_back=%d" % (
      c.get("failed", -1), max(0, u0 - min(u1, u2)), c.get("max_step_ms", -1), u.get("max_step_ms", -1),
      s.get("failed", -1) - c.get("failed", 0), s.get("check_failures", -1), g1 >> 20, g2 >> 20, g0 >> 20,
      sys.argv[10] == sys.argv[11]))
PYEOF
[[ -n $summary && $summary == *'"failed": 0'* && $summary == *'"check_failures": 0'* ]] || bad "the trainer saw failed calls or bad data"
[[ $units1 == "$units0" && $units2 == "$units0" ]] || bad "units advertised dropped"
[[ $chunks_end == "$chunks0" ]] || bad "chunks not all back"
echo "--- logs (tails)"; for f in "$work"/agent*.log "$work/trainer.err"; do echo "== $f"; tail -n 15 "$f"; done
exit $((fail > 0))
