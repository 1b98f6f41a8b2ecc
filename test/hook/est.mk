# test/hook/est.mk — check_est: a launch's expected GPU time by its kind
# (hook/gs_hook_qos_est.c: under its caller's lock, no driver call for a
# table without func_get_name).
$(B)/test/check_est: $(B)/test/hook/check_est.o $(B)/hook/gs_hook_qos_est.o
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK)
