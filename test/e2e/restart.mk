# test/e2e/restart.mk — test_restart.py and bench/restart_bench.py (issue
# 18): e2e_restart, a driver-API client that holds, churns and checks its
# data across agent restarts, linked like e2e_cuda (libcuda by name, no
# rpath: the fake driver comes from LD_LIBRARY_PATH, the real one on a GPU).
$(E2E_DIR)/e2e_restart: $(E2E_DIR)/e2e_restart.o $(B)/test/fakecuda/libcuda.so.1
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda -lpthread
TEST_DEPS += $(E2E_DIR)/e2e_restart $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl
