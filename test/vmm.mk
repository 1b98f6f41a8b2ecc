# test/vmm.mk — check_vmm: the application's VMM allocations (gs_vmm) on
# the fake driver (dlopened, like the agent does), with the debug allocator.
$(B)/test/check_vmm: $(B)/test/check_vmm.o $(AGENT_LIB_O) $(ALLOC_DEBUG_A) $(COMMON_A) | $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)
$(B)/test/check_vmm.o: CPPFLAGS += $(AGENT_INC)

