#!/usr/bin/env bash
# Issue 22 on a real GPU (docs/burst.md "Giving it back"): pod A is
# guaranteed 9 GiB and idle; pod B is guaranteed 4 GiB with a burst of the
# whole pool, fills it with checksummed tensors (test/gpu/spill_borrower.py)
# and keeps computing (each step reads and checks all of them); A then
# allocates 8 GiB (test/gpu/spill_owner.py): the agent takes its memory
# back by moving B's data to host memory at the same addresses.  Measured:
# the time A's allocation took, B's checksums and step time while spilled,
# A's step time then against alone, and B back on the GPU after A exits.
# Then the agent is killed (kill -9) and started again, once while B's
# data is spilled and once in the middle of a move (issue 28 item 2,
# docs/burst.md "Agent restarts"): B's checksums hold, the spilled chunks
# are charged as spilled (host memory) after the restart, the owner gets
# its 8 GiB, B's data comes back, and no chunk of the pool is lost.
# The pool is POOL_GIB (41) so that B's fill takes A's idle chunks too.
# Env: B, GSHARE_LIBDIR (as run.sh), PYTHON_GPU, POOL_GIB.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
B=${B:-$root/build}
case $B in /*) ;; *) B=$root/$B ;; esac
PY=${PYTHON_GPU:-python3}
[[ -n ${GSHARE_LIBDIR:-} ]] && export LD_LIBRARY_PATH=$GSHARE_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
POOL=${POOL_GIB:-41}
work=$(mktemp -d /tmp/gshare-spill.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; tar czf "${OUT:-/tmp}/spill-logs.tgz" -C "$work" --exclude "*.sock" --exclude alloc --exclude "in*" . 2>/dev/null' EXIT
sock=$work/agent.sock
ctl() { "$B/gsharectl" --socket "$sock" "$@"; }
js() { "$PY" -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
fail=0
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
ok() { echo "ok   $*"; }
gpu() { ctl --json gpus | js "d['gpus'][0]['$1']"; }

# The platform's host <-> device bandwidth, for reading the figures.
"$PY" -c '
import torch, time
n = 1 << 30
h = torch.empty(n, dtype=torch.uint8, pin_memory=True); d = torch.empty(n, dtype=torch.uint8, device="cuda")
for name, f in (("host->device", lambda: d.copy_(h)), ("device->host", lambda: h.copy_(d))):
    f(); torch.cuda.synchronize(); t0 = time.monotonic(); f(); torch.cuda.synchronize()
    print("pinned %s copy: %.1f GB/s" % (name, n / (time.monotonic() - t0) / 1e9))
'
free=$("$PY" -c 'import torch; print(torch.cuda.mem_get_info()[0])')
reserve=$(( (free - (POOL << 30)) >> 20 ))
# Started again after a kill -9 with the same arguments: it answers once
# it has restored the allocations and the processes' memory.
start_agent() {
  "$B/gshare-agent" --socket "$sock" --socket-root "$work/alloc" --state-dir "$work/state" --devices 0 \
    --reserve "${reserve}Mi" --burst-max "$((POOL - 4))Gi" --spill-max 48Gi >>"$work/agent.log" 2>&1 &
  agent=$!
  for _ in $(seq 1200); do ctl gpus >/dev/null 2>&1 && return 0; kill -0 $agent 2>/dev/null || break; sleep 0.05; done
  bad "the agent does not answer after its start"; return 1
}
start_agent
uuid=$(gpu uuid); units=$(gpu units_total)
echo "pool: $(gpu chunks_total) chunks, $units units (reserve ${reserve} MiB)"
ids() { for u in $(seq "$1" $(($1 + $2 - 1))); do printf '%s-u%d ' "$uuid" "$u"; done; }
# shellcheck disable=SC2046
A=$(ctl --json create $(ids 0 9) | js 'd["allocation"]["socket_dir"]')
# shellcheck disable=SC2046
Bd=$(ctl --json create --burst "${units}Gi" $(ids 9 4) | js 'd["allocation"]["socket_dir"]')
hooked() { local d=$1; shift; env LD_PRELOAD="$B/libgshare.so" GSHARE_SOCKET="$d/agent.sock" PYTHONUNBUFFERED=1 "$@"; }
med() { "$PY" -c 'import json,sys,statistics; v=[x for l in sys.stdin for x in ([json.loads(l)["step"]] if "step" in l else [])]; print(statistics.median(v[-int(sys.argv[1]):]) if v else 0)' "$1"; }

# A alone: its step time.
echo quit | GSHARE_OWN_GIB=1 hooked "$A" "$PY" "$here/spill_owner.py" >"$work/alone.out" 2>"$work/alone.err"
a_alone=$(js 'sorted(d["steps"])[len(d["steps"]) // 2]' < <(tail -n 1 "$work/alone.out"))
echo "A alone: step ${a_alone} ms"

# B fills the pool and computes.
mkfifo "$work/inb"
GSHARE_FILL_GIB=$POOL hooked "$Bd" "$PY" "$here/spill_borrower.py" <"$work/inb" >"$work/b.out" 2>"$work/b.err" &
bp=$!
exec 7>"$work/inb"
steps() { local n0; n0=$(grep -c '"step"' "$work/b.out"); for _ in $(seq 1200); do
  [[ $(grep -c '"step"' "$work/b.out") -ge $((n0 + $1)) ]] && return 0; sleep 0.1; done; return 1; }
for _ in $(seq 1200); do grep -q ready "$work/b.out" && break; kill -0 $bp 2>/dev/null || break; sleep 0.1; done
echo "B: $(head -n 1 "$work/b.out"); owed to A: $(gpu chunks_owed) chunks, lent units $(gpu units_lent)"
steps 20 || bad "B does not step"
b_base=$(med 20 <"$work/b.out")
[[ $(gpu chunks_owed) -gt 0 ]] && ok "B borrowed A's idle chunks" || bad "B did not borrow A's chunks"

# A allocates 8 GiB while B is paused (its steps would share the GPU with A's).
echo pause >&7; sleep 1
mkfifo "$work/ina"
GSHARE_OWN_GIB=8 GSHARE_OWN_SETTLE_S=3 hooked "$A" "$PY" "$here/spill_owner.py" <"$work/ina" >"$work/a.out" 2>"$work/a.err" &
ap=$!
exec 8>"$work/ina"
for _ in $(seq 1200); do [[ $(wc -l <"$work/a.out") -ge 2 ]] && break; kill -0 $ap 2>/dev/null || break; sleep 0.1; done
alloc_ms=$(head -n 1 "$work/a.out" | js 'd["alloc_ms"]')
a_spilled=$(tail -n 1 "$work/a.out" | js 'sorted(d["steps"])[len(d["steps"]) // 2]')
[[ $(tail -n 1 "$work/a.out" | js 'd["ok"]') == True ]] && ok "A's 8 GiB hold their values" || bad "A's data"
spilled=$(gpu chunks_spilled)
echo "A: 8 GiB in ${alloc_ms} ms; step ${a_spilled} ms (alone ${a_alone}); chunks spilled ${spilled}"
# A's 8 GiB came from chunks B borrowed from A (spilled) and from chunks B
# gave back without moving them (PyTorch's cache: none here, B paused).
[[ $spilled -ge 100 ]] && ok "B's data spilled: $spilled chunks" || bad "spilled $spilled chunks"
echo go >&7
steps 10 || bad "B does not step while spilled"
b_spilled=$(med 10 <"$work/b.out")
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold while spilled" || bad "B: $bad_steps steps with a bad checksum"

# A exits: B's data comes back to the GPU.
t0=$(date +%s.%N)
echo quit >&8; wait $ap
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
back_s=$("$PY" -c "import time; print(round($(date +%s.%N) - $t0, 2))")
[[ $(gpu chunks_spilled) == 0 ]] && ok "B back on the GPU ${back_s} s after A exited" || bad "still spilled: $(gpu chunks_spilled)"
steps 10 || bad "B does not step after"
b_after=$(med 10 <"$work/b.out")
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold after moving back" || bad "B: $bad_steps bad steps"
# Again, now that the borrower has mapped host memory once (the first
# batch in a process costs more, see docs/burst.md).
echo pause >&7; sleep 1
GSHARE_OWN_GIB=8 GSHARE_OWN_SETTLE_S=3 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" </dev/null >"$work/a2.out" 2>"$work/a2.err"
alloc2_ms=$(head -n 1 "$work/a2.out" | js 'd["alloc_ms"]')
echo "A again: 8 GiB in ${alloc2_ms} ms"
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
echo go >&7
steps 5 || bad "B does not step after the second reclaim"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold after a second spill and return" || bad "B: $bad_steps bad steps"

# ---- kill -9 of the agent while B's data is spilled
chunks0=$(gpu chunks_total)
echo pause >&7; sleep 1
mkfifo "$work/ina3"
GSHARE_OWN_GIB=8 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" <"$work/ina3" >"$work/a3.out" 2>"$work/a3.err" &
ap=$!
exec 8>"$work/ina3"
for _ in $(seq 1200); do [[ $(wc -l <"$work/a3.out") -ge 2 ]] && break; kill -0 $ap 2>/dev/null || break; sleep 0.1; done
spilled_k=$(gpu chunks_spilled)
[[ $spilled_k -ge 100 ]] && ok "before the kill: $spilled_k chunks spilled" || bad "before the kill: $spilled_k spilled"
kill -9 $agent; wait $agent 2>/dev/null
t0=$(date +%s.%N)
start_agent
# B's mover notices the dead agent within a second and reclaims.
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == "$spilled_k" ]] && break; sleep 0.1; done
restart_s=$("$PY" -c "import time; print(round($(date +%s.%N) - $t0, 2))")
[[ $(gpu chunks_spilled) == "$spilled_k" && $(gpu chunks_owed) == 0 ]] &&
  ok "after kill -9 and a restart ($restart_s s): $spilled_k chunks charged as spilled, none owed" ||
  bad "after the restart: $(gpu chunks_spilled) spilled (before $spilled_k), $(gpu chunks_owed) owed"
[[ $(tail -n 1 "$work/a3.out" | js 'd["ok"]') == True ]] && ok "A's 8 GiB hold their values" || bad "A's data (3)"
echo go >&7
steps 5 || bad "B does not step after the restart"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold across the restart" || bad "B: $bad_steps bad steps after the restart"
echo quit >&8; wait $ap
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
[[ $(gpu chunks_spilled) == 0 ]] && ok "B back on the GPU after the restart" || bad "still spilled: $(gpu chunks_spilled)"

# ---- kill -9 in the middle of a move: as soon as the agent shows one
echo pause >&7; sleep 1
GSHARE_OWN_GIB=8 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" </dev/null >"$work/a4.out" 2>"$work/a4.err" &
ap=$!
midmove=0
for _ in $(seq 3000); do
  [[ $(gpu chunks_moving) -gt 0 ]] && { kill -9 $agent; midmove=1; break; }
  kill -0 $ap 2>/dev/null || break
done
[[ $midmove == 1 ]] || { echo "the move ended before a kill could land: killed after it"; kill -9 $agent; }
wait $agent 2>/dev/null
start_agent
wait $ap
a4=$(head -n 1 "$work/a4.out")
if [[ $a4 != *alloc_ms* ]]; then
  # Its request met the agent's death: the owner asks again.
  GSHARE_OWN_GIB=8 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" </dev/null >"$work/a4.out" 2>"$work/a4.err"
fi
[[ $(tail -n 1 "$work/a4.out" | js 'd["ok"]') == True ]] &&
  ok "mid-move kill (hit $midmove): the owner gets its 8 GiB after the restart" || bad "mid-move: the owner's 8 GiB"
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 && $(gpu chunks_moving) == 0 ]] && break; sleep 0.1; done
[[ $(gpu chunks_spilled) == 0 ]] && ok "mid-move: B back on the GPU once the owner is gone" ||
  bad "mid-move: still spilled $(gpu chunks_spilled)"
echo go >&7
steps 5 || bad "B does not step after the mid-move restart"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold across the mid-move restart" || bad "B: $bad_steps bad steps (mid-move)"
echo quit >&7; wait $bp
for _ in $(seq 600); do [[ $(gpu chunks_owed) == 0 && $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
lost=$(( chunks0 - $(gpu chunks_total) ))
[[ $lost == 0 && $(gpu chunks_spilled) == 0 && $(gpu chunks_owed) == 0 ]] && ok "no chunk lost: $(gpu chunks_total) in the pool" ||
  bad "after the restarts: pool $(gpu chunks_total) (was $chunks0), spilled $(gpu chunks_spilled), owed $(gpu chunks_owed)"
echo "B step: ${b_base} ms on the GPU, ${b_spilled} ms spilled, ${b_after} ms back"
echo "moved out $(gpu chunks_moved_out), back $(gpu chunks_moved_back)"
R() { "$PY" -c "print(round($1, 4))"; }
echo "RESULT reclaim_ms_8GiB=$alloc_ms reclaim_ms_8GiB_again=$alloc2_ms spill_GBps=$(R "8 * 1.073741824 / ($alloc_ms / 1000)") borrower_step_ratio_spilled=$(R "$b_spilled / $b_base") owner_step_ratio=$(R "$a_spilled / $a_alone") back_s=$back_s kill_spilled_chunks=$spilled_k restart_s=$restart_s midmove_hit=$midmove chunks_lost=$lost failures=$fail"
exit $((fail > 0))
