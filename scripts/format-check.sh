#!/usr/bin/env bash
# format-check.sh [--fix] — the files of scripts/format-files.txt against
# clang-format's output for them (.clang-format).  Fails naming each file
# that differs, with the first lines of the difference; --fix rewrites
# them instead (make format).
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null; then
        echo "format-check: $CLANG_FORMAT not found (make deps installs Debian's clang-format)" >&2
        exit 1
fi
declare -A out=()
files=()
while read -r line; do
        line=${line%%#*}
        line=${line//[[:space:]]/}
        [[ -z $line ]] && continue
        if [[ $line == !* ]]; then
                out[${line#!}]=1
                continue
        fi
        matched=0
        for f in $line; do
                [[ -f $f ]] || continue
                files+=("$f")
                matched=1
        done
        if [[ $matched == 0 ]]; then
                echo "format-check: scripts/format-files.txt: '$line' names no file" >&2
                exit 1
        fi
done < scripts/format-files.txt
bad=0
n=0
for f in "${files[@]}"; do
        [[ -n ${out[$f]:-} ]] && continue
        n=$((n + 1))
        if [[ ${1:-} == --fix ]]; then
                "$CLANG_FORMAT" -i --style=file "$f"
        elif ! "$CLANG_FORMAT" --style=file "$f" | cmp -s "$f" -; then
                echo "format-check: $f differs from clang-format's output (make format rewrites it):" >&2
                "$CLANG_FORMAT" --style=file "$f" | diff -u "$f" - | sed -n '3,12p' >&2 || true
                bad=1
        fi
done
[[ $bad == 0 ]] && echo "format-check: $n files as clang-format writes them"
exit $bad
