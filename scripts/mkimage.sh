#!/usr/bin/env bash
# mkimage.sh BASE_DIR ROOTFS_DIR — the Debian 12 root filesystem under the
# gshare image, copied to ROOTFS_DIR (`make image` then adds gshare's files
# there with `make install` and writes the OCI archive with
# scripts/oci-image.py).
#
# mmdebstrap builds a minbase bookworm with the packages of
# scripts/image-packages from this machine's own apt sources (or the
# sources file named by GSHARE_APT_SOURCES), so no registry is needed, only a
# Debian mirror.  The result is kept in BASE_DIR while the package list is
# unchanged (BASE_DIR.key), since it is the slow step (about 25 s).
#
# The image never crosses a mount point: mmdebstrap mounts /proc (and more)
# inside its target and its own unmount fails when anything looks into the
# tree at that moment; a /proc left there and copied takes kcore along (79 GB
# on one machine, until the disk was full).  So what it leaves mounted is
# unmounted here (lazily if busy), every copy and removal stays on the
# tree's own file system, and a BASE_DIR or ROOTFS_DIR with anything mounted
# under it is refused, naming the mount.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:?usage: mkimage.sh BASE_DIR ROOTFS_DIR}
rootfs=${2:?usage: mkimage.sh BASE_DIR ROOTFS_DIR}

# The mount points strictly under $1, deepest first (/proc/self/mountinfo's
# fifth field, its octal escapes decoded).
mounts_under() {
  local dir mp
  dir=$(realpath -m -- "$1")
  while read -r _ _ _ _ mp _; do
    printf -v mp '%b' "$mp"
    if [[ $mp == "$dir"/* ]]; then printf '%s\n' "$mp"; fi
  done </proc/self/mountinfo | sort -r
}

# Unmounts everything under $1: tried for about a second (a process looking
# into the tree makes a mount busy for a moment), then detached lazily (gone
# from the tree at once, the file system itself when its last user leaves).
unmount_under() {
  local m left i
  for ((i = 0; i < 10; i++)); do
    left=$(mounts_under "$1")
    [[ -n $left ]] || return 0
    while IFS= read -r m; do umount -- "$m" 2>/dev/null || true; done <<<"$left"
    [[ -n $(mounts_under "$1") ]] || return 0
    sleep 0.1
  done
  while IFS= read -r m; do
    echo "mkimage: $m is busy: detaching it (umount -l)" >&2
    umount -l -- "$m" 2>/dev/null || true
  done <<<"$(mounts_under "$1")"
  left=$(mounts_under "$1")
  [[ -z $left ]] || { echo "mkimage: cannot unmount ${left//$'\n'/, } under $1" >&2; return 1; }
}

refuse_mounted() {
  local left
  left=$(mounts_under "$1")
  [[ -n $left ]] || return 0
  echo "mkimage: $1 has a file system mounted under it: ${left//$'\n'/, }; the image must not" \
       "include it: unmount it (umount -R PATH) and run again" >&2
  exit 1
}

pkgs=$(sed -e 's/#.*//' scripts/image-packages | xargs)
key="bookworm minbase $pkgs"
if [[ -f $base.key && $(cat "$base.key") == "$key" ]]; then
  echo "mkimage: $base is current ($key)"
else
  command -v mmdebstrap >/dev/null || { echo "mkimage: mmdebstrap is missing: run make deps" >&2; exit 1; }
  src=${GSHARE_APT_SOURCES:-}
  if [[ -z $src ]]; then
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
      if [[ -s $f ]] && grep -q bookworm "$f"; then src=$f; break; fi
    done
  fi
  [[ -n $src ]] || { echo "mkimage: no bookworm apt sources found; set GSHARE_APT_SOURCES to a sources file" >&2; exit 1; }
  # What an earlier, interrupted run left mounted in its target goes first;
  # a mount under the finished base is someone else's: refused.
  unmount_under "$base.tmp"
  refuse_mounted "$base"
  rm -rf --one-file-system "$base" "$base.tmp" "$base.key"
  mkdir -p "$(dirname "$base")"
  echo "mkimage: mmdebstrap bookworm minbase + $pkgs (sources $src)"
  trap 'unmount_under "$base.tmp" || true' EXIT
  # Documentation, manuals and locales are left out, as in debian:12-slim.
  mmdebstrap --quiet --variant=minbase --include="${pkgs// /,}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --aptopt='Acquire::Languages "none"' \
    bookworm "$base.tmp" "$src"
  unmount_under "$base.tmp"
  trap - EXIT
  mv "$base.tmp" "$base"
  printf '%s\n' "$key" > "$base.key"
fi
refuse_mounted "$base"
refuse_mounted "$rootfs"
rm -rf --one-file-system "$rootfs"
cp -a --one-file-system "$base" "$rootfs"
