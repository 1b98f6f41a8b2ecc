# test/metrics: the agent's Prometheus endpoint (metricsAddress), against the
# real agent on the fake driver, with a hooked process holding memory.
TEST_DEPS += $(B)/gshare-agent $(B)/gsharectl $(B)/test/fakecuda/libcuda.so.1 $(B)/test/e2e/e2e_cuda $(HOOK_SO)
TESTS += test/metrics/test_metrics.py
