# test/fakecuda: a fake libcuda.so.1 for tests (never shipped).  Test
# programs link it with -L$(FAKECUDA_DIR) -lcuda and find it at run time
# through their rpath ($ORIGIN-relative) or LD_LIBRARY_PATH.
FAKECUDA_DIR := $(B)/test/fakecuda
FAKECUDA_SO  := $(FAKECUDA_DIR)/libcuda.so.1
# Link flags for a test program that calls the driver directly; the program
# must live in $(B)/test/.
FAKECUDA_LINK := -L$(FAKECUDA_DIR) -lcuda -Wl,-rpath,'$$ORIGIN/fakecuda'

FAKECUDA_OBJS := $(addprefix $(B)/test/fakecuda/,fakecuda.o fc_engine.o fc_graph.o)

$(FAKECUDA_SO): $(FAKECUDA_OBJS)
	$(CC) -shared -Wl,-soname,libcuda.so.1 $(LDFLAGS) -Wl,-z,defs -o $@ $^
	ln -sf libcuda.so.1 $(FAKECUDA_DIR)/libcuda.so

$(B)/test/check_fakecuda: $(B)/test/fakecuda/check_fakecuda.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK) $(PKG_CHECK)

TEST_DEPS += $(FAKECUDA_SO)

$(B)/test/check_gputime: $(B)/test/fakecuda/check_gputime.o $(FAKECUDA_SO)
	$(CC) $(LDFLAGS) -o $@ $< $(FAKECUDA_LINK) $(PKG_CHECK)
