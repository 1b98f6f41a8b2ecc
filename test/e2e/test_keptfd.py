#!/usr/bin/python3
"""Kept fds cannot take memory past the quota (hostile tenant), on the fake
driver, which keeps memory used while any process holds an fd or a mapping of
it, as a GPU does.

A process of a 64 MiB allocation (with and without a 64 MiB balloon) keeps
the fd of every chunk and VMM allocation it is sent, frees and releases
them and asks again, many times.  Must hold: the distinct memory it can
reach stays within its quota plus balloon cap; the GPU's whole use stays
within pool + reserve + the agent's context (nothing is created twice);
after it exits every chunk is back in the pool with memory and nothing is
lost.

Environment: B (build dir), SANITIZE.
"""
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
from test_density import fake_used  # noqa: E402
from test_e2e import wait_for  # noqa: E402  (seconds, or None after a hang)


def ck(what, cond):
    return check(cond, what)


def attack(ag, units, cap):
    gpu = ag.gpus()[0]
    chunks_before = gpu["chunks_total"]
    a = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in units])["allocation"]
    quota = a["parts"][0]["quota_bytes"]
    p = subprocess.Popen([e2e.WIRE, "keepfd", e2e.sockpath(a), "20"], env=ag.env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout.readline().split()
    kept = int(out[3]) if len(out) == 5 else -1
    used, _ = fake_used(ag)
    g = ag.gpus()[0]
    pool = chunks_before * g["chunk_bytes"]
    ck("balloon %d MiB: the kept memory stays within quota + cap (%d MiB of %d)" %
       (cap // MiB, kept // MiB, (quota + cap) // MiB), 0 <= kept <= quota + cap)
    ck("balloon %d MiB: the GPU's use stays within pool + reserve + context (%d MiB <= %d)" %
       (cap // MiB, used // MiB, (pool + g["reserve_bytes"]) // MiB + 64),
       used <= pool + g["reserve_bytes"] + 64 * MiB)
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait(timeout=20)
    ok = wait_for(lambda: not ag.allocs()[a["id"]]["processes"])
    ag.ctl("release", a["id"])
    back = wait_for(lambda: ag.gpus()[0]["chunks_total"] == chunks_before and
                    ag.gpus()[0]["chunks_free"] == chunks_before)
    g = ag.gpus()[0]
    ck("balloon %d MiB: after it exits every chunk is back in the pool (%d/%d free)" %
       (cap // MiB, g["chunks_free"], chunks_before), ok is not None and back is not None)


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.WIRE, e2e.FAKE)
    for cap in (0, 64 * MiB):
        tmp = tempfile.mkdtemp(prefix="gshare-keptfd-")
        ag = e2e.Agent(tmp, ["--balloon-cap", "%dMi" % (cap // MiB), "--reconcile-interval", "0"])
        ag.start()
        try:
            attack(ag, [0], cap)
        finally:
            ag.stop()
        e2e.report(ag, tmp)


if __name__ == "__main__":
    main()
