# test/e2e: end-to-end tests of the agent (and, once present, the hook) on
# the fake driver.  test_e2e.py starts the real gshare-agent.
E2E_DIR := $(B)/test/e2e

$(E2E_DIR)/e2e_wire: $(E2E_DIR)/e2e_wire.o $(E2E_DIR)/e2e_wire_ipc.o
	$(CC) $(LDFLAGS) -o $@ $^ -lpthread

# A process that keeps every fd it is sent (test_keptfd.py).
$(E2E_DIR)/e2e_keptfd: $(E2E_DIR)/e2e_keptfd.o
	$(CC) $(LDFLAGS) -o $@ $^

TEST_DEPS += $(E2E_DIR)/e2e_wire $(E2E_DIR)/e2e_keptfd $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl

# An ordinary driver-API program, linked against libcuda by name, no rpath:
# the tests put the fake driver's directory on LD_LIBRARY_PATH; on a GPU
# machine (make demo, docs/gpu.md) the real driver is found.
$(E2E_DIR)/e2e_cuda: $(E2E_DIR)/e2e_cuda.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda -lpthread
TEST_DEPS += $(E2E_DIR)/e2e_cuda

# The borrower and the owner of the moves' test (test_spill.py).
$(E2E_DIR)/e2e_spill: $(E2E_DIR)/e2e_spill.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda -ldl
TEST_DEPS += $(E2E_DIR)/e2e_spill

# The workloads of compute QoS's test (test_qos.py).
$(E2E_DIR)/e2e_qos: $(E2E_DIR)/e2e_qos.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda -ldl -lpthread
TEST_DEPS += $(E2E_DIR)/e2e_qos

# Hostile tenants and faults (issue 10): create/restore failures, the
# checkpoint, socket access, scrubbing, the worker pool.
$(E2E_DIR)/race_chmod.so: test/e2e/race_chmod.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(filter-out -fsanitize=%,$(CFLAGS)) -shared -o $@ $< -ldl
TEST_DEPS += $(E2E_DIR)/race_chmod.so
