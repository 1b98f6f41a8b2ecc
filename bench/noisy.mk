# bench/noisy.mk — noisy_bench: a pod of 4 processes churning allocations
# through the agent and the hook on the fake driver; what the agent's
# scrubbing did for it (issue 19, item 3).  Its churner is
# test/gpu/noisy_neighbour.py's (ctypes, no torch); the GPU benchmark is
# that script itself (docs/benchmarks.md).
BENCHES += bench/noisy_bench.py
