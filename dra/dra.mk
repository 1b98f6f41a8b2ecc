# dra/: gshare-dra-plugin, the Kubernetes DRA kubelet plugin (docs/dra.md).
# Its own binary, not a mode of gshare-device-plugin: another kubelet API,
# and it needs the API server (libcurl, the service account) and a CDI
# directory, which the device plugin does not.  It shares common/'s config,
# gRPC server, agent client, mirror and container spec with the device
# plugin.
DRA_SRC := $(wildcard dra/*.c)
DRA_O   := $(patsubst %.c,$(B)/%.o,$(DRA_SRC))

$(DRA_O): CPPFLAGS += -Idra

$(B)/gshare-dra-plugin: $(DRA_O) $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $(DRA_O) $(COMMON_A) $(PKG_GRPC) $(PKG_PBC) $(PKG_YAML) $(PKG_CURL) -lpthread

BINS += $(B)/gshare-dra-plugin

# test/check_dra.c: the parts that need no kubelet (claims, slice JSON, CDI).
DRA_PARTS_O := $(B)/dra/gs_claim.o $(B)/dra/gs_slice.o $(B)/dra/gs_cdi.o
$(B)/test/check_dra.o: CPPFLAGS += -Idra
$(B)/test/check_dra: $(B)/test/check_dra.o $(DRA_PARTS_O) $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_YAML) $(PKG_CURL) $(PKG_PBC) $(PKG_CHECK)
