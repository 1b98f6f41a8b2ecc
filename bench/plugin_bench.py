#!/usr/bin/python3
"""Benchmark of gshare-device-plugin through its gRPC API.

8 GPUs x 140 units behind an agent (the stand-in by default,
GSHARE_BENCH_AGENT=real for $B/gshare-agent).  Measures the time from the
plugin's start to the first ListAndWatch message at the kubelet stand-in,
Allocate round-trip latency (plugin + agent) over sequential calls, and the
plugin's peak RSS (VmHWM).  Last line:
RESULT allocate_p50_ms=... allocate_p99_ms=... first_list_ms=... plugin_rss_mib=...
"""
import concurrent.futures
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "plugin"))
import gsproto  # noqa: E402
import grpc  # noqa: E402

B = os.environ.get("B", "build")
AGENT = os.environ.get("GSHARE_BENCH_AGENT", "standin")
NGPUS, UNITS, NCALLS = 8, 140, int(os.environ.get("GSHARE_BENCH_CALLS", "500"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    tmp = tempfile.mkdtemp(prefix="gshare-plugin-bench-")
    ns = gsproto.load(tmp)
    dp = ns.dp
    kdir = os.path.join(tmp, "dp")
    os.makedirs(kdir)
    asock = os.path.join(tmp, "agent.sock")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("kubeletDir: %s\nagentSocket: %s\nsocketRoot: %s/alloc\nlogLevel: warn\n" % (kdir, asock, tmp))
    if AGENT == "standin":
        agent = subprocess.Popen(["/usr/bin/python3", os.path.join(gsproto.REPO, "test", "plugin", "standin_agent.py"),
                                  "--socket", asock, "--gpus", str(NGPUS), "--units", str(UNITS), "--tmp", tmp],
                                 stdout=subprocess.DEVNULL)
    else:
        # The real agent on the fake driver, sized like the stand-in: 8 GPUs
        # of 141 GiB, 1 GiB chunks and units, 1 GiB reserve = 140 units each
        # (the fake's memory is sparse memfds: nothing is touched).
        fake = os.path.join(gsproto.REPO, B, "test", "fakecuda", "libcuda.so.1")
        with open(cfg, "a") as f:
            f.write("cudaLibrary: %s\nchunkSize: 1Gi\nunitSize: 1Gi\nreserve: 1Gi\nstateDir: %s/state\n" % (fake, tmp))
        env = dict(os.environ, GSHARE_FAKECUDA_DEVICES=str(NGPUS), GSHARE_FAKECUDA_MEM="%dGi" % (UNITS + 1),
                   GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"))
        agent = subprocess.Popen([os.path.join(gsproto.REPO, B, "gshare-agent"), "--config", cfg], env=env)
    for _ in range(200):
        if os.path.exists(asock):
            break
        time.sleep(0.05)

    registered = queue.Queue()

    class Reg(ns.dp_grpc.RegistrationServicer):
        def Register(self, request, context):
            registered.put(time.monotonic())
            return dp.Empty()

    kube = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    ns.dp_grpc.add_RegistrationServicer_to_server(Reg(), kube)
    kube.add_insecure_port("unix:" + os.path.join(kdir, "kubelet.sock"))
    kube.start()

    t0 = time.monotonic()
    plugin = subprocess.Popen([os.path.join(gsproto.REPO, B, "gshare-device-plugin"), "--config", cfg])
    try:
        registered.get(timeout=20)
        ch = grpc.insecure_channel("unix:" + os.path.join(kdir, "gshare.sock"))
        stub = ns.dp_grpc.DevicePluginStub(ch)
        stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        stream = stub.ListAndWatch(dp.Empty())
        first = next(stream)
        first_ms = (time.monotonic() - t0) * 1000
        ids = [d.ID for d in first.devices]
        assert len(ids) == NGPUS * UNITS, len(ids)
        assert all(d.health == "Healthy" for d in first.devices)
        lat = []
        for i in range(NCALLS):
            req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=[ids[i]])])
            s = time.perf_counter()
            r = stub.Allocate(req, timeout=10)
            lat.append((time.perf_counter() - s) * 1000)
            assert len(r.container_responses) == 1
        stream.cancel()
        with open("/proc/%d/status" % plugin.pid) as f:
            hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    finally:
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(10)
        agent.terminate()
        # The fake driver looks through /proc for holders of each chunk it
        # releases: 1128 chunks take seconds.
        agent.wait(60)
        kube.stop(0)
        shutil.rmtree(tmp, ignore_errors=True)
    p50, p99 = pct(lat, 50), pct(lat, 99)
    print("agent=%s gpus=%d units/gpu=%d devices=%d allocate calls=%d" % (AGENT, NGPUS, UNITS, len(ids), NCALLS))
    print("allocate ms: p50 %.3f p90 %.3f p99 %.3f max %.3f" % (p50, pct(lat, 90), p99, max(lat)))
    print("targets: allocate p99 < 5 ms: %s; plugin RSS < 20 MiB: %s" %
          ("met" if p99 < 5 else "MISSED", "met" if hwm / 1024 < 20 else "MISSED"))
    print("RESULT allocate_p50_ms=%.3f allocate_p99_ms=%.3f first_list_ms=%.1f plugin_rss_mib=%.1f"
          % (p50, p99, first_ms, hwm / 1024.0))


if __name__ == "__main__":
    main()
