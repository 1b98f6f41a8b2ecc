# test/fakenvml: a fake libnvidia-ml.so.1 for tests (never shipped), with
# test/fakecuda's GPU UUIDs.  Test programs link it with $(FAKENVML_LINK)
# (they must live in $(B)/test/) or dlopen it by soname.
FAKENVML_DIR  := $(B)/test/fakenvml
FAKENVML_SO   := $(FAKENVML_DIR)/libnvidia-ml.so.1
FAKENVML_LINK := -L$(FAKENVML_DIR) -lnvidia-ml -Wl,-rpath,'$$ORIGIN/fakenvml'

$(FAKENVML_SO): $(B)/test/fakenvml/fakenvml.o
	$(CC) -shared -Wl,-soname,libnvidia-ml.so.1 $(LDFLAGS) -Wl,-z,defs -o $@ $^
	ln -sf libnvidia-ml.so.1 $(FAKENVML_DIR)/libnvidia-ml.so

TEST_DEPS += $(FAKENVML_SO)
