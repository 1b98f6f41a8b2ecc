#!/usr/bin/env bash
# Tests of libgshare.so: its exported symbols and dependencies, fail-closed
# behaviour without an agent, dlsym/cuGetProcAddress interposition, and the
# memory path against test/hook/mock_agent on the fake driver.
set -u
B=${B:-build}
HOOK=$PWD/$B/libgshare.so
CLIENT=$B/test/hook_client
MOCK=$B/test/mock_agent
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

tmp=$(mktemp -d /tmp/gshare-hook-test.XXXXXX)
mock_pid=
cleanup() { [[ -n $mock_pid ]] && kill "$mock_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# An ASan-built library preloaded into a program needs the ASan runtime
# loaded first.  Under TSan, hook_client and mock_agent are TSan-built
# themselves (libtsan is their DT_NEEDED and initialises before the hook), so
# the hook's 8-thread test runs with both sides instrumented; a TSan report
# makes hook_client exit 66, which fails the scenario.
PRELOAD=$HOOK
if [[ ${SANITIZE:-} == asan ]]; then
  PRELOAD="$(gcc -print-file-name=libasan.so) $HOOK"
fi
# A process that allocated has the hook's thread, so the fork scenario's
# child starts its own after a multi-threaded fork, which glibc allows and
# TSan refuses by default.
if [[ ${SANITIZE:-} == tsan ]]; then
  export TSAN_OPTIONS="${TSAN_OPTIONS:-} die_after_fork=0"
fi
export GSHARE_FAKECUDA_STATE=$tmp/fakecuda-state GSHARE_FAKECUDA_MEM=1Gi GSHARE_FAKECUDA_DEVICES=1

# 1. Exported symbols == the version script's list; DT_NEEDED == libc only.
want=$(sed -n '/global:/,/local:/p' hook/libgshare.lds | tr ' ;' '\n\n' | grep -E '^(cu|nvml|dlsym)' | sort)
got=$(nm -D --defined-only "$HOOK" | awk '{print $3}' | sed 's/@.*//' | sort)
if [[ "$want" == "$got" ]]; then ok "exported symbols"; else bad "exported symbols differ:"; diff <(echo "$want") <(echo "$got"); fi
for s in cuInit cuMemAlloc_v2 cuMemFree_v2 cuMemGetInfo_v2 cuGetProcAddress_v2 cuMemCreate cuMemRelease dlsym; do
  grep -qx "$s" <<<"$got" || bad "$s not exported"
done
needed=$(readelf -d "$HOOK" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -Ev '^lib(asan|ubsan|tsan)\.so' | tr '\n' ' ')
if [[ "$needed" == "libc.so.6 " ]]; then ok "DT_NEEDED libc only"; else bad "DT_NEEDED: $needed"; fi

run_client() { # scenario, stderr file
  LD_PRELOAD="$PRELOAD" timeout 60 "$CLIENT" "$1" 2>"$2"
}

# 2. Fail closed: no agent, and none will come (the socket's directory is
# gone: the allocation was deleted): at once, no waiting.
GSHARE_AGENT_WAIT=600 GSHARE_SOCKET=$tmp/no-such-dir/agent.sock run_client failclosed "$tmp/err"
rc=$?
lines=$(grep -c '^gshare:' "$tmp/err")
if [[ $rc == 0 && $lines == 1 ]] && grep -q "cannot reach the gshare agent at $tmp/no-such-dir/agent.sock (No such file or directory: its directory is gone" "$tmp/err"; then
  ok "fail closed"
else
  bad "fail closed (rc $rc, $lines gshare lines)"; cat "$tmp/err"
fi

# 3. dlsym / cuGetProcAddress interposition (no agent needed).
if GSHARE_SOCKET=$tmp/no-such-dir/none run_client lookup "$tmp/err"; then ok "lookups"; else bad "lookups"; cat "$tmp/err"; fi

# 4. Against the mock agent: quota 3 chunks of 2 MiB.
start_mock() { # nchunks [spill|qos=W]
  [[ -n $mock_pid ]] && { kill "$mock_pid"; wait "$mock_pid" 2>/dev/null; }
  rm -f "$tmp/agent.sock"
  "$MOCK" "$tmp/agent.sock" "$1" 256 ${2:-} &
  mock_pid=$!
  for _ in $(seq 100); do [[ -S $tmp/agent.sock ]] && return 0; sleep 0.05; done
  bad "mock agent did not start"; return 1
}
export GSHARE_SOCKET=$tmp/agent.sock
start_mock 3
for sc in roundtrip meminfo release fork; do
  if run_client $sc "$tmp/err" && ! grep -q '^gshare:' "$tmp/err"; then ok "$sc"; else bad "$sc"; cat "$tmp/err"; fi
done
start_mock 64
if run_client threads "$tmp/err"; then ok "threads"; else bad "threads"; cat "$tmp/err"; fi
run_client unsupported "$tmp/err"
rc=$?
if [[ $rc == 0 && $(grep -c '^gshare:' "$tmp/err") == 1 ]]; then ok "unsupported calls fail closed"; else bad "unsupported (rc $rc)"; cat "$tmp/err"; fi

# 5. Moves (GS_FEAT_SPILL, issue 22): the process's mover gives its chunks
# to host memory when the agent asks (SIGUSR1 to the mock), and takes them
# back (SIGUSR2); the client checks its data at each step.
start_mock 3 spill
LD_PRELOAD="$PRELOAD" timeout 60 "$CLIENT" spill >"$tmp/out" 2>"$tmp/err" &
cpid=$!
wait_line() { # line: waits (20 s at most) until the client printed it
  for _ in $(seq 400); do
    grep -qx "$1" "$tmp/out" && return 0
    kill -0 "$cpid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
wait_line ready && kill -USR1 "$mock_pid"
wait_line host && kill -USR2 "$mock_pid"
wait "$cpid"
rc=$?
if [[ $rc == 0 ]] && ! grep -q '^gshare:' "$tmp/err"; then ok "spill"; else bad "spill (rc $rc)"; cat "$tmp/out" "$tmp/err"; fi

# 6. A process started while the agent is away (a restart: the socket's
# directory is there, no socket) waits for it, then registers (issue 28).
kill "$mock_pid"; wait "$mock_pid" 2>/dev/null; mock_pid=
rm -f "$tmp/agent.sock"
GSHARE_AGENT_WAIT=60 LD_PRELOAD="$PRELOAD" timeout 60 "$CLIENT" roundtrip >"$tmp/out" 2>"$tmp/err" &
cpid=$!
for _ in $(seq 400); do grep -q 'waiting up to 60000 ms' "$tmp/err" && break; sleep 0.05; done
grep -q 'waiting up to 60000 ms' "$tmp/err" || bad "late start: no line saying the process waits"
start_mock 3
wait "$cpid"
rc=$?
if [[ $rc == 0 && $(grep -c '^gshare:' "$tmp/err") == 1 ]]; then ok "late start: waits for the agent, then works"; else bad "late start (rc $rc)"; cat "$tmp/err"; fi

# 7. The agent goes away for longer than GSHARE_AGENT_WAIT: memory calls
# fail closed with one line, each after one try.
kill "$mock_pid"; wait "$mock_pid" 2>/dev/null; mock_pid=
rm -f "$tmp/agent.sock"
if GSHARE_AGENT_WAIT=0.2 run_client failclosed "$tmp/err" && [[ $(grep -c '^gshare:' "$tmp/err") == 1 ]] &&
   grep -q 'waiting up to 200 ms' "$tmp/err"; then ok "agent gone"; else bad "agent gone"; cat "$tmp/err"; fi

# 8. Compute QoS's weight (GS_OP_QOS's ret4, docs/compute.md): what the
# agent sends, within 1..100, is the hook's weight; anything else (an
# older agent's 0, a bad 1000 or 2^64-1) leaves the default 10 and nothing
# breaks.
for pair in 30:30 1:1 100:100 0:10 1000:10 0xffffffffffffffff:10; do
  send=${pair%%:*} want=${pair##*:}
  start_mock 3 "qos=$send" || continue
  # The last round's err goes first: the client's shell truncates it only
  # when it runs, and the wait below must not find the last round's line.
  rm -f "$tmp/in" "$tmp/err"; mkfifo "$tmp/in"
  GSHARE_HOOK_DEBUG=1 LD_PRELOAD="$PRELOAD" timeout 150 "$CLIENT" stay <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
  cpid=$!
  exec 4>"$tmp/in"
  t0=$SECONDS
  # The hook's thread asks once the process registered (a deadline that
  # only catches a hang: a loaded machine's ASan run once took over 20 s).
  for _ in $(seq 2400); do grep -q 'compute: class' "$tmp/err" 2>/dev/null && break; sleep 0.05; done
  waited=$((SECONDS - t0))
  exec 4>&-
  wait "$cpid"
  rc=$?
  if [[ $rc == 0 ]] && grep -q "compute: class 0, cap 0, weight $want, slot -1" "$tmp/err"; then
    ok "weight $send from the agent: the hook's is $want"
  else
    bad "weight $send from the agent (rc $rc, waited ${waited} s)"; cat "$tmp/out" "$tmp/err"
  fi
done

# 9. A latency-critical process's tracking (docs/compute.md "Nobody to
# hold"): with an agent that never writes the board's idle_until_ns (an
# older one), each launch is tracked (an event recorded after it), as
# before the field; with one that renews it, none is (the rounds go on
# until one shows it: the first launch after the hook maps the board).
for mode in old idle; do
  start_mock 3 "lc=$mode" || continue
  rm -f "$tmp/in" "$tmp/err" "$tmp/out"; mkfifo "$tmp/in"
  GSHARE_HOOK_DEBUG=1 LD_PRELOAD="$PRELOAD" timeout 150 "$CLIENT" lclaunch <"$tmp/in" >"$tmp/out" 2>"$tmp/err" &
  cpid=$!
  exec 4>"$tmp/in"
  for _ in $(seq 2400); do grep -q 'compute: class 1' "$tmp/err" 2>/dev/null && break; sleep 0.05; done
  last=
  for round in $(seq 50); do
    echo go >&4
    for _ in $(seq 2400); do [[ $(grep -c '^records' "$tmp/out" 2>/dev/null) -ge $round ]] && break; sleep 0.05; done
    last=$(grep '^records' "$tmp/out" | tail -n 1)
    [[ $mode == old || $last == "records 0" ]] && break
  done
  exec 4>&-
  wait "$cpid"
  rc=$?
  if [[ $mode == old ]]; then want="records 20"; else want="records 0"; fi
  if [[ $rc == 0 && $last == "$want" ]]; then
    ok "latency-critical, agent lc=$mode: $last in a round of 20 launches"
  else
    bad "latency-critical, agent lc=$mode: '$last' (rc $rc), want '$want'"; cat "$tmp/out" "$tmp/err"
  fi
done
kill "$mock_pid"; wait "$mock_pid" 2>/dev/null; mock_pid=

exit $fail
