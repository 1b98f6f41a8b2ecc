#!/usr/bin/env bash
# Runs each test given on the command line (check binaries, shell scripts,
# Python scripts) and prints one closing line "tests: N passed, N failed".
# Exits non-zero if any test failed.  B (build dir), PYTHON and SANITIZE come
# from make.
set -u
: "${B:=build}" "${PYTHON:=/usr/bin/python3}"
export B PYTHON
export CK_FORK=yes
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
pass=0; fail=0; failed=()
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
  if "${cmd[@]}"; then
    pass=$((pass + 1))
    echo "=== $name: ok ($(( ($(date +%s%N) - start) / 1000000 )) ms)"
  else
    rc=$?
    fail=$((fail + 1)); failed+=("$name")
    echo "=== $name: FAILED (exit $rc)"
  fi
done
[[ $fail -gt 0 ]] && printf 'failed: %s\n' "${failed[*]}"
echo "tests: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
