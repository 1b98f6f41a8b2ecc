#!/usr/bin/env bash
# Scrub check on a real GPU (issue 10 item 9): memory granted to a process
# holds no other process's data.  Starts the agent on GPU 0 with the real
# driver (default chunk 256 MiB, unit 1 GiB), then:
#   1. a hooked process of allocation A fills A's whole quota with a marker
#      word (cuMemsetD32) and exits; a second process of A allocates the
#      whole quota again (the same chunks) and must find no marker word;
#   2. A is released and B made of other units: a process of B must find
#      no marker word either (chunks recycled through the system list);
#   3. bench/scrub_bench: the cost of one scrub (map, cuMemsetD32,
#      synchronize, unmap) and of the memset alone, per 256 MiB chunk.
# Prints PASS/FAIL lines, the times, the RESULT line; exits 1 on a failure.
#
#   make build/gshare-agent build/gsharectl build/libgshare.so \
#        build/test/e2e/e2e_cuda build/bench/scrub_bench
#   test/gpu/scrub_check.sh
#
# Env: B (build dir), GSHARE_LIBDIR (extra LD_LIBRARY_PATH, as for run.sh),
# SCRUB_UNITS (units per allocation, default 8 = 8 GiB), SCRUB_RESERVE
# (agent reserve, default 4Gi).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
units=${SCRUB_UNITS:-8}
mib=$((units * 1024))
work=$(mktemp -d /tmp/gshare-scrub.XXXXXX)
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
fail=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

"$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
  --reserve "${SCRUB_RESERVE:-4Gi}" --devices 0 >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; echo "--- agent log (tail)"; tail -n 15 "$work/agent.log"; rm -rf "$work"' EXIT
start=$(date +%s%N)
for _ in $(seq 600); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
ctl gpus || { bad "agent did not start"; exit 1; }
echo "agent up in $(( ($(date +%s%N) - start) / 1000000 )) ms (every chunk scrubbed once at start)"
uuid=$(ctl --json gpus | field 'd["gpus"][0]["uuid"]')
ids() { local a=$1 n=$2; for ((u = a; u < a + n; u++)); do printf '%s-u%d ' "$uuid" "$u"; done; }
hooked() { local dir=$1; shift; env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$dir/agent.sock" "$@"; }
timed() { local t0; t0=$(date +%s%N); "$@"; echo "  ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"; }

# shellcheck disable=SC2046
A=$(ctl --json create $(ids 0 "$units") | field 'd["allocation"]["socket_dir"]')
Aid=$(basename "$A" | cut -d- -f1)
# The process's context is charged to the quota (docs/design.md), so a
# process gets the quota less its context: at least mib - 1024 MiB.
got() { sed -n 's/.* \([0-9][0-9]*\) MiB.*/\1/p' <<<"$1" | head -1; }
out=$(timed hooked "$A" "$B/test/e2e/e2e_cuda" mark "$mib"); echo "$out"
n=$(got "$out")
[[ $out == *"marked"* && ${n:-0} -ge $((mib - 1024)) ]] && ok "A: process 1 marked $n MiB" || bad "A: process 1: $out"
sleep 0.5
out=$(timed hooked "$A" "$B/test/e2e/e2e_cuda" marks "$mib"); echo "$out"
[[ $out == "0 marker words in "* && $(got "$out") -ge $((mib - 1024)) ]] && ok "A: process 2 sees none of process 1's data" \
  || bad "A: process 2: $out"
out=$(timed hooked "$A" "$B/test/e2e/e2e_cuda" mark "$mib"); echo "$out"
ctl release "$Aid" >/dev/null || bad "release A"
sleep 0.5
# shellcheck disable=SC2046
Bd=$(ctl --json create $(ids "$units" "$units") | field 'd["allocation"]["socket_dir"]')
out=$(timed hooked "$Bd" "$B/test/e2e/e2e_cuda" marks "$mib"); echo "$out"
[[ $out == "0 marker words in "* && $(got "$out") -ge $((mib - 1024)) ]] && ok "B: a process of another allocation sees none of A's data" \
  || bad "B: $out"
"$B/bench/scrub_bench" libcuda.so.1 256 100 || bad "scrub_bench"
[[ $fail == 0 ]] && echo "scrub check: all passed" || echo "scrub check: FAILED"
exit $fail
