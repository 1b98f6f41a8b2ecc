# test/gpu/gpu_idle.sh — sourced by run.sh and qos_lib.sh: the GPU must be
# idle.  A leftover process's memory shrinks the agent's pool (one that let
# its memory go after the agent sized its pool left bypass 20 GiB free
# past the pool on an H200) and what the workloads measure must be theirs
# alone.  A process still exiting gets 30 s; then the script stops naming
# the GPU's processes.
# shellcheck shell=bash
for _ in $(seq 300); do
  busy=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null)
  [[ -z $busy ]] && break; sleep 0.1
done
[[ -z $busy ]] || { echo "FAIL the GPU is not idle; its processes (pid, memory): $busy"; exit 1; }
