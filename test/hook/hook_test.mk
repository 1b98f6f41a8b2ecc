# test/hook: the hook's tests.  mock_agent is a minimal agent (test double)
# on the fake driver; hook_client runs scenarios with libgshare.so preloaded.
$(B)/test/hook/%.o: CFLAGS += -Ihook

$(B)/test/mock_agent: $(B)/test/hook/mock_agent.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK)

$(B)/test/hook_client: $(B)/test/hook/hook_client.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK)

TEST_DEPS += $(B)/test/mock_agent $(B)/test/hook_client $(HOOK_SO)
