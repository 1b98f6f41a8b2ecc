#!/usr/bin/env bash
# The image build never crosses a mount point (issue 28): mmdebstrap left
# the /proc it mounts in its target mounted, and copying that tree took
# /proc/kcore along until the disk was full.
#
# On a fake mmdebstrap (a small tree with a tmpfs at proc/, kept busy by a
# process whose working directory is there, like the real one's leftover):
#   - scripts/mkimage.sh unmounts it, and neither the base nor the image's
#     tree (ROOTFS) holds the mount or its files;
#   - a base with a file system mounted under it is refused, naming the
#     mount, and nothing is copied;
#   - an image tree with a mount under it is refused, naming it, and the
#     mounted files are left alone (not removed across the mount);
#   - scripts/oci-image.py refuses a tree with a mount under it, naming it.
# Needs root (mounts); runs in a private mount namespace, so nothing leaks.
set -uo pipefail
if [[ $(id -u) -ne 0 ]]; then echo "SKIP test_mkimage.sh: needs root (mounts)"; exit 77; fi
if [[ -z ${GS_MKIMAGE_NS:-} ]]; then
  GS_MKIMAGE_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-/usr/bin/python3}
fails=0
check() { # check "what" CMD...: ok/FAIL line
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
mounted_under() { grep -qF " $1/" /proc/self/mountinfo; }

tmp=$(mktemp -d /tmp/gshare-mkimage-test.XXXXXX)
holder=
cleanup() {
  [[ -n $holder ]] && kill "$holder" 2>/dev/null
  awk -v t="$tmp/" 'index($5, t) == 1 { print $5 }' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

mkdir -p "$tmp/bin"
echo "deb http://deb.debian.org/debian bookworm main" > "$tmp/sources.list"
# The fake mmdebstrap: ... SUITE TARGET SOURCES.  It leaves proc/ mounted,
# with a process inside it (its unmount would find the mount busy).
cat > "$tmp/bin/mmdebstrap" <<'FAKE'
#!/usr/bin/env bash
set -e
target=${@: -2:1}
mkdir -p "$target/proc" "$target/etc" "$target/usr/bin"
echo "root:x:0:0:root:/root:/bin/sh" > "$target/etc/passwd"
mount -t tmpfs fakeproc "$target/proc"
head -c 65536 /dev/zero > "$target/proc/kcore"
(cd "$target/proc" && exec sleep 1000) </dev/null >/dev/null 2>&1 &
echo $! > "$FAKE_HOLDER"
# Returns once the holder is inside (on a busy machine it may not be yet).
proc=$(cd "$target/proc" && pwd -P)
while kill -0 $! 2>/dev/null && [[ $(readlink "/proc/$!/cwd") != "$proc" ]]; do sleep 0.01; done
FAKE
chmod +x "$tmp/bin/mmdebstrap"
run_mkimage() {
  GSHARE_APT_SOURCES=$tmp/sources.list FAKE_HOLDER=$tmp/holder PATH=$tmp/bin:$PATH \
    scripts/mkimage.sh "$tmp/base" "$tmp/rootfs" >"$tmp/out" 2>&1
}

# ---- mmdebstrap's leftover mount, busy
run_mkimage; rc=$?
holder=$(cat "$tmp/holder" 2>/dev/null)
check "mkimage.sh with mmdebstrap's /proc left mounted (busy): succeeds" test $rc -eq 0
check "... nothing mounted under the base any more" eval '! mounted_under "$tmp/base"'
check "... nothing mounted under the image tree" eval '! mounted_under "$tmp/rootfs"'
check "... the image tree holds the base's files" test -f "$tmp/rootfs/etc/passwd"
check "... its proc/ is an empty directory (kcore not copied)" \
  eval '[[ -d $tmp/rootfs/proc && -z $(ls -A "$tmp/rootfs/proc") && ! -e $tmp/base/proc/kcore ]]'
check "... the busy mount detached, saying so" grep -q "proc is busy: detaching it" "$tmp/out"
[[ $rc -eq 0 ]] || cat "$tmp/out"

# ---- a base (current) with a file system mounted under it
rm -rf --one-file-system "$tmp/rootfs"
mount -t tmpfs other "$tmp/base/proc"
echo x > "$tmp/base/proc/kcore"
run_mkimage; rc=$?
check "a base with a mount under it: refused" test $rc -ne 0
check "... naming the mount" grep -qF "$tmp/base/proc" "$tmp/out"
check "... and nothing copied" test ! -e "$tmp/rootfs"
[[ $rc -ne 0 ]] || cat "$tmp/out"
umount "$tmp/base/proc"

# ---- an image tree with a file system mounted under it
run_mkimage
mkdir -p "$tmp/rootfs/mnt/data"
mount -t tmpfs precious "$tmp/rootfs/mnt/data"
echo keep > "$tmp/rootfs/mnt/data/keep"
run_mkimage; rc=$?
check "an image tree with a mount under it: refused" test $rc -ne 0
check "... naming the mount" grep -qF "$tmp/rootfs/mnt/data" "$tmp/out"
check "... and the mounted files left alone" test -f "$tmp/rootfs/mnt/data/keep"
[[ $rc -ne 0 ]] || cat "$tmp/out"

# ---- oci-image.py on a tree with a mount under it
"$PYTHON" scripts/oci-image.py "$tmp/rootfs" gshare:test "$tmp/image.tar" >"$tmp/out" 2>&1; rc=$?
check "oci-image.py: a tree with a mount under it refused, naming it" \
  eval '[[ $rc -ne 0 ]] && grep -qF "$tmp/rootfs/mnt/data" "$tmp/out" && [[ ! -e $tmp/image.tar ]]'
umount "$tmp/rootfs/mnt/data"
"$PYTHON" scripts/oci-image.py "$tmp/rootfs" gshare:test "$tmp/image.tar" >"$tmp/out" 2>&1; rc=$?
check "oci-image.py: the same tree unmounted: archive written" eval '[[ $rc -eq 0 && -s $tmp/image.tar ]]'

echo "test_mkimage.sh: $fails failed"
[[ $fails -eq 0 ]]
