# common/: code shared by the agent, the plugin and the tools.  The hook uses
# the header-only parts (gs_util.h, gs_wire.h, gs_ring.h) and gs_devid.o
# (libc only; its symbols stay hidden behind hook/libgshare.lds).
COMMON_SRC := $(wildcard common/*.c)
COMMON_O   := $(patsubst %.c,$(B)/%.o,$(COMMON_SRC))
COMMON_A   := $(B)/libgscommon.a

$(COMMON_A): $(COMMON_O) $(PROTO_O)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(B)/test/check_json: $(B)/test/check_json.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK)


$(B)/test/check_ring: $(B)/test/check_ring.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK) -lpthread


$(B)/test/check_logrep: $(B)/test/check_logrep.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK) -lpthread

# The shared helpers' own checks (test/check_<module>.c), each against
# libgscommon.a alone.
COMMON_CHECKS := $(patsubst %,$(B)/test/check_%,sock mkdir k8sname ctl arena flags)
$(COMMON_CHECKS): $(B)/test/check_%: $(B)/test/check_%.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK) $(PKG_PBC) $(PKG_YAML)
