#!/usr/bin/python3
"""Benchmark of gshare-dra-plugin's NodePrepareResources and
NodeUnprepareResources, through the stand-ins of test/dra/test_dra.py: a
DRA kubelet stand-in (Python grpcio, one channel kept open as the kubelet
does), the fake API server holding the ResourceClaims, a PodResources
stand-in showing no pod, and the real gshare-agent on the fake driver (one
1 GiB GPU, 64 MiB units).

Each round prepares one claim of 128 MiB (a claim read from the API
server, the agent's CreateClaimAllocation, its CDI spec written) and
unprepares it (the agent's ReleaseAllocation, the spec removed); every
round's claim is a new one.  Measures each call's round trip at the
kubelet stand-in.  Last line:
RESULT prepare_p50_ms=... prepare_p99_ms=... unprepare_p50_ms=...
"""
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "dra"))
import test_dra as td  # noqa: E402  (also puts test/plugin, recon, e2e on the path)

import grpc  # noqa: E402

NCALLS = int(os.environ.get("GSHARE_BENCH_CALLS", "300"))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    td.e2e.need(td.recon.AGENT, td.recon.FAKE, td.PLUGIN)
    tmp = tempfile.mkdtemp(prefix="gshare-dra-bench-")
    gns = td.gsproto.load(tmp)
    ns = td.load_stubs(tmp)
    api = td.FakeApi()
    podres = td.recon.PodResources(gns, os.path.join(tmp, "podres.sock"))
    podres.start()
    os.makedirs(os.path.join(tmp, "nvproc"))
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write(td.TOKEN + "\n")
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write("podResourcesSocket: %s\nreconcileInterval: 200ms\nreclaimGrace: 60s\npodWatch: off\n"
                "apiServer: http://127.0.0.1:%d\napiTokenFile: %s\napiCaFile: \"\"\nlogLevel: warn\n"
                "hookPath: %s\npreloadPath: %s\n"
                % (podres.path, api.port, os.path.join(tmp, "token"), td.HOSTHOOK, td.HOSTPRELOAD))
    ag = td.e2e.Agent(tmp, ["--config", conf])
    ag.start()
    plugin = td.Plugin(tmp, conf, ag.sock)
    prep, unprep = [], []
    try:
        plugin.start()
        td.register(ns, plugin)
        if td.wait_for(lambda: api.slice() is not None) is None:
            raise SystemExit("no ResourceSlice published:\n" + plugin.logtext())
        with grpc.insecure_channel("unix:" + plugin.endpoint) as ch:
            stub = ns.dra_grpc.DRAPluginStub(ch)
            for i in range(NCALLS + 1):
                uid = "%08x-0000-4000-8000-%012x" % (0xbe000000 + i, i)
                name = "bench-%d" % i
                api.set_claim("bench", name, uid, memory="128Mi", share="s-%d" % i)
                claim = [ns.dra.Claim(namespace="bench", name=name, uid=uid)]
                t0 = time.perf_counter()
                rep = stub.NodePrepareResources(ns.dra.NodePrepareResourcesRequest(claims=claim), timeout=20)
                t1 = time.perf_counter()
                if rep.claims[uid].error:
                    raise SystemExit("prepare %s: %s" % (uid, rep.claims[uid].error))
                rep = stub.NodeUnprepareResources(ns.dra.NodeUnprepareResourcesRequest(claims=claim), timeout=20)
                t2 = time.perf_counter()
                if rep.claims[uid].error:
                    raise SystemExit("unprepare %s: %s" % (uid, rep.claims[uid].error))
                if i:  # the first round warms the channel up
                    prep.append((t1 - t0) * 1000)
                    unprep.append((t2 - t1) * 1000)
    finally:
        plugin.stop()
        ag.stop()
        podres.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("rounds=%d (one claim of 128 MiB each)" % len(prep))
    print("prepare ms: p50 %.3f p90 %.3f p99 %.3f max %.3f" % (pct(prep, 50), pct(prep, 90), pct(prep, 99),
                                                             max(prep)))
    print("unprepare ms: p50 %.3f p90 %.3f p99 %.3f max %.3f" % (pct(unprep, 50), pct(unprep, 90),
                                                               pct(unprep, 99), max(unprep)))
    print("RESULT prepare_p50_ms=%.3f prepare_p99_ms=%.3f unprepare_p50_ms=%.3f"
          % (pct(prep, 50), pct(prep, 99), pct(unprep, 50)))


if __name__ == "__main__":
    main()
