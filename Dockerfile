# gshare image: agent, device plugin, gsharectl and the hook.
#   docker build -t gshare:dev .
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      gcc make pkg-config libgrpc-dev protobuf-c-compiler libprotobuf-c-dev \
      libyaml-dev libcurl4-openssl-dev ca-certificates && rm -rf /var/lib/apt/lists/*
# cuda.h only (no CUDA libraries are linked; libcuda.so.1 comes from the
# node's driver at run time through the NVIDIA container runtime).
COPY --from=nvidia/cuda:13.0.0-base-ubuntu24.04 /usr/local/cuda/include /usr/local/cuda/include
WORKDIR /src
COPY . .
RUN make -j"$(nproc)" all

FROM debian:12-slim
RUN apt-get update && apt-get install -y --no-install-recommends \
      libgrpc29 libprotobuf-c1 libyaml-0-2 libcurl4 ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/gshare-agent /src/build/gshare-device-plugin /src/build/gsharectl /usr/local/bin/
COPY --from=build /src/build/libgshare.so /usr/local/lib/gshare/libgshare.so
COPY scripts/gshare-install-hook /usr/local/bin/gshare-install-hook
ENTRYPOINT ["/usr/local/bin/gshare-agent"]
