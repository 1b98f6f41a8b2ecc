# gshare — top-level build.
#
# Each directory contributes a fragment (*/*.mk) that appends to the
# variables below; this file holds only what is common.  Outputs go to
# $(B) (build/, or build-asan/ / build-tsan/ for sanitizer builds), never
# into the source tree.
#
#   make deps            install build and test dependencies (Debian 12)
#   make / make all      build everything
#   make test            build and run every test (plus the ASan+UBSan pass)
#   make test-unit       run the tests of one build only (SANITIZE=... selects it)
#   make asan | tsan     the tests under ASan+UBSan / ThreadSanitizer
#   make valgrind        the unit tests under valgrind memcheck
#   make bench           build and run the benchmarks (not part of make test)
#   make install         the image's file layout under DESTDIR (docs/install.md)
#   make image           the OCI image, without a registry ($(B)/image/)
#   make manifest        regenerate manifests/gshare.yaml (and gshare-dra.yaml) from charts/gshare

CUDA_HOME ?= /usr/local/cuda
SANITIZE  ?=
WERROR    ?= 1
CC        ?= gcc
PYTHON    ?= /usr/bin/python3

ifeq ($(SANITIZE),)
B := build
else
B := build-$(SANITIZE)
endif

WARNINGS := -Wall -Wextra -Wformat=2 -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wpointer-arith -Wwrite-strings \
	-Wimplicit-fallthrough -fno-common
ifeq ($(WERROR),1)
WARNINGS += -Werror
endif

SAN_FLAGS :=
ifeq ($(SANITIZE),asan)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
endif
ifeq ($(SANITIZE),tsan)
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
endif

OPT      ?= -O2
CPPFLAGS += -D_GNU_SOURCE -Icommon -I$(B)/proto -I$(CUDA_HOME)/include
CFLAGS   := -std=gnu11 $(OPT) -g -fPIC $(WARNINGS) $(SAN_FLAGS) $(EXTRA_CFLAGS)
LDFLAGS  := $(SAN_FLAGS) -Wl,-z,relro,-z,now

PKG_GRPC  = $(shell pkg-config --libs grpc 2>/dev/null)
PKG_PBC   = $(shell pkg-config --libs libprotobuf-c 2>/dev/null)
PKG_YAML  = $(shell pkg-config --libs yaml-0.1 2>/dev/null)
PKG_CURL  = $(shell pkg-config --libs libcurl 2>/dev/null)
PKG_CHECK = $(shell pkg-config --libs check 2>/dev/null)

# Filled in by the fragments.
BINS    :=   # programs that ship
LIBS    :=   # shared libraries that ship
TESTS   :=   # test executables and scripts, run in order by test/run-tests.sh
BENCHES :=   # benchmark executables and scripts, run by make bench
TEST_DEPS :=  # anything else the tests need built (fake driver, test programs)

.PHONY: all test test-unit asan tsan valgrind bench deps clean cuda-check install image manifest
.DEFAULT_GOAL := all

# cuda.h is the only header not from a Debian package; say so plainly.
cuda-check:
	@test -f $(CUDA_HOME)/include/cuda.h || { \
	  echo "error: $(CUDA_HOME)/include/cuda.h not found; install the CUDA toolkit" \
	       "(headers only are needed) or run make CUDA_HOME=/path/to/cuda" >&2; exit 1; }

include proto/module.mk

# Generated protobuf headers are order-only prerequisites of every object:
# a first build has no .d files to say which object includes which.
$(B)/%.o: %.c | cuda-check $(PROTO_H)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

include common/module.mk
# One fragment per part (agent/alloc.mk, agent/agent.mk, hook/hook.mk, ...),
# so parts can be added without editing this file.
include $(sort $(wildcard agent/*.mk hook/*.mk plugin/*.mk dra/*.mk test/*.mk test/*/*.mk bench/*.mk))

all: $(BINS) $(LIBS) | cuda-check

test: test-unit asan

test-unit: $(BINS) $(LIBS) $(TESTS) $(TEST_DEPS)
	@B=$(B) PYTHON=$(PYTHON) SANITIZE=$(SANITIZE) test/run-tests.sh $(TESTS)

asan:
	$(MAKE) SANITIZE=asan test-unit

# Every test program, the agent, the plugin and the hook are TSan-built;
# test/run-tests.sh points TSAN_OPTIONS at test/tsan.supp (uninstrumented
# gRPC/Abseil only).
tsan:
	$(MAKE) SANITIZE=tsan OPT=-O1 test-unit

valgrind: $(TESTS) $(TEST_DEPS)
	@B=$(B) PYTHON=$(PYTHON) VALGRIND=1 test/run-tests.sh $(filter $(B)/test/check_%,$(TESTS))

bench: $(BINS) $(LIBS) $(BENCHES) $(TEST_DEPS)
	@set -e; for b in $(BENCHES); do echo "== $$b"; B=$(B) PYTHON=$(PYTHON) $$b; done

deps:
	./scripts/deps.sh

# The image's files, the one list shared by the Dockerfile, make image and the
# install tests (test/install): programs in /usr/local/bin, the hook in
# /usr/local/lib/gshare (where gshare-install-hook takes it from).
DESTDIR ?=
install: $(BINS) $(LIBS)
	install -d -m 0755 $(DESTDIR)/usr/local/bin $(DESTDIR)/usr/local/lib/gshare
	install -m 0755 $(BINS) scripts/gshare-install-hook $(DESTDIR)/usr/local/bin/
	install -m 0644 $(HOOK_SO) $(DESTDIR)/usr/local/lib/gshare/libgshare.so

# IMAGE: the name the archive carries (the chart's image.repository:tag).
IMAGE ?= ghcr.io/gshare/gshare:0.1.0
# $(B)/image/rootfs is the image's tree (Debian base + make install), which
# the install tests run the DaemonSet's containers in; gshare.tar its archive.
image: $(B)/image/rootfs/usr/local/bin/gshare-install-hook
	$(PYTHON) scripts/oci-image.py $(B)/image/rootfs $(IMAGE) $(B)/image/gshare.tar

$(B)/image/rootfs/usr/local/bin/gshare-install-hook: $(BINS) $(LIBS) scripts/gshare-install-hook \
		scripts/image-packages scripts/mkimage.sh
	scripts/mkimage.sh $(B)/image/base
	rm -rf $(B)/image/rootfs
	cp -a $(B)/image/base $(B)/image/rootfs
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(B)/image/rootfs)

manifest:
	$(PYTHON) scripts/render-chart.py charts/gshare --manifest > manifests/gshare.yaml.new
	mv manifests/gshare.yaml.new manifests/gshare.yaml
	$(PYTHON) scripts/render-chart.py charts/gshare --manifest --set mode=dra > manifests/gshare-dra.yaml.new
	mv manifests/gshare-dra.yaml.new manifests/gshare-dra.yaml

clean:
	rm -rf build build-asan build-tsan

-include $(shell find $(B) -path $(B)/image -prune -o -name '*.d' -type f -print 2>/dev/null)
