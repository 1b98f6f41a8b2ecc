#!/usr/bin/env bash
# Compute QoS over MPS (issue 30: "MPS underneath ... an option to
# evaluate"), with qos_check.sh's workloads and allocations: an MPS control
# daemon of this script's own (its pipe and log directories in the work
# dir; the agent is started before it and stays outside MPS), every
# workload an MPS client, HP at client priority 0 and BE at 1
# (CUDA_MPS_CLIENT_PRIORITY).  Measured:
#   HP alone (an MPS client); BE alone (training, GEMMs);
#   "mps": HP in a standard allocation beside BE (client priority only);
#   "mps+qos": HP latency-critical beside BE best-effort (gshare's
#   admission and client priority);
#   each beside training and beside the 8192^3 GEMM loop.
# Last line:
#   RESULT mps_hp_p99_ratio=R mps_be_throughput_ratio=T mps_qos_hp_p99_ratio=QR
#          mps_qos_be_throughput_ratio=QT mps_gemm_hp_p99_ratio=G mps_gemm_be_throughput_ratio=GT
#          mps_qos_gemm_hp_p99_ratio=QG mps_qos_gemm_be_throughput_ratio=QGT
# (ratios against alone under MPS; issue 30's targets for the QoS rows:
# QR <= 1.5 with QT >= 0.8, QG <= 4.5.)
# Env: as qos_check.sh (QOS_PARTS: "train" leaves the GEMM loop out);
# MPS_CONTROL (nvidia-cuda-mps-control).  The GPU must
# be idle and no other MPS daemon may serve it.
set -u
# shellcheck disable=SC2034,SC2154  # QOS_WORK, BE_ENV and work: qos_lib.sh's
QOS_WORK=qos-mps
# shellcheck source=qos_lib.sh
source "$(cd "$(dirname "$0")" && pwd)/qos_lib.sh"
HPd=$(mk 0 --compute-class latency-critical)
BEd=$(mk 8 --compute-class best-effort)
STd=$(mk 16)
MPS=${MPS_CONTROL:-nvidia-cuda-mps-control}
export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
"$MPS" -d || { echo "FAIL cannot start the MPS control daemon ($MPS)"; exit 1; }
trap 'echo quit | "$MPS" >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null; tar czf "${OUT:-/tmp}/qos-mps-logs.tgz" -C "$work" --exclude "*.sock" --exclude alloc --exclude mps . 2>/dev/null' EXIT
HP_ENV="CUDA_MPS_CLIENT_PRIORITY=0"
BE_ENV="CUDA_MPS_CLIENT_PRIORITY=1"

hooked "$HPd" env $HP_ENV "$PY" "$W" hp >"$work/alone.hp" 2>"$work/alone.hp.err"
hp_alone=$(tail -n 1 "$work/alone.hp" | js 'd["p99_ms"]')
echo "HP alone under MPS: $(tail -n 1 "$work/alone.hp")"
echo "MPS server: $(echo get_server_list | "$MPS" | head -n 1)"
train_alone=$(be_alone "$BEd" train train-alone); echo "training alone under MPS: $train_alone steps/s"
gemm_alone=- g99=- gbe=- gq99=- gqbe=-
[[ ${QOS_PARTS:-all} == *gemm* || ${QOS_PARTS:-all} == all ]] && gemm=1 || gemm=0
((gemm)) && { gemm_alone=$(be_alone "$BEd" gemm gemm-alone); echo "GEMMs alone under MPS: $gemm_alone /s"; }

read -r m50 m99 mbe m99s < <(pair "$STd" train "$BEd" mps-train)
echo "MPS priority, beside training: HP p50 $m50 ms p99 $m99 ms (after 2 s: $m99s), training $mbe steps/s"
read -r q50 q99 qbe q99s < <(pair "$HPd" train "$BEd" mpsqos-train)
echo "MPS priority + QoS, beside training: HP p50 $q50 ms p99 $q99 ms (after 2 s: $q99s), training $qbe steps/s"
if ((gemm)); then
read -r g50 g99 gbe g99s < <(pair "$STd" gemm "$BEd" mps-gemm)
echo "MPS priority, beside GEMMs: HP p50 $g50 ms p99 $g99 ms (after 2 s: $g99s), $gbe GEMMs/s"
read -r gq50 gq99 gqbe gq99s < <(pair "$HPd" gemm "$BEd" mpsqos-gemm)
echo "MPS priority + QoS, beside GEMMs: HP p50 $gq50 ms p99 $gq99 ms (after 2 s: $gq99s), $gqbe GEMMs/s"
fi

echo "RESULT mps_hp_p99_ratio=$(ratio "$m99" "$hp_alone") mps_be_throughput_ratio=$(ratio "$mbe" "$train_alone")" \
     "mps_qos_hp_p99_ratio=$(ratio "$q99" "$hp_alone") mps_qos_be_throughput_ratio=$(ratio "$qbe" "$train_alone")" \
     "mps_gemm_hp_p99_ratio=$(ratio "$g99" "$hp_alone") mps_gemm_be_throughput_ratio=$(ratio "$gbe" "$gemm_alone")" \
     "mps_qos_gemm_hp_p99_ratio=$(ratio "$gq99" "$hp_alone") mps_qos_gemm_be_throughput_ratio=$(ratio "$gqbe" "$gemm_alone")"
