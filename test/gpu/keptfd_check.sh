#!/usr/bin/env bash
# keptfd_check.sh — on a GPU: a process that keeps the fd of every chunk and
# VMM allocation it is sent, frees them and asks again (e2e_wire keepfd),
# cannot make the agent create memory twice: the GPU's whole use stays
# within pool + reserve + the agent's context, and every chunk is back in the
# pool after it exits.  Usage: B=build [GSHARE_LIBDIR=...] test/gpu/keptfd_check.sh
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/gshare-keptfd.XXXXXX)
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail=0
used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1; }
"$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" \
  --reconcile-interval 0 --devices 0 ${GSHARE_KEPTFD_ARGS:-} >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; tail -n 15 "$work/agent.log"' EXIT
for _ in $(seq 300); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
g=$(ctl --json gpus)
uuid=$(echo "$g" | py 'd["gpus"][0]["uuid"]')
pool=$(echo "$g" | py 'd["gpus"][0]["chunks_total"] * d["gpus"][0]["chunk_bytes"] >> 20')
reserve=$(echo "$g" | py 'd["gpus"][0]["reserve_bytes"] >> 20')
total=$(echo "$g" | py 'd["gpus"][0]["chunks_total"]')
before=$(used)
a=$(ctl --json create "$uuid-u0" | py 'd["allocation"]["socket_dir"]')
aid=$(basename "$a" | cut -d- -f1)  # the directory is <id>-<random>
coproc KEEP { "$B/test/e2e/e2e_wire" keepfd "$a/agent.sock" 40; }
read -r -t 60 line <&"${KEEP[0]}"
after=$(used)
echo "keepfd: $line; GPU used $before MiB before, $after MiB with the fds kept; pool $pool + reserve $reserve MiB"
if (( after <= pool + reserve + 1024 )); then echo "PASS GPU use within pool + reserve + context ($after MiB)"
else echo "FAIL GPU use $after MiB over pool $pool + reserve $reserve + context"; fail=1; fi
echo >&"${KEEP[1]}"; wait "$KEEP_PID" 2>/dev/null
ctl release "$aid" >/dev/null
for _ in $(seq 100); do
  free=$(ctl --json gpus | py 'str(d["gpus"][0]["chunks_free"]) + " " + str(d["gpus"][0]["chunks_total"])')
  [[ $free == "$total $total" ]] && break; sleep 0.2
done
if [[ $free == "$total $total" ]]; then echo "PASS every chunk back in the pool ($free)"
else echo "FAIL chunks free/total $free, expected $total $total"; fail=1; fi
echo "RESULT keptfd_used_mib=$after pool_plus_reserve_mib=$((pool + reserve))"
exit $fail
