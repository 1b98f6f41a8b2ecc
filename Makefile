# gshare — top-level build.
#
# Each directory contributes a fragment (*/*.mk) that appends to the
# variables below; this file holds only what is common.  Outputs go to
# $(B) (build/, or build-asan/ / build-tsan/ for sanitizer builds), never
# into the source tree.
#
#   make deps            install build and test dependencies (Debian 12)
#   make / make all      build everything
#   make test            build and run every test (plus the ASan+UBSan pass, format-check and py-check)
#   make format-check    the files of scripts/format-files.txt as clang-format writes them
#   make py-check        pyflakes over every Python file (part of make test)
#   make format          rewrite those files as clang-format writes them
#   make test-unit       run the tests of one build only (SANITIZE=... selects it)
#   make asan | tsan     the tests under ASan+UBSan / ThreadSanitizer
#   make valgrind        the unit tests under valgrind memcheck
#   make bench           build and run the benchmarks (not part of make test)
#   make install         the image's file layout under DESTDIR (docs/install.md)
#   make image           the OCI image, without a registry ($(B)/image/)
#   make manifest        regenerate manifests/gshare.yaml (and gshare-dra.yaml, gshare-monitoring.yaml) from charts/gshare

# Compile on every core unless the caller chose a -j: a fresh clone's
# `make test` builds three trees (plain, ASan, arm64), which one core took
# minutes to do.  The suites run one after the other (test: below), each
# running its entries in parallel itself (test/run-tests.sh).
ifeq ($(MAKELEVEL)$(filter -j% --jobserver%,$(MAKEFLAGS)),0)
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif

CUDA_HOME ?= /usr/local/cuda
SANITIZE  ?=
WERROR    ?= 1
CC        ?= gcc
PYTHON    ?= /usr/bin/python3

# CROSS=aarch64-linux-gnu: a cross build with Debian's cross compiler and
# the arm64 libraries of multiarch (make deps installs both), into
# build-aarch64-linux-gnu/.
CROSS     ?=
PKG_CONFIG ?= pkg-config
ifneq ($(CROSS),)
B := build-$(CROSS)
CC := $(CROSS)-gcc
AR := $(CROSS)-ar
PKG_CONFIG := $(CROSS)-pkg-config
else ifeq ($(SANITIZE),)
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

PKG_GRPC  = $(shell $(PKG_CONFIG) --libs grpc 2>/dev/null)
PKG_PBC   = $(shell $(PKG_CONFIG) --libs libprotobuf-c 2>/dev/null)
PKG_YAML  = $(shell $(PKG_CONFIG) --libs yaml-0.1 2>/dev/null)
PKG_CURL  = $(shell $(PKG_CONFIG) --libs libcurl 2>/dev/null)
PKG_CHECK = $(shell $(PKG_CONFIG) --libs check 2>/dev/null)

# Filled in by the fragments.
BINS    :=   # programs that ship
LIBS    :=   # shared libraries that ship
# Every test, in the order run: the one list in test/tests.list (check_NAME
# is the program $(B)/test/check_NAME; anything else a script's path; a
# test marked "plain" runs in the plain build only).
TEST_LIST := $(shell awk -v san="$(SANITIZE)" '{ sub(/\#.*/, "") } NF && !($$2 == "plain" && san != "") { print $$1 }' test/tests.list)
# An entry SCRIPT:CASE runs one case of a script (test/run-tests.sh).
TESTS   := $(foreach t,$(TEST_LIST),$(if $(filter check_%,$(t)),$(B)/test/$(t),$(t)))
TEST_FILES = $(sort $(foreach t,$(TESTS),$(patsubst check_%,$(B)/test/check_%,$(firstword $(subst :, ,$(t))))))
BENCHES :=   # benchmark executables and scripts, run by make bench
TEST_DEPS :=  # anything else the tests need built (fake driver, test programs)

.PHONY: all test test-unit asan tsan valgrind bench deps clean cuda-check install image manifest cross-arm64 \
	format-check format py-check
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

# The agent's headers, one folder per layer.  agent/layers.txt says which
# folders each may use; its objects get those include paths only, so an
# include against the layers does not compile (test/test_layers.py checks
# the calls).  AGENT_INC (every folder) is for main, tests and benches.
layer_uses = $(shell awk -v f=$(1) '{ sub(/\#.*/, "") } $$1 == f { for (i = 1; i <= NF; i++) print $$i }' agent/layers.txt)
layer_inc = $(patsubst %,-I%,$(filter agent/%,$(call layer_uses,$(1))))
AGENT_LAYERS := base alloc domain sessions services
AGENT_INC := $(call layer_inc,agent)

include common/module.mk
# One fragment per part (agent/alloc.mk, agent/agent.mk, hook/hook.mk, ...),
# so parts can be added without editing this file.
include $(sort $(wildcard agent/*.mk hook/*.mk plugin/*.mk dra/*.mk test/*.mk test/*/*.mk bench/*.mk))

all: $(BINS) $(LIBS) | cuda-check

test:
	$(MAKE) format-check
	$(MAKE) py-check
	$(MAKE) test-unit
	$(MAKE) asan
	$(MAKE) cross-arm64

# .clang-format holds the code's style; scripts/format-files.txt the files
# held to it so far (docs/development.md: why not all, what is left).
format-check:
	@scripts/format-check.sh

format:
	@scripts/format-check.sh --fix

# Undefined names, unused imports and the like in every Python file of the
# tree (tests, benches, tools): a test's typo otherwise shows only when the
# path it is on runs.
py-check:
	@$(PYTHON) -m pyflakes $$(git ls-files '*.py' 2>/dev/null || find . -name '*.py' -not -path './build*') && \
	  echo "py-check: pyflakes found nothing"

test-unit: $(BINS) $(LIBS) $(TEST_FILES) $(TEST_DEPS)
	@test/check-list.sh
	@B=$(B) PYTHON=$(PYTHON) SANITIZE=$(SANITIZE) test/run-tests.sh $(TESTS)

asan:
	$(MAKE) SANITIZE=asan test-unit

# Every test program, the agent, the plugin and the hook are TSan-built;
# test/run-tests.sh points TSAN_OPTIONS at test/tsan.supp (uninstrumented
# gRPC/Abseil only).
tsan:
	$(MAKE) SANITIZE=tsan OPT=-O1 test-unit

# The shipped programs and the hook for arm64 (GH200/GB200 nodes): they must
# build there with -Werror and be arm64 ELF files; the hook still needs
# only libc.
ARM64 := aarch64-linux-gnu
cross-arm64:
	$(MAKE) CROSS=$(ARM64) all
	@set -e; d=build-$(ARM64); for f in gshare-agent gsharectl gshare-device-plugin gshare-dra-plugin libgshare.so; do \
	  $(ARM64)-readelf -h $$d/$$f | grep -q 'Machine: *AArch64' || { echo "cross-arm64: $$d/$$f is not arm64" >&2; exit 1; }; done; \
	  n=$$($(ARM64)-readelf -d $$d/libgshare.so | grep NEEDED | grep -v 'libc.so' | wc -l); \
	  [ $$n -eq 0 ] || { echo "cross-arm64: libgshare.so needs more than libc" >&2; exit 1; }; \
	  echo "cross-arm64: agent, gsharectl, device and DRA plugins, hook built for arm64"

valgrind: $(TEST_FILES) $(TEST_DEPS)
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
	scripts/mkimage.sh $(B)/image/base $(B)/image/rootfs
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(B)/image/rootfs)

manifest:
	$(PYTHON) scripts/render-chart.py charts/gshare --manifest > manifests/gshare.yaml.new
	mv manifests/gshare.yaml.new manifests/gshare.yaml
	$(PYTHON) scripts/render-chart.py charts/gshare --manifest --set mode=dra > manifests/gshare-dra.yaml.new
	mv manifests/gshare-dra.yaml.new manifests/gshare-dra.yaml
	$(PYTHON) scripts/render-chart.py charts/gshare --manifest --template monitoring.yaml \
	  --set config.metricsAddress=0.0.0.0:9400 --set monitoring.dashboard.enabled=true \
	  --set monitoring.podMonitor.enabled=true --set monitoring.prometheusRule.enabled=true \
	  > manifests/gshare-monitoring.yaml.new
	mv manifests/gshare-monitoring.yaml.new manifests/gshare-monitoring.yaml

# --one-file-system: never into a file system mounted under the tree (rm
# stops there, saying so).
clean:
	rm -rf --one-file-system build build-asan build-tsan

-include $(shell find $(B) -path $(B)/image -prune -o -name '*.d' -type f -print 2>/dev/null)
