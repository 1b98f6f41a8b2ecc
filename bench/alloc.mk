# bench/alloc.mk — allocator benchmarks (make bench), linked with the
# release library (no GS_ALLOC_DEBUG validation).
ALLOC_BENCHES := $(B)/bench/alloc_ops $(B)/bench/alloc_waste $(B)/bench/alloc_mem

$(patsubst %,%.o,$(ALLOC_BENCHES)): CPPFLAGS += $(AGENT_INC)

$(ALLOC_BENCHES): $(B)/bench/%: $(B)/bench/%.o $(ALLOC_A)
	$(CC) $(LDFLAGS) -o $@ $^

BENCHES += $(ALLOC_BENCHES)
