# hook/: libgshare.so, injected into every process of a gshare container.
# Links libc only (glibc >= 2.34 has dlopen, dlsym and pthread in it);
# libcuda is opened with dlopen, and libnvidia-ml only if the process has
# not loaded it.  Exports exactly hook/libgshare.lds.
HOOK_SRC := hook/gs_hook_api.c hook/gs_hook_conn.c hook/gs_hook_space.c hook/gs_hook_mem.c \
	hook/gs_hook_vmm.c hook/gs_hook_ipc.c hook/gs_hook_cuda.c hook/gs_hook_nvml.c hook/gs_hook_blocks.c \
	hook/gs_hook_gate.c hook/gs_hook_spill.c hook/gs_hook_spillprep.c hook/gs_hook_ctx.c hook/gs_hook_thread.c hook/gs_hook_msg.c \
	hook/gs_hook_qos.c hook/gs_hook_qos_lc.c hook/gs_hook_qos_foresee.c hook/gs_hook_qos_est.c \
	hook/gs_hook_qos_ring.c
HOOK_O   := $(patsubst %.c,$(B)/%.o,$(HOOK_SRC))
# common/gs_devid.c (UUID strings; libc only) for the NVML wrappers; the
# version script keeps its symbols local.
HOOK_LINK_O := $(HOOK_O) $(B)/common/gs_devid.o
HOOK_SO  := $(B)/libgshare.so

$(HOOK_O): CFLAGS += -fvisibility=hidden -Ihook

$(HOOK_SO): $(HOOK_LINK_O) hook/libgshare.lds
	$(CC) -shared -Wl,-soname,libgshare.so $(LDFLAGS) -Wl,-z,defs,-z,relro,-z,now \
	  -Wl,--version-script=hook/libgshare.lds -o $@ $(HOOK_LINK_O)

LIBS += $(HOOK_SO)
