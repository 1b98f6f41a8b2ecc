# bench/: gshare-device-plugin benchmark (Allocate latency, first list, RSS).
BENCHES += bench/plugin_bench.py
