#!/bin/bash
# fakeimage.sh VERSION [OUT_DIR] — the gshare image of `make image` with the
# fake driver standing in for the GPU, tagged ghcr.io/gshare/gshare:VERSION
# and imported into the 1.36 cluster's containerd (../shared/kubelet136), for
# chart installs on real kubelets (test/k8s/upgrade_run.sh).  Not part of
# make test.
#
# `helm install` cannot add the mounts and environment that fakegpu.py adds to
# the manifest, so the image carries what the NVIDIA runtime and a GPU would
# give the agent: test/fakecuda's libcuda.so.1 and test/fakenvml's
# libnvidia-ml.so.1 in /usr/lib/x86_64-linux-gnu, and gshare-agent started
# through a wrapper that sets the fake driver's environment (one GPU of
# $FAKE_MEM, default 8Gi; its state in the host's /run/gshare/fakegpu, the
# chart's hostPaths.run, which workload pods mount too: workload.py with
# FAKEGPU_DIR=/run/gshare/fakegpu).  The wrapper execs the agent, so the
# container's process is the agent itself (comm gshare-agent).
#
# A VERSION other than BASE_VERSION (default 0.1.0) is "another build": the
# same binaries with a line naming the version appended to libgshare.so and
# gshare-agent (ELF ignores trailing bytes), so the hook the init container
# installs and the agent differ by hash.
set -euo pipefail
V=${1:?usage: fakeimage.sh VERSION [OUT_DIR]}; OUT=${2:-/tmp/gsk8s}
ROOT=$(cd "$(dirname "$0")/../.." && pwd); B=${B:-build}
MEM=${FAKE_MEM:-8Gi}; BASE=${BASE_VERSION:-0.1.0}
R=$OUT/rootfs-$V
[[ -d $ROOT/$B/image/rootfs/usr/local/bin ]] || { echo "no $B/image/rootfs: run make image" >&2; exit 1; }
rm -rf "$R"; mkdir -p "$OUT"; cp -a "$ROOT/$B/image/rootfs" "$R"
install -m 0755 "$ROOT/$B/test/fakecuda/libcuda.so.1" "$R/usr/lib/x86_64-linux-gnu/libcuda.so.1"
install -m 0755 "$ROOT/$B/test/fakenvml/libnvidia-ml.so.1" "$R/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
mkdir -p "$R/usr/local/libexec/gshare-fake"
mv "$R/usr/local/bin/gshare-agent" "$R/usr/local/libexec/gshare-fake/gshare-agent"
cat > "$R/usr/local/bin/gshare-agent" <<EOT
#!/bin/sh
# test image (test/k8s/fakeimage.sh): the fake driver's environment, then the agent
export GSHARE_FAKECUDA_STATE=\${GSHARE_FAKECUDA_STATE:-/run/gshare/fakegpu/state}
export GSHARE_FAKECUDA_MEM=\${GSHARE_FAKECUDA_MEM:-$MEM} GSHARE_FAKECUDA_DEVICES=\${GSHARE_FAKECUDA_DEVICES:-1}
mkdir -p "\$(dirname "\$GSHARE_FAKECUDA_STATE")"
exec /usr/local/libexec/gshare-fake/gshare-agent "\$@"
EOT
chmod 0755 "$R/usr/local/bin/gshare-agent"
if [[ $V != "$BASE" ]]; then
  for f in usr/local/lib/gshare/libgshare.so usr/local/libexec/gshare-fake/gshare-agent; do
    printf '\ngshare test build %s\n' "$V" >> "$R/$f"
  done
fi
echo "gshare test build $V (fake driver, $MEM)" > "$R/etc/gshare-test-build"
/usr/bin/python3 "$ROOT/scripts/oci-image.py" "$R" "ghcr.io/gshare/gshare:$V" "$OUT/gshare-$V.tar" >/dev/null
/tmp/k134/ctrd17/usr/bin/ctr -a /run/containerd-k134/containerd.sock -n k8s.io images import "$OUT/gshare-$V.tar" >/dev/null
rm -rf "$R"
echo "imported ghcr.io/gshare/gshare:$V ($OUT/gshare-$V.tar)"
