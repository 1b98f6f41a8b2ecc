# bench/scrub.mk — the agent's scrub of a chunk before another process gets
# it (gs_gpu_scrub), on GPU 0 of the real driver; says "skipped" without one.
$(B)/bench/scrub_bench.o: CPPFLAGS += $(AGENT_INC)
$(B)/bench/scrub_bench: $(B)/bench/scrub_bench.o $(AGENT_LIB_O) $(ALLOC_A) $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS)
BENCHES += $(B)/bench/scrub_bench
