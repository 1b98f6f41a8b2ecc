#!/usr/bin/env bash
# Runs each test given on the command line (check binaries, shell scripts,
# Python scripts) and prints one closing line
# "tests: N passed, N failed, N skipped".  Exits non-zero if any test failed.
# B (build dir), PYTHON and SANITIZE come from make.
#
# A test's exit status: 0 passed; 77 skipped (Automake's convention); any
# other failed.  A test exits 77 only for what this machine lacks and make
# cannot build (not root, a tool not installed), after running everything
# else it can; the skipped tests are named after the summary.  A build
# product a test needs (a program, the hook, the fake driver) is never a
# skip: make test builds them all, and a test that finds one missing fails
# ("missing ...: run make first").  So under make test a skip never hides a
# part that was not built.  GS_NO_SKIP=1 counts a skip as a failure, for a
# run that must prove every part ran.
#
# No test depends on how fast the machine is: tests wait for the event they
# expect with a deadline of seconds that only catches a hang, and print the
# time they measured as "info"; timing targets are benchmarks (make bench).
set -u
: "${B:=build}" "${PYTHON:=/usr/bin/python3}"
export B PYTHON
export CK_FORK=yes
# check's own limit per test, where a suite sets none (its default is 4 s):
# a limit that only catches a hang, never a slow machine (a sanitizer build
# on two busy cores).
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60}
if [[ ${SANITIZE:-} == tsan ]]; then
  # Every test's processes (check suites, the agent and plugin the Python
  # tests start, hooked programs) read the suppressions for the gRPC/Abseil
  # libraries Debian ships uninstrumented; test/tsan.supp says why each is
  # there.  A report makes its process exit 66; the tests check every exit
  # status they can (check suites, hooked programs, agent and plugin stop).
  supp="$(cd "$(dirname "$0")" && pwd)/tsan.supp"
  export TSAN_OPTIONS="suppressions=$supp second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
  # The randomized allocator test is single-threaded (TSan has nothing to
  # check there) and 10x slower under it: 1e6 operations take about 160 s.
  if [[ -z ${GS_RANDOM_OPS:-} && " $* " == *check_alloc_random* ]]; then
    export GS_RANDOM_OPS=100000
    echo "run-tests: TSan: check_alloc_random runs 1e5 operations (single-threaded; the 1e6 run is in make test)"
  fi
fi
if [[ ${VALGRIND:-0} == 1 && -z ${GS_RANDOM_OPS:-} && " $* " == *check_alloc_random* ]]; then
  # Valgrind is about 30x slower on this single-threaded test.
  export GS_RANDOM_OPS=50000
  echo "run-tests: valgrind: check_alloc_random runs 5e4 operations (the 1e6 run is in make test)"
fi
pass=0; fail=0; skip=0; failed=(); skipped=()
for t in "$@"; do
  name=${t#"$B"/}
  start=$(date +%s%N)
  case $t in
    *.py) cmd=("$PYTHON" "$t") ;;
    *.sh) cmd=(bash "$t") ;;
    *) if [[ ${VALGRIND:-0} == 1 ]]; then
         cmd=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$t")
       else cmd=("$t"); fi ;;
  esac
  echo "=== $name"
  "${cmd[@]}"
  rc=$?
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  if [[ $rc -eq 0 ]]; then
    pass=$((pass + 1))
    echo "=== $name: ok ($ms ms)"
  elif [[ $rc -eq 77 && ${GS_NO_SKIP:-0} != 1 ]]; then
    skip=$((skip + 1)); skipped+=("$name")
    echo "=== $name: SKIPPED, in part or whole (exit 77, $ms ms)"
  else
    fail=$((fail + 1)); failed+=("$name")
    echo "=== $name: FAILED (exit $rc)"
  fi
done
[[ $skip -gt 0 ]] && printf 'skipped: %s\n' "${skipped[*]}"
[[ $fail -gt 0 ]] && printf 'failed: %s\n' "${failed[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped"
[[ $fail -eq 0 ]]
