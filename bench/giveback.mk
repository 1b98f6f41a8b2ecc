# bench/giveback.mk — giveback_bench: cuMemAlloc fill and free, then
# cuMemCreate, then cuMemAlloc again, in one process (issue 19).  Its client
# is e2e_cuda (test/e2e/e2e.mk).
BENCHES += bench/giveback_bench.py
