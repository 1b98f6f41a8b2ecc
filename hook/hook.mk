# hook/: libgshare.so, injected into every process of a gshare container.
# Links libc only (glibc >= 2.34 has dlopen, dlsym and pthread in it);
# libcuda is opened with dlopen.  Exports exactly hook/libgshare.lds.
HOOK_SRC := hook/gs_hook_api.c hook/gs_hook_conn.c hook/gs_hook_cuda.c
HOOK_O   := $(patsubst %.c,$(B)/%.o,$(HOOK_SRC))
HOOK_SO  := $(B)/libgshare.so

$(HOOK_O): CFLAGS += -fvisibility=hidden -Ihook

$(HOOK_SO): $(HOOK_O) hook/libgshare.lds
	$(CC) -shared -Wl,-soname,libgshare.so $(LDFLAGS) -Wl,-z,defs,-z,relro,-z,now \
	  -Wl,--version-script=hook/libgshare.lds -o $@ $(HOOK_O)

LIBS += $(HOOK_SO)
