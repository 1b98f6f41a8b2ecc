# agent/alloc.mk — the three-level allocator (GSM chunks -> buddy -> slab),
# built as a static library the agent links, plus its tests.
#
#   $(ALLOC_A)        release objects, for the agent
#   $(ALLOC_DEBUG_A)  the same compiled with -DGS_ALLOC_DEBUG: every mutation
#                     runs gs_pool_validate and aborts on a violation; the
#                     tests link this one.
ALLOC_SRC     := $(sort $(wildcard agent/alloc/*.c))
ALLOC_O       := $(patsubst %.c,$(B)/%.o,$(ALLOC_SRC))
ALLOC_DEBUG_O := $(patsubst %.c,$(B)/alloc-debug/%.o,$(ALLOC_SRC))
ALLOC_A       := $(B)/libgsalloc.a
ALLOC_DEBUG_A := $(B)/libgsalloc-debug.a

$(ALLOC_A): $(ALLOC_O)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(ALLOC_DEBUG_A): $(ALLOC_DEBUG_O)
	@mkdir -p $(dir $@)
	rm -f $@ && $(AR) rcs $@ $^

$(B)/alloc-debug/%.o: %.c | cuda-check
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) -DGS_ALLOC_DEBUG $(CFLAGS) -MMD -MP -c -o $@ $<

ALLOC_TESTS := check_buddy check_gsm check_slab check_alloc check_alloc_random
ALLOC_TEST_BINS := $(addprefix $(B)/test/,$(ALLOC_TESTS))

# The tests include the allocator's internal headers.
$(ALLOC_DEBUG_O) $(patsubst %,%.o,$(ALLOC_TEST_BINS)): CPPFLAGS += $(call layer_inc,agent/alloc)

$(ALLOC_TEST_BINS): $(B)/test/%: $(B)/test/%.o $(ALLOC_DEBUG_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_CHECK)

TEST_DEPS += $(ALLOC_A)
