# gshare image: agent, device plugin, gsharectl, the hook and its installer.
#   docker build -t <registry>/gshare:0.1.0 .
# Needs a registry (debian:12, and an nvidia/cuda *devel* image for cuda.h:
# the base and runtime images carry no headers).  Without a registry,
# `make image` builds the same layout (scripts/mkimage.sh): the same Debian
# packages (scripts/image-packages) and the same files (`make install`).
ARG CUDA_HEADERS_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
FROM ${CUDA_HEADERS_IMAGE} AS cuda

FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      gcc make pkg-config libgrpc-dev protobuf-c-compiler libprotobuf-c-dev \
      libyaml-dev libcurl4-openssl-dev ca-certificates && rm -rf /var/lib/apt/lists/*
# cuda.h only (it includes nothing but stdlib.h and stdint.h); no CUDA
# library is linked: libcuda.so.1 comes from the node's driver at run time
# through the NVIDIA container runtime.
COPY --from=cuda /usr/local/cuda/include/cuda.h /usr/local/cuda/include/cuda.h
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" all && make install DESTDIR=/out

FROM debian:12-slim
COPY scripts/image-packages /tmp/image-packages
RUN apt-get update && apt-get install -y --no-install-recommends \
      $(sed -e 's/#.*//' /tmp/image-packages) && rm -rf /var/lib/apt/lists/* /tmp/image-packages
COPY --from=build /out/ /
ENTRYPOINT ["/usr/local/bin/gshare-agent"]
