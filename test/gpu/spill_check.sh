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
# Writes a command to B's (fd 7) or A's (fd 8) stdin; a dead reader is a
# FAIL, not a SIGPIPE that ends this script before its RESULT line.
to() { local fd=$1; shift; (echo "$*" >&"$fd") 2>/dev/null || bad "could not send '$*' on fd $fd: its reader is gone"; }
gpu() { ctl --json gpus | js "d['gpus'][0]['$1']"; }
# The agent's take-back lines (docs/burst.md "Giving it back": one per
# take-back, its time by phase); phases N0 SUFFIX: those logged after the
# first N0 (once the moves are over), summed, as RESULT keys reclaim_*.
ntakebacks() { grep -c 'taken back: .* batches' "$work/agent.log"; }
# After the owner's context (its take-back over: A settles 3 s before its 8 GiB).
settled() { for _ in $(seq 25); do [[ $(gpu chunks_moving) == 0 ]] && break; sleep 0.1; done; ntakebacks; }
phases() {
  for _ in $(seq 100); do [[ $(gpu chunks_moving) == 0 && $(ntakebacks) -gt $1 ]] && break; sleep 0.1; done
  grep 'taken back: .* batches' "$work/agent.log" | tail -n +"$(($1 + 1))" | "$PY" -c '
import re, sys
keys = ["plan", "sync", "prepare", "copy", "remap", "wire", "settle"]
tot = dict.fromkeys(keys + ["batches", "chunks", "wall"], 0.0)
for l in sys.stdin:
    m = re.search(r"taken back: (\d+) chunks moved to host memory in (\d+) batches, ([\d.]+) ms", l)
    tot["chunks"] += int(m.group(1)); tot["batches"] += int(m.group(2)); tot["wall"] += float(m.group(3))
    for k in keys:
        tot[k] += float(re.search(r"\b%s ([\d.]+)" % k, l.split("(ms):")[1]).group(1))
sfx = sys.argv[1]
print(" ".join("reclaim_%s_ms%s=%s" % (k, sfx, round(tot[k], 1)) for k in ["wall"] + keys) +
      " reclaim_batches%s=%d reclaim_chunks%s=%d" % (sfx, tot["batches"], sfx, tot["chunks"]))' "$2"
}

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
  [[ $(grep -c '"step"' "$work/b.out") -ge $((n0 + $1)) ]] && return 0
  kill -0 $bp 2>/dev/null || { echo "B (pid $bp) is gone: $(tail -n 1 "$work/b.err")"; return 1; }; sleep 0.1; done; return 1; }
for _ in $(seq 1200); do grep -q ready "$work/b.out" && break; kill -0 $bp 2>/dev/null || break; sleep 0.1; done
echo "B: $(head -n 1 "$work/b.out"); owed to A: $(gpu chunks_owed) chunks, lent units $(gpu units_lent)"
steps 20 || bad "B does not step"
b_base=$(med 20 <"$work/b.out")
[[ $(gpu chunks_owed) -gt 0 ]] && ok "B borrowed A's idle chunks" || bad "B did not borrow A's chunks"

# A allocates 8 GiB while B is paused (its steps would share the GPU with A's).
to 7 pause; sleep 1
mkfifo "$work/ina"
GSHARE_OWN_GIB=8 GSHARE_OWN_SETTLE_S=3 hooked "$A" "$PY" "$here/spill_owner.py" <"$work/ina" >"$work/a.out" 2>"$work/a.err" &
ap=$!
exec 8>"$work/ina"
# The take-backs the agent logged before A's 8 GiB (its context's first).
for _ in $(seq 1200); do grep -q ctx_ms "$work/a.out" && break; kill -0 $ap 2>/dev/null || break; sleep 0.1; done
n0=$(settled)
for _ in $(seq 1200); do grep -q '"steps"' "$work/a.out" && break; kill -0 $ap 2>/dev/null || break; sleep 0.1; done
alloc_ms=$(grep alloc_ms "$work/a.out" | js 'd["alloc_ms"]')
phases_1=$(phases "$n0" "")
echo "A's reclaim by phase: $phases_1"
a_spilled=$(tail -n 1 "$work/a.out" | js 'sorted(d["steps"])[len(d["steps"]) // 2]')
[[ $(tail -n 1 "$work/a.out" | js 'd["ok"]') == True ]] && ok "A's 8 GiB hold their values" || bad "A's data"
spilled=$(gpu chunks_spilled)
echo "A: 8 GiB in ${alloc_ms} ms; step ${a_spilled} ms (alone ${a_alone}); chunks spilled ${spilled}"
# A's 8 GiB came from chunks B borrowed from A (spilled) and from chunks B
# gave back without moving them (PyTorch's cache: none here, B paused).
[[ $spilled -ge 100 ]] && ok "B's data spilled: $spilled chunks" || bad "spilled $spilled chunks"
to 7 go
steps 10 || bad "B does not step while spilled"
b_spilled=$(med 10 <"$work/b.out")
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold while spilled" || bad "B: $bad_steps steps with a bad checksum"

# A exits: B's data comes back to the GPU.
t0=$(date +%s.%N)
to 8 quit; wait $ap
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
back_s=$("$PY" -c "import time; print(round($(date +%s.%N) - $t0, 2))")
[[ $(gpu chunks_spilled) == 0 ]] && ok "B back on the GPU ${back_s} s after A exited" || bad "still spilled: $(gpu chunks_spilled)"
steps 10 || bad "B does not step after"
b_after=$(med 10 <"$work/b.out")
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold after moving back" || bad "B: $bad_steps bad steps"
# Again, now that the borrower has mapped host memory once (the first
# batch in a process costs more, see docs/burst.md).
to 7 pause; sleep 1
# Its context's reclaim is over 3 s before its 8 GiB (GSHARE_OWN_SETTLE_S).
(for _ in $(seq 1200); do grep -q ctx_ms "$work/a2.out" 2>/dev/null && break; sleep 0.1; done; settled) >"$work/n2" &
GSHARE_OWN_GIB=8 GSHARE_OWN_SETTLE_S=3 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" </dev/null >"$work/a2.out" 2>"$work/a2.err"
wait $!; n2=$(cat "$work/n2")
alloc2_ms=$(grep alloc_ms "$work/a2.out" | js 'd["alloc_ms"]')
phases_2=$(phases "$n2" _again)
echo "A again: 8 GiB in ${alloc2_ms} ms"
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
to 7 go
steps 5 || bad "B does not step after the second reclaim"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold after a second spill and return" || bad "B: $bad_steps bad steps"

# ---- kill -9 of the agent while B's data is spilled
chunks0=$(gpu chunks_total)
to 7 pause; sleep 1
mkfifo "$work/ina3"
GSHARE_OWN_GIB=8 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" <"$work/ina3" >"$work/a3.out" 2>"$work/a3.err" &
ap=$!
exec 8>"$work/ina3"
for _ in $(seq 1200); do grep -q '"steps"' "$work/a3.out" && break; kill -0 $ap 2>/dev/null || break; sleep 0.1; done
spilled_k=$(gpu chunks_spilled); owed_k=$(gpu chunks_owed)
[[ $spilled_k -ge 100 ]] && ok "before the kill: $spilled_k chunks spilled" || bad "before the kill: $spilled_k spilled"
kill -9 $agent; wait $agent 2>/dev/null
t0=$(date +%s.%N)
start_agent
# B's mover notices the dead agent within a second and reclaims.
# The restarted agent may make chunks the old one had not re-created yet
# (its log: "N can be made now") and lend them to B at once, which moves
# as many spilled chunks back (as the agent does without a restart): the
# spilled count may then drop below spilled_k by those, and B may owe A
# those of them that were A's idle chunks, no more.
seen=0
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == "$spilled_k" ]] && { seen=1; break; }; sleep 0.1; done
restart_s=$("$PY" -c "import time; print(round($(date +%s.%N) - $t0, 2))")
sp=$(gpu chunks_spilled); ow=$(gpu chunks_owed)
echo "kill while spilled: before $spilled_k spilled, $owed_k owed; after the restart $sp spilled, $ow owed (saw $spilled_k: $seen)"
[[ $seen == 1 && $sp -le $spilled_k && $ow -le $((owed_k + spilled_k - sp)) ]] &&
  ok "after kill -9 and a restart ($restart_s s): $spilled_k chunks charged as spilled ($((spilled_k - sp)) moved back since), $ow owed" ||
  bad "after the restart: $sp spilled (before $spilled_k, seen $seen), $ow owed (before $owed_k)"
[[ $(tail -n 1 "$work/a3.out" | js 'd["ok"]') == True ]] && ok "A's 8 GiB hold their values" || bad "A's data (3)"
to 7 go
steps 5 || bad "B does not step after the restart"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold across the restart" || bad "B: $bad_steps bad steps after the restart"
to 8 quit; wait $ap
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
[[ $(gpu chunks_spilled) == 0 ]] && ok "B back on the GPU after the restart" || bad "still spilled: $(gpu chunks_spilled)"

# ---- kill -9 in the middle of a move: as soon as the agent shows one
to 7 pause; sleep 1
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
a4=$(grep alloc_ms "$work/a4.out")
if [[ $a4 != *alloc_ms* ]]; then
  # Its request met the agent's death: the owner asks again.
  GSHARE_OWN_GIB=8 GSHARE_STEPS=1 hooked "$A" "$PY" "$here/spill_owner.py" </dev/null >"$work/a4.out" 2>"$work/a4.err"
fi
[[ $(tail -n 1 "$work/a4.out" | js 'd["ok"]') == True ]] &&
  ok "mid-move kill (hit $midmove): the owner gets its 8 GiB after the restart" || bad "mid-move: the owner's 8 GiB"
for _ in $(seq 600); do [[ $(gpu chunks_spilled) == 0 && $(gpu chunks_moving) == 0 ]] && break; sleep 0.1; done
kill -0 $bp 2>/dev/null || bad "B (pid $bp) died after the mid-move restart: $(tail -n 1 "$work/b.err")"
[[ $(gpu chunks_spilled) == 0 ]] && ok "mid-move: B back on the GPU once the owner is gone" ||
  bad "mid-move: still spilled $(gpu chunks_spilled)"
to 7 go
steps 5 || bad "B does not step after the mid-move restart"
bad_steps=$(grep -c '"ok": false' "$work/b.out")
[[ $bad_steps == 0 ]] && ok "B's checksums hold across the mid-move restart" || bad "B: $bad_steps bad steps (mid-move)"
to 7 quit; wait $bp
for _ in $(seq 600); do [[ $(gpu chunks_owed) == 0 && $(gpu chunks_spilled) == 0 ]] && break; sleep 0.1; done
lost=$(( chunks0 - $(gpu chunks_total) ))
[[ $lost == 0 && $(gpu chunks_spilled) == 0 && $(gpu chunks_owed) == 0 ]] && ok "no chunk lost: $(gpu chunks_total) in the pool" ||
  bad "after the restarts: pool $(gpu chunks_total) (was $chunks0), spilled $(gpu chunks_spilled), owed $(gpu chunks_owed)"
echo "B step: ${b_base} ms on the GPU, ${b_spilled} ms spilled, ${b_after} ms back"
echo "moved out $(gpu chunks_moved_out), back $(gpu chunks_moved_back)"
R() { "$PY" -c "print(round($1, 4))"; }
echo "RESULT reclaim_ms_8GiB=$alloc_ms reclaim_ms_8GiB_again=$alloc2_ms $phases_1 $phases_2 spill_GBps=$(R "8 * 1.073741824 / ($alloc_ms / 1000)") borrower_step_ratio_spilled=$(R "$b_spilled / $b_base") owner_step_ratio=$(R "$a_spilled / $a_alone") back_s=$back_s kill_spilled_chunks=$spilled_k restart_s=$restart_s midmove_hit=$midmove chunks_lost=$lost failures=$fail"
exit $((fail > 0))
