# test/hook/spill.mk — check_spill: the mover's move (issue 22), linked
# with the hook's objects (gs_spill_move and gs_conn are hidden in
# libgshare.so) and the fake driver, as check_gate is.
$(B)/test/check_spill: $(B)/test/hook/check_spill.o $(HOOK_LINK_O) $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(HOOK_LINK_O) $(FAKECUDA_LINK) $(PKG_CHECK)
