# plugin/: gshare-device-plugin, the kubelet device-plugin API server.

# protoc-c 1.4 names the Registration service's method slot `register`, a C
# keyword; rename that one struct member (only the whole word matches, so
# v1beta1__registration__register and friends are untouched).  An explicit
# rule takes precedence over proto/module.mk's pattern rule.
$(B)/proto/deviceplugin_v1beta1.pb-c.c $(B)/proto/deviceplugin_v1beta1.pb-c.h &: proto/deviceplugin_v1beta1.proto
	@mkdir -p $(B)/proto
	protoc-c --proto_path=proto --c_out=$(B)/proto $<
	sed -i -E 's/\bregister\b/register_/g' $(B)/proto/deviceplugin_v1beta1.pb-c.h

PLUGIN_SRC := $(wildcard plugin/*.c)
PLUGIN_O   := $(patsubst %.c,$(B)/%.o,$(PLUGIN_SRC))

$(B)/gshare-device-plugin: $(PLUGIN_O) $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $(PLUGIN_O) $(COMMON_A) $(PKG_GRPC) $(PKG_PBC) $(PKG_YAML) -lpthread

BINS += $(B)/gshare-device-plugin

$(B)/test/check_config: $(B)/test/check_config.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_YAML) $(PKG_PBC) $(PKG_CHECK)

$(B)/test/check_grpc: $(B)/test/check_grpc.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_GRPC) $(PKG_PBC) $(PKG_CHECK) -lpthread


# test/check_policy.c: the placement policy on a mirror of fake GPUs.
$(B)/test/check_policy.o: CPPFLAGS += -Iplugin
$(B)/test/check_policy: $(B)/test/check_policy.o $(B)/plugin/gs_policy.o $(COMMON_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_PBC) $(PKG_CHECK) -lpthread
