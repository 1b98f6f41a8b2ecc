#!/usr/bin/env bash
# Runs each test given on the command line (check binaries, shell scripts,
# Python scripts) and prints one closing line "tests: N passed, N failed".
# Exits non-zero if any test failed.  B (build dir) and PYTHON come from make.
set -u
: "${B:=build}" "${PYTHON:=/usr/bin/python3}"
export B PYTHON
export CK_FORK=yes
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
