# agent/agent.mk — gshare-agent, gsharectl, their unit tests, make demo.
# The allocator, $(B)/libgsalloc.a, comes from agent/alloc.mk, which is
# included after this file: its ALLOC_A is not yet set here, hence the path.

# Every .c of the agent's layers is built in (a new file needs no edit here;
# agent/layers.txt orders them, docs/design.md "Layers" says what each holds):
#   base/      the runtime (loop, streams, workers, socket messages) and the
#              platform (the driver and NVML tables, histograms)
#   domain/    GPUs, allocations, processes' holdings, checkpoint, ledger
#   sessions/  the agent, processes' connections, serving, control, handover
#   services/  the reconciler, the API-server watch, metrics, usage, Events
# and the allocator, alloc/ (agent/alloc.mk).
AGENT_SRC := agent/gs_agent_main.c $(sort $(foreach d,base domain sessions services,$(wildcard agent/$(d)/*.c)))
AGENT_LIB_SRC := $(filter-out agent/gs_agent_main.c,$(AGENT_SRC))
AGENT_LIB_O := $(patsubst %.c,$(B)/%.o,$(AGENT_LIB_SRC))
AGENT_LIBS  := -ldl -lpthread $(PKG_GRPC) $(PKG_PBC) $(PKG_YAML) $(PKG_CURL)

$(foreach d,$(AGENT_LAYERS),$(eval $(B)/agent/$(d)/%.o: CPPFLAGS += $(call layer_inc,agent/$(d))))
$(B)/agent/gs_agent_main.o $(B)/agent/gsharectl.o: CPPFLAGS += $(AGENT_INC)

$(B)/gshare-agent: $(B)/agent/gs_agent_main.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS)

$(B)/gsharectl: $(B)/agent/gsharectl.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_PBC) $(PKG_YAML)

# One unit test per agent module that runs without a driver or a socket
# (everything else runs end to end in test/e2e/).
AGENT_CHECKS := $(patsubst %,$(B)/test/check_%,allocs ckpt gpu proc short cuda usage event watch recon ledger loop stream workers \
                  handover_codec serve serve_spill)
$(AGENT_CHECKS): $(B)/test/check_%: $(B)/test/check_%.o $(AGENT_LIB_O) $(B)/libgsalloc.a $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(AGENT_LIBS) $(PKG_CHECK)
$(AGENT_CHECKS:%=%.o): CPPFLAGS += $(AGENT_INC)
# check_serve(_spill) open their GPU over the fake driver (fakecuda.mk is read later).
$(B)/test/check_serve $(B)/test/check_serve_spill: | $(B)/test/fakecuda/libcuda.so.1

BINS  += $(B)/gshare-agent $(B)/gsharectl

.PHONY: demo
demo: $(BINS) $(LIBS) $(TEST_DEPS)
	B=$(B) scripts/demo.sh
