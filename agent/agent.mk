# agent/agent.mk — gshare-agent, gsharectl, their unit tests, make demo.
# The allocator, $(B)/libgsalloc.a, comes from agent/alloc.mk, which is
# included after this file: its ALLOC_A is not yet set here, hence the path.

AGENT_SRC := agent/gs_agent_main.c agent/gs_agent.c agent/gs_cuda.c agent/gs_gpu.c agent/gs_vmm.c agent/gs_ipc.c agent/gs_allocs.c \
	agent/gs_proc.c agent/gs_workers.c agent/gs_ctlsrv.c agent/gs_recon.c agent/gs_metrics.c agent/gs_watch.c \
	agent/gs_outside.c agent/gs_chunkset.c agent/gs_loop.c agent/gs_stream.c agent/gs_serve.c agent/gs_sockmsg.c agent/gs_nvml.c agent/gs_usage.c agent/gs_event.c \
	agent/gs_claims.c agent/gs_ledger.c agent/gs_handover.c
AGENT_LIB_SRC := $(filter-out agent/gs_agent_main.c,$(AGENT_SRC))
AGENT_LIB_O := $(patsubst %.c,$(B)/%.o,$(AGENT_LIB_SRC))
AGENT_LIBS  := -ldl -lpthread $(PKG_GRPC) $(PKG_PBC) $(PKG_YAML) $(PKG_CURL)

$(B)/agent/%.o: CPPFLAGS += -Iagent

$(B)/gshare-agent: $(B)/agent/gs_agent_main.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS)

$(B)/gsharectl: $(B)/agent/gsharectl.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_PBC) $(PKG_YAML)

# One unit test per agent module that runs without a driver or a socket
# (everything else runs end to end in test/e2e/).
AGENT_CHECKS := $(patsubst %,$(B)/test/check_%,allocs gpu proc cuda usage event watch recon ledger)
$(AGENT_CHECKS): $(B)/test/check_%: $(B)/test/check_%.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)
$(AGENT_CHECKS:%=%.o): CPPFLAGS += -Iagent

BINS  += $(B)/gshare-agent $(B)/gsharectl

.PHONY: demo
demo: $(BINS) $(LIBS) $(TEST_DEPS)
	B=$(B) scripts/demo.sh
