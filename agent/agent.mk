# agent/agent.mk — gshare-agent, gsharectl, their unit tests, make demo.
# The allocator, $(B)/libgsalloc.a, comes from agent/alloc.mk, which is
# included after this file: its ALLOC_A is not yet set here, hence the path.

# Every .c of the agent's parts is built in (a new file needs no edit here):
#   core/          the loop, connections, the request server, the handover
#   domain/        GPUs, allocations, processes' holdings, the ledger
#   integrations/  the driver, NVML, the API server, the kubelet, /metrics
# and the allocator, alloc/ (agent/alloc.mk).
AGENT_SRC := agent/gs_agent_main.c $(sort $(wildcard agent/core/*.c agent/domain/*.c agent/integrations/*.c))
AGENT_LIB_SRC := $(filter-out agent/gs_agent_main.c,$(AGENT_SRC))
AGENT_LIB_O := $(patsubst %.c,$(B)/%.o,$(AGENT_LIB_SRC))
AGENT_LIBS  := -ldl -lpthread $(PKG_GRPC) $(PKG_PBC) $(PKG_YAML) $(PKG_CURL)

$(B)/agent/%.o: CPPFLAGS += $(AGENT_INC)

$(B)/gshare-agent: $(B)/agent/gs_agent_main.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS)

$(B)/gsharectl: $(B)/agent/gsharectl.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_PBC) $(PKG_YAML)

# One unit test per agent module that runs without a driver or a socket
# (everything else runs end to end in test/e2e/).
AGENT_CHECKS := $(patsubst %,$(B)/test/check_%,allocs ckpt gpu proc cuda usage event watch recon ledger loop stream workers)
$(AGENT_CHECKS): $(B)/test/check_%: $(B)/test/check_%.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)
$(AGENT_CHECKS:%=%.o): CPPFLAGS += $(AGENT_INC)

BINS  += $(B)/gshare-agent $(B)/gsharectl

.PHONY: demo
demo: $(BINS) $(LIBS) $(TEST_DEPS)
	B=$(B) scripts/demo.sh
