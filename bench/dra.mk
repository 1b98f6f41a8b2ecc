# bench/dra.mk — dra_bench: NodePrepareResources and NodeUnprepareResources
# round trips through gshare-dra-plugin and the real agent on the fake
# driver, with test/dra/test_dra.py's stand-ins (kubelet, API server,
# PodResources).
BENCHES += bench/dra_bench.py
