# test/hook/foresee.mk — check_foresee: the next latency-critical request
# foreseen (hook/gs_hook_qos_foresee.c: pure functions, no driver).
$(B)/test/check_foresee: $(B)/test/hook/check_foresee.o $(B)/hook/gs_hook_qos_foresee.o
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK)
