#!/usr/bin/python3
"""Two GPUs in one allocation (issue: two GPUs), on the fake driver with two
devices, which refuses a copy that touches VMM memory its context's device
was not given access to (as a GPU faults).  A process of an allocation with
units on both GPUs copies a block of GPU 0 into one of GPU 1 with GPU 1's
context current and reads GPU 0's block from there: the hook grants every
GPU of the allocation access to its memory (peer access).

Environment: B (build dir), SANITIZE.
"""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402
from test_e2e import check  # noqa: E402


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-peer-")
    ag = e2e.Agent(tmp)
    ag.env["GSHARE_FAKECUDA_DEVICES"] = "2"
    ag.start()
    try:
        gpus = ag.gpus()
        check(len(gpus) == 2, "the agent pools both fake GPUs")
        both = ag.create(["%s-u0" % gpus[0]["uuid"], "%s-u0" % gpus[1]["uuid"]])["allocation"]
        r = e2e.run([e2e.CUDA, "peer"], e2e.hook_env(ag, both))
        check(r.returncode == 0 and "peer ok" in r.stdout,
              "GPU 1 copies and reads GPU 0's gshare memory in one pod: %s" % (r.stdout + r.stderr).strip()[-300:])
        one = ag.create(["%s-u1" % gpus[0]["uuid"]])["allocation"]
        r = e2e.run([e2e.CUDA, "peer"], e2e.hook_env(ag, one))
        # Exactly this refusal: its block on GPU 0 is made, cuMemAlloc on
        # GPU 1 fails with out-of-memory and the hook says why (e2e_cuda
        # exits 1 after "FAIL: <step>: <error>"); a crash or any other
        # failure does not pass.
        ok = (r.returncode == 1 and "peer ok" not in r.stdout and
              "FAIL: device 1 block: CUDA_ERROR_OUT_OF_MEMORY" in r.stderr and
              "device 1 is not part of this container's gshare allocation" in r.stderr)
        check(ok, "an allocation on GPU 0 alone gets no memory on GPU 1 (OOM there, its GPU 0 block made)" +
              ("" if ok else ": rc %d %s" % (r.returncode, (r.stdout + r.stderr).strip()[-300:])))
    finally:
        ag.stop()
    e2e.report(ag, tmp)


if __name__ == "__main__":
    main()
