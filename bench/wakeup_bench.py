#!/usr/bin/python3
"""wakeup_bench: do requests wait for a wake-up the agent missed? (issue 19)

The real agent (on the fake driver here; on a GPU, docs/benchmarks.md)
serves GSHARE_BENCH_PROCS (default 4) processes of one allocation, each an
e2e_wire wakeup client with one thread making alloc+free pairs of 256 B,
10^6 requests in all (GSHARE_BENCH_REQUESTS).  The clients ring the
agent's doorbell exactly once per request and never again: a lost wake-up
is a request that waits until its 10 s limit.  Prints each process's line;
last

  RESULT wakeup_stalls_per_million=X max_request_ms=Y hangs=N

wakeup_stalls_per_million: requests that took over 5 ms, per 10^6;
max_request_ms: the longest request; hangs: requests never answered.
Target: 0 stalls over 5 ms (on a machine with a core per process and
the agent's threads; on fewer cores the scheduler makes some).

Environment: B (build dir), GSHARE_BENCH_PROCS, GSHARE_BENCH_REQUESTS,
GSHARE_BENCH_CUDA (a libcuda.so.1 other than the fake: a real GPU; then
GSHARE_LIBDIR is the agent's library path).
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "e2e"))
import test_e2e as e  # noqa: E402


def main():
    procs = int(os.environ.get("GSHARE_BENCH_PROCS", "4"))
    total = int(os.environ.get("GSHARE_BENCH_REQUESTS", "1000000"))
    pairs = max(1, total // (2 * procs))
    e.need(e.AGENT, e.CTL, e.WIRE)
    tmp = tempfile.mkdtemp(prefix="gshare-wakeup-bench-")
    ag = e.Agent(tmp)
    ag.env["GSHARE_FAKECUDA_MEM"] = "2Gi"
    cuda = os.environ.get("GSHARE_BENCH_CUDA")
    if cuda:
        ag.extra += ["--cuda-library", cuda]
        ag.env["LD_LIBRARY_PATH"] = os.environ.get("GSHARE_LIBDIR", "")
    ag.start()
    done = over = hangs = 0
    worst = 0.0
    try:
        uuid = ag.gpus()[0]["uuid"]
        A = ag.create(["%s-u%d" % (uuid, u) for u in range(4)])["allocation"]
        ps = [subprocess.Popen([e.WIRE, "wakeup", e.sockpath(A), "1", str(pairs)], env=ag.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(procs)]
        for p in ps:
            out, err = p.communicate(timeout=1800)
            print(out.strip(), err.strip()[-300:])
            m = re.search(r"wakeup: (\d+) requests, (\d+) over 5 ms, longest ([\d.]+) ms, (\d+) unanswered", out)
            if not m:
                raise SystemExit("no figures from a client: %s %s" % (out, err))
            done += int(m.group(1))
            over += int(m.group(2))
            worst = max(worst, float(m.group(3)))
            hangs += int(m.group(4))
    finally:
        ag.stop()
    print("RESULT wakeup_stalls_per_million=%.1f max_request_ms=%.1f hangs=%d"
          % (over * 1e6 / max(done, 1), worst, hangs))


if __name__ == "__main__":
    main()
