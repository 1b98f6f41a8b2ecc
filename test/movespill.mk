# test/movespill.mk — check_movespill: a GPU's moves (gs_gpu_spill.c) on a
# real pool over the fake driver (dlopened, like the agent does), with the
# debug allocator.
$(B)/test/check_movespill: $(B)/test/check_movespill.o $(AGENT_LIB_O) $(ALLOC_DEBUG_A) $(COMMON_A) | $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)
$(B)/test/check_movespill.o: CPPFLAGS += $(AGENT_INC)
