#!/usr/bin/env bash
# Runs tests and prints one closing line "tests: N passed, N failed,
# N skipped".  Exits non-zero if any test failed.
#
#   test/run-tests.sh                 every entry of test/tests.list (this build's)
#   test/run-tests.sh ENTRY...        those entries: check_NAME (or
#                                     $B/test/check_NAME), a script's path, or
#                                     SCRIPT:CASE for one case of a script
#
# B (build dir), PYTHON and SANITIZE come from make.  GS_TEST_JOBS (default:
# twice the CPUs, at least 2) entries run at once: most of a test's time is
# waiting for processes it started, not computing.  An entry marked
# "serial" in tests.list runs alone.  Each entry runs in a session of its
# own with its output in $B/test-logs/ENTRY.log, printed whole when it ends;
# past its time limit ("limit=SECONDS" in tests.list, default 300; twice that
# under a sanitizer, and under valgrind) its whole process group is killed
# and it fails.  The slowest entries of the last run ($B/test-logs/times)
# start first.
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
here=$(cd "$(dirname "$0")" && pwd)
: "${B:=build}" "${PYTHON:=/usr/bin/python3}"
export B PYTHON
export CK_FORK=yes
# check's own limit per test, where a suite sets none (its default is 4 s):
# a limit that only catches a hang, never a slow machine (a sanitizer build
# on two busy cores).
export CK_DEFAULT_TIMEOUT=${CK_DEFAULT_TIMEOUT:-60}
list="$here/tests.list"
logs="$B/test-logs"
mkdir -p "$logs"

# tests.list: one entry a line, "NAME[:CASE] [plain] [notsan] [serial] [limit=S]".
declare -A limit_of=() serial_of=() plain_of=() notsan_of=()
while read -r name rest; do
  limit_of[$name]=300
  for w in $rest; do
    case $w in
      plain) plain_of[$name]=1 ;;
      notsan) notsan_of[$name]=1 ;;
      serial) serial_of[$name]=1 ;;
      limit=*) limit_of[$name]=${w#limit=} ;;
      *) echo "run-tests: tests.list: $name: unknown word '$w'" >&2; exit 2 ;;
    esac
  done
done < <(sed -e 's/#.*//' "$list" | awk 'NF')

entries=()
if [[ $# -eq 0 ]]; then
  while read -r name _; do
    [[ -n ${SANITIZE:-} && -n ${plain_of[$name]:-} ]] && continue
    if [[ ${SANITIZE:-} == tsan && -n ${notsan_of[$name]:-} ]]; then
      echo "run-tests: $name: not in the TSan pass (tests.list says why)" >&2
      continue
    fi
    entries+=("$name")
  done < <(sed -e 's/#.*//' "$list" | awk 'NF')
else
  for t in "$@"; do entries+=("${t#"$B"/test/}"); done
fi

if [[ ${SANITIZE:-} == tsan ]]; then
  # Every test's processes (check suites, the agent and plugin the Python
  # tests start, hooked programs) read the suppressions for the gRPC/Abseil
  # libraries Debian ships uninstrumented; test/tsan.supp says why each is
  # there.  A report makes its process exit 66; the tests check every exit
  # status they can (check suites, hooked programs, agent and plugin stop).
  export TSAN_OPTIONS="suppressions=$here/tsan.supp second_deadlock_stack=1 allocator_may_return_null=1 ${TSAN_OPTIONS:-}"
  # Check suites' per-test limits, for code 5-15x slower under TSan.
  export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4}
  # The randomized allocator test is single-threaded (TSan has nothing to
  # check there) and 10x slower under it: 1e6 operations take about 160 s.
  if [[ -z ${GS_RANDOM_OPS:-} && " ${entries[*]} " == *check_alloc_random* ]]; then
    export GS_RANDOM_OPS=100000
    echo "run-tests: TSan: check_alloc_random runs 1e5 operations (single-threaded; the 1e6 run is in make test)"
  fi
fi
# Check suites' per-test limits under valgrind, for code 10-30x slower.
[[ ${VALGRIND:-0} == 1 ]] && export CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-4}
if [[ ${VALGRIND:-0} == 1 && -z ${GS_RANDOM_OPS:-} && " ${entries[*]} " == *check_alloc_random* ]]; then
  # Valgrind is about 30x slower on this single-threaded test.
  export GS_RANDOM_OPS=50000
  echo "run-tests: valgrind: check_alloc_random runs 5e4 operations (the 1e6 run is in make test)"
fi
slow=1
[[ -n ${SANITIZE:-} || ${VALGRIND:-0} == 1 ]] && slow=2

# The slowest of the last run first: the run ends when its longest entry does.
declare -A last_ms=()
if [[ -f $logs/times ]]; then
  while read -r ms name; do last_ms[$name]=$ms; done < "$logs/times"
fi
mapfile -t entries < <(for e in "${entries[@]}"; do echo "${last_ms[$e]:-999999999} $e"; done |
                       sort -s -k1,1nr | cut -d' ' -f2-)

jobs=${GS_TEST_JOBS:-$(( $(nproc) * 2 ))}
(( jobs < 1 )) && jobs=1

command_of() {  # ENTRY -> the command line, in cmd=()
  local file=${1%%:*} case=
  [[ $1 == *:* ]] && case=${1#*:}
  case $file in
    *.py) cmd=("$PYTHON" "$file") ;;
    *.sh) cmd=(bash "$file") ;;
    *) file=$B/test/$file
       if [[ ${VALGRIND:-0} == 1 ]]; then
         cmd=(valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite "$file")
       else cmd=("$file"); fi ;;
  esac
  # A script takes its case as an argument; a check suite by check's own
  # CK_RUN_CASE.
  if [[ -n $case ]]; then
    case $file in *.py|*.sh) cmd+=("$case") ;; *) cmd=(env "CK_RUN_CASE=$case" "${cmd[@]}") ;; esac
  fi
  return 0
}

logname() { local n=${1//\//_}; echo "$logs/${n//:/__}.log"; }

declare -A pid_entry=() start_of=()
running=0 pass=0 fail=0 skip=0; failed=(); skipped=(); times=()

start() {  # ENTRY
  local e=$1 lim=$(( ${limit_of[$1]:-300} * slow ))
  command_of "$e"
  # A session of its own, so that a hang's whole tree is killed at the limit.
  setsid timeout -k 10 "$lim" "${cmd[@]}" > "$(logname "$e")" 2>&1 < /dev/null &
  pid_entry[$!]=$e
  start_of[$e]=$(date +%s%N)
  running=$((running + 1))
}

reap() {  # waits for one entry to end and reports it
  local pid rc e ms
  wait -n -p pid
  rc=$?
  e=${pid_entry[$pid]}
  unset "pid_entry[$pid]"
  running=$((running - 1))
  ms=$(( ($(date +%s%N) - ${start_of[$e]}) / 1000000 ))
  times+=("$ms $e")
  echo "=== $e"
  cat "$(logname "$e")"
  if [[ $rc -eq 0 ]]; then
    pass=$((pass + 1))
    echo "=== $e: ok ($ms ms)"
  elif [[ $rc -eq 77 && ${GS_NO_SKIP:-0} != 1 ]]; then
    skip=$((skip + 1)); skipped+=("$e")
    echo "=== $e: SKIPPED, in part or whole (exit 77, $ms ms)"
  else
    fail=$((fail + 1)); failed+=("$e")
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
      echo "=== $e: FAILED (killed at its limit of $(( ${limit_of[$e]:-300} * slow )) s)"
      pkill -KILL -s "$pid" 2>/dev/null
    else
      echo "=== $e: FAILED (exit $rc)"
    fi
  fi
}

t0=$(date +%s)
echo "run-tests: ${#entries[@]} entries, $jobs at once"
for e in "${entries[@]}"; do
  if [[ -n ${serial_of[$e]:-} ]]; then
    while (( running > 0 )); do reap; done
    start "$e"; reap
    continue
  fi
  while (( running >= jobs )); do reap; done
  start "$e"
done
while (( running > 0 )); do reap; done
for t in "${times[@]}"; do last_ms[${t#* }]=${t%% *}; done
for e in "${!last_ms[@]}"; do echo "${last_ms[$e]} $e"; done > "$logs/times.new" && mv "$logs/times.new" "$logs/times"
[[ $skip -gt 0 ]] && printf 'skipped: %s\n' "${skipped[*]}"
[[ $fail -gt 0 ]] && printf 'failed: %s\n' "${failed[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped ($(( $(date +%s) - t0 )) s)"
[[ $fail -eq 0 ]]
