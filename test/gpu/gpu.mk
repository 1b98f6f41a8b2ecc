# test/gpu: the framework suite for a real GPU (not part of make test: CI has
# no GPU). `make gpu-build` builds its two programs; `make gpu-suite` runs it.
NVCC ?= $(CUDA_HOME)/bin/nvcc
GPU_TEST_BINS := $(B)/test-gpu/kernel_check $(B)/test-gpu/bypass

$(B)/test-gpu/kernel_check: test/gpu/kernel_check.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=sm_90 -o $@ $<

# Linked against the driver itself (the toolkit's stub at build time, the
# real libcuda.so.1 at run time): it is the process that bypasses the hook.
$(B)/test-gpu/bypass: test/gpu/bypass.c | cuda-check
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda

.PHONY: gpu-build gpu-suite
gpu-build: $(BINS) $(LIBS) $(GPU_TEST_BINS)
gpu-suite: gpu-build
	B=$(B) test/gpu/run.sh
