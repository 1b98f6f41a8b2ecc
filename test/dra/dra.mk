# test/dra: gshare-dra-plugin against a DRA kubelet stand-in (Python grpcio,
# stubs generated at test time from proto/dra_v1.proto and
# proto/pluginregistration_v1.proto), a fake API server, the real agent on
# the fake driver (and the stand-in agent for GPU health changes).
TEST_DEPS += $(B)/gshare-dra-plugin $(B)/gshare-agent $(B)/gsharectl $(B)/test/fakecuda/libcuda.so.1 \
	$(B)/test/e2e/e2e_cuda $(B)/libgshare.so
