# test/plugin/: the kubelet stand-in end-to-end test of gshare-device-plugin.
# test/plugin/test_kubelet_restart.py: one kubelet restart, one registration.
# test/plugin/test_reuse.py: units of a gone pod usable at once (real agent
# and plugin, kubelet and PodResources stand-ins).
TEST_DEPS += $(B)/test/e2e/e2e_wire $(B)/test/fakecuda/libcuda.so.1 $(B)/gshare-agent $(B)/gsharectl
