#!/usr/bin/env bash
# mkimage.sh BASE_DIR — the Debian 12 root filesystem under the gshare image
# (`make image` adds gshare's files with `make install` and writes the OCI
# archive with scripts/oci-image.py).
#
# mmdebstrap builds a minbase bookworm with the packages of
# scripts/image-packages from this machine's own apt sources (or the
# sources file named by GSHARE_APT_SOURCES), so no registry is needed, only a
# Debian mirror.  The result is kept while the package list is unchanged
# (BASE_DIR.key), since it is the slow step (about 25 s).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: mkimage.sh BASE_DIR}
pkgs=$(sed -e 's/#.*//' scripts/image-packages | xargs)
key="bookworm minbase $pkgs"
if [[ -f $base.key && $(cat "$base.key") == "$key" ]]; then
  echo "mkimage: $base is current ($key)"
  exit 0
fi
command -v mmdebstrap >/dev/null || { echo "mkimage: mmdebstrap is missing: run make deps" >&2; exit 1; }
src=${GSHARE_APT_SOURCES:-}
if [[ -z $src ]]; then
  for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
    if [[ -s $f ]] && grep -q bookworm "$f"; then src=$f; break; fi
  done
fi
[[ -n $src ]] || { echo "mkimage: no bookworm apt sources found; set GSHARE_APT_SOURCES to a sources file" >&2; exit 1; }
rm -rf "$base" "$base.tmp" "$base.key"
mkdir -p "$(dirname "$base")"
echo "mkimage: mmdebstrap bookworm minbase + $pkgs (sources $src)"
# Documentation, manuals and locales are left out, as in debian:12-slim.
mmdebstrap --quiet --variant=minbase --include="${pkgs// /,}" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --aptopt='Acquire::Languages "none"' \
  bookworm "$base.tmp" "$src"
mv "$base.tmp" "$base"
printf '%s\n' "$key" > "$base.key"
