#!/usr/bin/env bash
# check-list.sh — test/tests.list names every test file and nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
listed=$(awk '{ sub(/#.*/, "") } NF { print $1 }' test/tests.list | sort)
dups=$(uniq -d <<<"$listed")
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
exit $bad
