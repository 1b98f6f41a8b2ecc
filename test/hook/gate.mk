# test/hook/gate.mk — check_gate: the hook's launch gate, linked with the
# hook's objects (gs_gate_* are hidden in libgshare.so) and the fake driver.
$(B)/test/check_gate: $(B)/test/hook/check_gate.o $(HOOK_LINK_O) $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(HOOK_LINK_O) $(FAKECUDA_LINK) $(PKG_CHECK)
