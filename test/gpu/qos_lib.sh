# test/gpu/qos_lib.sh — what the compute QoS checks share (sourced by
# qos_check.sh and qos_mps.sh): the agent on GPU 0 with a pool of 56 GiB
# in units of 1 GiB, allocations of 8 units (mk FIRST_UNIT [create
# flags...] prints its socket dir), hooked processes, and the workloads'
# measures (qos_workload.py: be_alone, pair, rate, ratio).
# Env: B, GSHARE_LIBDIR (as run.sh), PYTHON_GPU; QOS_WORK: a name for the
# work dir's logs tarball ($OUT/NAME-logs.tgz).
# shellcheck shell=bash
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-qos.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; tar czf "${OUT:-/tmp}/${QOS_WORK:-qos}-logs.tgz" -C "$work" --exclude "*.sock" --exclude alloc . 2>/dev/null' EXIT
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
W=$here/qos_workload.py

# shellcheck source=gpu_idle.sh
source "$here/gpu_idle.sh"
free=$("$PY" -c 'import torch; print(torch.cuda.mem_get_info()[0])')
# A pool of 56 GiB: 6 allocations of 8 units of 1 GiB.
reserve=$(( (free - (56 << 30)) >> 20 ))
"$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" --devices 0 \
  --reserve "${reserve}Mi" --unit-size 1Gi >>"$work/agent.log" 2>&1 &
for _ in $(seq 1200); do ctl gpus >/dev/null 2>&1 && break; sleep 0.05; done
uuid=$(ctl --json gpus | js "d['gpus'][0]['uuid']")
ids() { for u in $(seq "$1" $(($1 + 7))); do printf '%s-u%d ' "$uuid" "$u"; done; }
# shellcheck disable=SC2046
mk() { local first=$1; shift; ctl --json create "$@" $(ids "$first") | js 'd["allocation"]["socket_dir"]'; }
hooked() { local d=$1; shift; env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$d/agent.sock" PYTHONUNBUFFERED=1 "$@"; }
# Until no process of the allocation at socket dir $1 is left: a killed
# BE's memory is back only once the agent saw it exit (the next BE of the
# same allocation met an OOM otherwise).
gone() { for _ in $(seq 600); do
  [[ $(ctl --json allocations | js "sum(len(a.get('processes', [])) for a in d if a.get('socket_dir') == '$1')") == 0 ]] && return
  sleep 0.1; done; echo "allocation $1 still has processes" >&2; }

# BE's rate (per second) between t0 and t1 from its progress lines.
rate() { "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys
t0, t1 = float(sys.argv[2]), float(sys.argv[3])
pts = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
a = [p for p in pts if p["t"] >= t0]
b = [p for p in pts if p["t"] <= t1]
if not a or not b or b[-1]["t"] <= a[0]["t"]:
    print(0)
else:
    print((b[-1]["done"] - a[0]["done"]) / (b[-1]["t"] - a[0]["t"]))
EOF
}
# BE alone at full rate: over its whole run.
be_alone() { hooked "$1" env ${BE_ENV:-} "$PY" "$W" be "$2" --seconds 15 >"$work/$3.out" 2>"$work/$3.err"
  gone "$1"; rate "$work/$3.out" 0 1e18; }
# HP (in allocation $1) beside BE $2 (in allocation $3): prints "p50 p99
# be_rate p99_steady" (p99_steady: after HP's first 2 s, qos_workload.py).
# HP_ENV, BE_ENV: NAME=VALUE words added to HP's and BE's environment;
# HP_ARGS: words added to HP's command line.
pair() {
  local tag=$4
  hooked "$3" env ${BE_ENV:-} "$PY" "$W" be "$2" --seconds 40 >"$work/$tag.be" 2>"$work/$tag.be.err" &
  local bp=$!
  for _ in $(seq 1200); do grep -q warm "$work/$tag.be" && break; sleep 0.1; done
  hooked "$1" env ${HP_ENV:-} "$PY" "$W" hp ${HP_ARGS:-} >"$work/$tag.hp" 2>"$work/$tag.hp.err"
  kill "$bp" 2>/dev/null; wait "$bp" 2>/dev/null
  gone "$3"
  local h t0 t1
  h=$(tail -n 1 "$work/$tag.hp")
  t0=$(echo "$h" | js 'd["t0"]'); t1=$(echo "$h" | js 'd["t1"]')
  echo "$(echo "$h" | js 'd["p50_ms"]') $(echo "$h" | js 'd["p99_ms"]') $(rate "$work/$tag.be" "$t0" "$t1")" \
       "$(echo "$h" | js 'd["p99_steady_ms"]')"
}
ratio() { [[ $1 == - || $2 == - ]] && { echo -; return; }; "$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print('%.3f' % (a / b if b else 0))" "$1" "$2"; }

