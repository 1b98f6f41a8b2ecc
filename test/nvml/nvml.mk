# test/nvml: the hook's NVML memory queries, against the real agent on the
# fake driver (test/fakecuda) and the fake libnvidia-ml (test/fakenvml).
$(B)/test/nvml/%.o: CFLAGS += -Ihook

$(B)/test/nvml_client: $(B)/test/nvml/nvml_client.o $(FAKECUDA_SO) $(FAKENVML_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK) $(FAKENVML_LINK)

TEST_DEPS += $(B)/test/nvml_client $(HOOK_SO) $(FAKENVML_SO)
