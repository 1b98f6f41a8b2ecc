#!/usr/bin/env bash
# Installs every build and test dependency of gshare from Debian's packages.
# cuda.h is not among them: it comes from the CUDA toolkit under CUDA_HOME.
set -euo pipefail
pkgs=(
  gcc make pkg-config
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev
  libyaml-dev libcurl4-openssl-dev check valgrind
  python3 python3-grpcio python3-grpc-tools python3-protobuf python3-yaml
  # kubectl gshare reads the agents' /metrics with the client library's
  # text-format parser; test/metrics/test_monitoring.py runs Prometheus
  # (and promtool) on the dashboard's and the alerts' queries
  python3-prometheus-client prometheus
  python3-pyflakes   # make py-check (in make test): undefined names in the Python tests
  mmdebstrap   # make image / the install tests: the image's Debian root filesystem
  gcc-aarch64-linux-gnu   # make cross-arm64 (in make test): the agent and hook for arm64
  clang-format   # make format-check (in make test): .clang-format, version 14 (Debian 12's)
)
# The arm64 libraries the cross build links (multiarch: same versions as
# the native ones, which apt may upgrade to match).
arm64_pkgs=(libgrpc-dev:arm64 libprotobuf-c-dev:arm64 libyaml-dev:arm64 libcurl4-openssl-dev:arm64)
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
  need_update=1
fi
missing=()
for p in "${pkgs[@]}" "${arm64_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 || -n ${need_update:-} ]]; then
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "deps: all $(( ${#pkgs[@]} + ${#arm64_pkgs[@]} )) packages already installed"
fi
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ ! -f $cuda_home/include/cuda.h ]]; then
  echo "deps: warning: $cuda_home/include/cuda.h not found; install the CUDA toolkit headers or set CUDA_HOME" >&2
fi
