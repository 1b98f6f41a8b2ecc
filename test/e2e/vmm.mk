# test/e2e/vmm.mk — test_vmm.py: mixed 2/20 MiB cuMemCreate refill rounds
# through the hook and the agent (e2e_vmm, linked like e2e_cuda).
$(E2E_DIR)/e2e_vmm: $(E2E_DIR)/e2e_vmm.o $(B)/test/fakecuda/libcuda.so.1
	$(CC) $(LDFLAGS) -o $@ $< -L$(B)/test/fakecuda -lcuda
TEST_DEPS += $(E2E_DIR)/e2e_vmm
