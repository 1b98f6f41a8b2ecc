# test/recon: the agent's reconciler against a PodResources stand-in
# (test_recon.py starts the real gshare-agent on the fake driver).
TEST_DEPS += $(B)/test/e2e/e2e_wire $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl
