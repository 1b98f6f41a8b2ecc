#!/usr/bin/python3
"""Benchmark of the agent's side of DRA prepare and unprepare.

CreateClaimAllocation (what gshare-dra-plugin's NodePrepareResources asks
the agent) then ReleaseAllocation by claim UID (NodeUnprepareResources),
GSHARE_BENCH_CALLS times (default 200) over one control connection, on the
real agent and the fake driver.  Both write the checkpoint: the figure is
mostly the file replace's fsyncs.  Last line:
RESULT claim_create_p50_ms=... claim_create_p99_ms=... claim_release_p50_ms=... claim_release_p99_ms=... n=...
"""
import os
import shutil
import socket
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "plugin"))
sys.path.insert(0, os.path.join(HERE, "..", "test", "e2e"))
import gsproto  # noqa: E402
import test_e2e as e2e  # noqa: E402

N = int(os.environ.get("GSHARE_BENCH_CALLS", "200"))
tmp = tempfile.mkdtemp(prefix="claim-bench-")
ns = gsproto.load(tmp)
ag = e2e.Agent(tmp, ["--reconcile-interval", "0"])
ag.start()
try:
    uuid = ag.gpus()[0]["uuid"]

    sk = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sk.settimeout(20)
    sk.connect(ag.sock)

    def recvn(n):
        b = b""
        while len(b) < n:
            d = sk.recv(n - len(b))
            assert d
            b += d
        return b

    def call(req):
        body = req.SerializeToString()
        sk.sendall(struct.pack("<I", len(body)) + body)
        n = struct.unpack("<I", recvn(4))[0]
        rep = ns.ctl.Reply.FromString(recvn(n))
        assert rep.error == 0, rep.message
        return rep
    cr, rl = [], []
    for i in range(N):
        uid = "be4c0000-0000-4000-8000-%012d" % i
        req = ns.ctl.Request(create_claim_allocation=ns.ctl.CreateClaimAllocationRequest(
            claim_uid=uid, claim_namespace="b", claim_name="c%d" % i, gpu_uuid=uuid, units=2))
        t = time.perf_counter()
        call(req)
        cr.append((time.perf_counter() - t) * 1000)
        req = ns.ctl.Request(release_allocation=ns.ctl.ReleaseAllocationRequest(claim_uid=uid))
        t = time.perf_counter()
        call(req)
        rl.append((time.perf_counter() - t) * 1000)
finally:
    ag.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


print("RESULT claim_create_p50_ms=%.3f claim_create_p99_ms=%.3f claim_release_p50_ms=%.3f claim_release_p99_ms=%.3f n=%d"
      % (pct(cr, 50), pct(cr, 99), pct(rl, 50), pct(rl, 99), N))
