#!/usr/bin/env bash
# keptfd_check.sh — on a GPU: a process that keeps the fd of every chunk and
# VMM allocation it is sent (test/e2e/e2e_keptfd) cannot take memory past
# its quota nor make the agent create memory twice (issue 28):
#   keepfd 40   two chunks, then a one-chunk VMM allocation, freed and
#               released, 40 rounds
#   vmm 8 v     a VMM allocation of the whole quota, released, 8 rounds
#   vmm 4 cv    chunks of the whole quota, then a VMM allocation of it
#   vmm 4 vc    the same, the other way round
# For each: what it keeps stays within its quota (balloon cap 0), the GPU's
# whole use stays within pool + reserve + contexts, a process of another
# allocation (half the other units) obtains its whole quota while the fds
# are kept, and every chunk is back in the pool after it exits.
# Usage: B=build [GSHARE_LIBDIR=...] test/gpu/keptfd_check.sh
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
  --reconcile-interval 0 --devices 0 --balloon-cap 0 ${GSHARE_KEPTFD_ARGS:-} >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill $agent 2>/dev/null; wait $agent 2>/dev/null; tail -n 15 "$work/agent.log"' EXIT
for _ in $(seq 300); do [[ -S $sock ]] && ctl gpus >/dev/null 2>&1 && break; sleep 0.1; done
g=$(ctl --json gpus)
uuid=$(echo "$g" | py 'd["gpus"][0]["uuid"]')
pool=$(echo "$g" | py 'd["gpus"][0]["chunks_total"] * d["gpus"][0]["chunk_bytes"] >> 20')
reserve=$(echo "$g" | py 'd["gpus"][0]["reserve_bytes"] >> 20')
total=$(echo "$g" | py 'd["gpus"][0]["chunks_total"]')
units=$(echo "$g" | py 'd["gpus"][0]["units_total"]')
bunits=$(( (units - 1) / 2 ))
worst=0
# Releases allocation $1 and waits until it is gone (its processes exited).
gone() {
  local _
  ctl release "$1" >/dev/null 2>&1
  for _ in $(seq 150); do
    ctl --json allocations | py "'$1' in [x['id'] for x in d]" | grep -q False && return 0
    sleep 0.2
  done
  echo "FAIL allocation $1 still there 30 s after its release"; fail=1
}
attack() {
  local a aid quota line kept after bdir bid bquota held free
  a=$(ctl --json create "$uuid-u0" | py 'd["allocation"]["socket_dir"]')
  aid=$(basename "$a" | cut -d- -f1)  # the directory is <id>-<random>
  quota=$(ctl --json allocations | py "[x for x in d if x['id'] == '$aid'][0]['parts'][0]['quota_bytes']")
  coproc KEEP { exec "$B/test/e2e/e2e_keptfd" "$1" "$a/agent.sock" "${@:2}"; }
  read -r -t 120 line <&"${KEEP[0]}"
  after=$(used)
  (( after > worst )) && worst=$after
  kept=$(echo "$line" | awk '{ print $4 }')
  echo "$*: $line; GPU used $after MiB with the fds kept; quota $((quota >> 20)) MiB, pool $pool + reserve $reserve MiB"
  if [[ -n $kept ]] && (( kept <= quota )); then echo "PASS $*: kept $((kept >> 20)) MiB within the quota"
  else echo "FAIL $*: kept '${kept}' bytes over the quota of $quota"; fail=1; fi
  if (( after <= pool + reserve + 1024 )); then echo "PASS $*: GPU use within pool + reserve + context ($after MiB)"
  else echo "FAIL $*: GPU use $after MiB over pool $pool + reserve $reserve + context"; fail=1; fi
  if (( bunits > 0 )); then
    bdir=$(ctl --json create $(for u in $(seq 1 "$bunits"); do echo "$uuid-u$u"; done) | py 'd["allocation"]["socket_dir"]')
    bid=$(basename "$bdir" | cut -d- -f1)
    bquota=$(ctl --json allocations | py "[x for x in d if x['id'] == '$bid'][0]['parts'][0]['quota_bytes']")
    coproc HOLD { exec "$B/test/e2e/e2e_wire" hold "$bdir/agent.sock" "$bquota" 2>&1; }
    read -r -t 60 held <&"${HOLD[0]}"
    kill "$HOLD_PID" 2>/dev/null; wait "$HOLD_PID" 2>/dev/null
    if [[ $held == held ]]; then echo "PASS $*: another allocation obtains its whole quota ($((bquota >> 20)) MiB)"
    else echo "FAIL $*: another allocation cannot obtain its quota of $((bquota >> 20)) MiB: $held"; fail=1; fi
    gone "$bid"
  fi
  echo >&"${KEEP[1]}"
  read -r -t 120 line <&"${KEEP[0]}"
  wait "$KEEP_PID" 2>/dev/null
  echo "$*: $line"
  gone "$aid"
  for _ in $(seq 100); do
    free=$(ctl --json gpus | py 'str(d["gpus"][0]["chunks_free"]) + " " + str(d["gpus"][0]["chunks_total"])')
    [[ $free == "$total $total" ]] && break; sleep 0.2
  done
  if [[ $free == "$total $total" ]]; then echo "PASS $*: every chunk back in the pool ($free)"
  else echo "FAIL $*: chunks free/total $free, expected $total $total"; fail=1; fi
}
attack keepfd 40
attack vmm 8 v
attack vmm 4 cv
attack vmm 4 vc
echo "RESULT keptfd_used_mib=$worst pool_plus_reserve_mib=$((pool + reserve)) fail=$fail"
exit $fail
