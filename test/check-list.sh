#!/usr/bin/env bash
# check-list.sh — test/tests.list names every test file and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
entries=$(awk '{ sub(/#.*/, "") } NF { print $1 }' test/tests.list | sort)
dups=$(uniq -d <<<"$entries")
listed=$(sed -e 's/:.*//' <<<"$entries" | sort -u)
found=$(find test -name 'check_*.c' -printf 'check_%f\n' | sed -e 's/^check_check_/check_/' -e 's/\.c$//'
        find test -name 'test_*.py' -o -name 'test_*.sh' -o -name '*-test.sh' | grep -v '^test/gpu/')
found=$(sort <<<"$found")
bad=0
if [[ -n $dups ]]; then echo "tests.list: listed twice: $dups" >&2; bad=1; fi
while read -r t; do
  [[ -n $t ]] && { echo "tests.list: $t exists but is not listed" >&2; bad=1; }
done < <(comm -13 <(sort -u <<<"$listed") <(sort -u <<<"$found"))
while read -r t; do
  [[ -n $t ]] && { echo "tests.list: $t is listed but has no file" >&2; bad=1; }
done < <(comm -23 <(sort -u <<<"$listed") <(sort -u <<<"$found"))
# A test split into cases: each case it knows is listed, every listed case
# exists, and the test is not also listed whole.  A script's cases are what
# SCRIPT --list prints; a check suite's, the tcase_create names of its source.
for f in $(grep ':' <<<"$entries" | sed -e 's/:.*//' | sort -u); do
  if grep -qx "$f" <<<"$entries"; then echo "tests.list: $f is listed whole and by case" >&2; bad=1; fi
  if [[ $f == check_* ]]; then
    known=$(grep -ho 'tcase_create("[^"]*")' $(find test -name "$f.c") | sed -e 's/tcase_create("//' -e 's/")//' | sort -u)
  else
    known=$("${PYTHON:-/usr/bin/python3}" "$f" --list | sort) || { echo "tests.list: $f --list failed" >&2; bad=1; continue; }
  fi
  mine=$(grep "^$f:" <<<"$entries" | sed -e 's/^[^:]*://' | sort)
  while read -r c; do
    [[ -n $c ]] && { echo "tests.list: $f has case $c, not listed" >&2; bad=1; }
  done < <(comm -23 <(echo "$known") <(echo "$mine"))
  while read -r c; do
    [[ -n $c ]] && { echo "tests.list: $f:$c is listed, the script has no such case" >&2; bad=1; }
  done < <(comm -13 <(echo "$known") <(echo "$mine"))
done
exit $bad
