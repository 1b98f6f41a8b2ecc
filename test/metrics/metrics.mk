# test/metrics: the agent's Prometheus endpoint (metricsAddress).
# check_metrics: the request and address parsers and the exposition text;
# test_metrics.py: the real agent on the fake driver, with a hooked process
# holding memory and hostile clients.
$(B)/test/metrics/check_metrics.o: CPPFLAGS += $(AGENT_INC) -Itest

$(B)/test/check_metrics: $(B)/test/metrics/check_metrics.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)

TEST_DEPS += $(B)/gshare-agent $(B)/gsharectl $(B)/test/fakecuda/libcuda.so.1 $(B)/test/e2e/e2e_cuda $(HOOK_SO)
