# test/watch: the agent's API-server pod watch against a fake API server
# (test_watch.py; the PodResources stand-in comes from test/recon).
TEST_DEPS += $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl
