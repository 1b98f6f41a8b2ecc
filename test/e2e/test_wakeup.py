#!/usr/bin/env python3
"""test_wakeup.py — no request depends on a re-ring (issue 19, item 4).

Clients that ring the agent's doorbell exactly once per request (e2e_wire
wakeup: unlike the hook, they never ring again) make alloc+free pairs from
several threads and processes while CPU burners load the machine.  A
request the agent leaves unanswered for seconds is a lost wake-up: a hang,
not a timing.  The figures (requests over 5 ms, the longest) are printed,
not asserted."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import check  # noqa: E402

PROCS = 4
THREADS = 4
PAIRS = int(os.environ.get("GSHARE_WAKEUP_PAIRS", "6000"))
BURNERS = 2


def main():
    e.need(e.AGENT, e.CTL, e.FAKE, e.WIRE)
    tmp = tempfile.mkdtemp(prefix="gshare-wakeup-")
    ag = e.Agent(tmp)
    ag.env["GSHARE_FAKECUDA_MEM"] = "2Gi"  # a chunk per connection: 16 of 32 MiB and room
    ag.start()
    burners = []
    try:
        uuid = ag.gpus()[0]["uuid"]
        A = ag.create(["%s-u%d" % (uuid, u) for u in range(12)])["allocation"]
        sock = e.sockpath(A)
        burn = "import time\nt = time.monotonic() + 600\nwhile time.monotonic() < t: pass\n"
        burners = [subprocess.Popen(["/usr/bin/python3", "-c", burn]) for _ in range(BURNERS)]
        ps = [subprocess.Popen([e.WIRE, "wakeup", sock, str(THREADS), str(PAIRS)], env=ag.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(PROCS)]
        for i, p in enumerate(ps):
            out, err = p.communicate(timeout=600)
            check(p.returncode == 0, "process %d of %d, %d threads ringing once per request: every request "
                  "answered: %s %s" % (i, PROCS, THREADS, out.strip(), err.strip()[-600:]))
        check(ag.alive(), "the agent runs on")
    finally:
        for b in burners:
            b.kill()
            b.wait()
        ag.stop()
    e.report(ag, tmp)


if __name__ == "__main__":
    main()
