# bench/hook.mk — hook_bench: cuMemAlloc+cuMemFree hooked vs native.
# The program links libcuda by name without an rpath: the runner points
# LD_LIBRARY_PATH at the fake driver, or leaves the real one to the loader.
$(B)/bench/hook_bench_prog: $(B)/bench/hook_bench_prog.o $(B)/test/fakecuda/libcuda.so.1
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda

BENCHES += bench/hook_bench.py
TEST_DEPS += $(B)/bench/hook_bench_prog
BENCHES += bench/density.py
