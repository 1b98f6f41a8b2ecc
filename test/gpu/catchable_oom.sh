#!/usr/bin/env bash
# Issue 19, item 2 on a real GPU (test/gpu/catchable_oom.py): natively, then
# in a 2-unit allocation under gshare (default overQuota: kill, bound and
# grace).  Prints both JSON lines, whether the agent killed anything, and
#   RESULT catchable_native_alive=0|1 catchable_gshare_alive=0|1 gshare_killed=N
# Env: B, GSHARE_LIBDIR (as run.sh), PYTHON_GPU, UNITS (2).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
work=$(mktemp -d /tmp/gshare-catchable.XXXXXX)
sock=$work/agent.sock
ctl() { LD_LIBRARY_PATH=${GSHARE_LIBDIR:-} "$B/gsharectl" --socket "$sock" "$@"; }
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
alive() { grep -q '"alive": true' <<<"$1" && echo 1 || echo 0; }

nat=$("$PY" "$here/catchable_oom.py" 2>"$work/native.err" | tail -n 1)
echo "native: $nat"
LD_LIBRARY_PATH=${GSHARE_LIBDIR:-} "$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" \
  --state-dir "$work/state" --devices 0 >"$work/agent.log" 2>&1 &
ag=$!
for _ in $(seq 600); do ctl gpus >/dev/null 2>&1 && break; sleep 0.05; done
uuid=$(ctl --json gpus | js 'd["gpus"][0]["uuid"]')
# shellcheck disable=SC2046
dir=$(ctl --json create $(for u in $(seq 0 $((${UNITS:-2} - 1))); do printf '%s-u%d ' "$uuid" "$u"; done) |
      js 'd["allocation"]["socket_dir"]')
gs=$(LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$dir/agent.sock" "$PY" "$here/catchable_oom.py" \
     2>"$work/gshare.err" | tail -n 1)
echo "gshare: $gs"
rc_note=$(tail -n 3 "$work/gshare.err")
[[ -n $gs ]] || echo "gshare stderr: $rc_note"
sleep 2   # two usage scans after the process ended: the log is complete
killed=$(grep -c 'killed (overQuota' "$work/agent.log")
grep -E 'over its quota|killed' "$work/agent.log" | head -n 5
kill $ag; wait $ag
echo "RESULT catchable_native_alive=$(alive "$nat") catchable_gshare_alive=$(alive "$gs") gshare_killed=$killed"
