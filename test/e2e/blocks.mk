# test/e2e/test_blocks.py: the live-block caps (maxBlocksPerProcess,
# maxBlocksPerAllocation) through the hook and the real agent.
TEST_DEPS += $(B)/test/e2e/e2e_cuda $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl
