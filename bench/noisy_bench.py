#!/usr/bin/python3
"""noisy_bench: the churning pod of the noisy-neighbour benchmark (issue 19,
item 3) through the real agent and hook, on the fake driver.

test/gpu/noisy_neighbour.py measures on a GPU how much such a pod slows a
training pod; the fake driver has no GPU to share, so this counts what the
agent does for the churning pod instead: GSHARE_BENCH_CHURNERS (4) hooked
processes of one allocation (12 units of 1 GiB, chunks of 64 MiB), each
keeping 32 blocks of random sizes (4 KiB .. 64 MiB, uniform) and
allocating and freeing in a loop (cuMemAlloc/cuMemFree through ctypes, the
hook preloaded: noisy_neighbour.py's churner), for GSHARE_BENCH_SECONDS
(5).  The agent's log at exit says how each chunk sent to a process was
made ready: clean, back to its writer, zeroed on the request path (what
slowed the neighbour on the H100), waited for the scrubber; and what the
scrubber zeroed.  Also: the churners' alloc/free per second and the
agent's CPU.

GSHARE_BENCH_COMPARE=DIR: the same with the build in DIR too (gshare-agent,
gsharectl, libgshare.so; an earlier build prints no scrub figures).

Last line:
  RESULT noisy_fake_grants=N grants_scrubbed_sync=N grants_waited=N
         scrubbed_bg=N churn_ops_per_s=X agent_cpu_pct=X
"""
import os
import sys
import tempfile
import time
from types import SimpleNamespace

B = os.environ.get("B", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BD = B if os.path.isabs(B) else os.path.join(ROOT, B)
sys.path.insert(0, os.path.join(ROOT, "test", "gpu"))
import noisy_neighbour as nn  # noqa: E402

FAKE = os.path.join(BD, "test/fakecuda/libcuda.so.1")
SECONDS = float(os.environ.get("GSHARE_BENCH_SECONDS", "5"))
CHURNERS = int(os.environ.get("GSHARE_BENCH_CHURNERS", "4"))


def say(msg):
    print("noisy_bench: " + msg, flush=True)


def run(name, bdir, tmp):
    state = os.path.join(tmp, name + ".fakecuda")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GSHARE_SOCKET")}
    env.update(GSHARE_FAKECUDA_STATE=state, GSHARE_FAKECUDA_MEM="16Gi", GSHARE_FAKECUDA_DEVICES="1",
               LD_LIBRARY_PATH=os.path.dirname(FAKE), PYTHONUNBUFFERED="1")
    args = SimpleNamespace(churners=CHURNERS, live=32, dist="uniform", settle=0.0, backend="cuda")
    ag = nn.Agent(name, bdir, env, "512Mi", tmp, extra=("--cuda-library", FAKE, "--reconcile-interval", "0"))
    try:
        env_b = dict(env, **ag.create(0, 12))
        ps = nn.churners_start(env_b, args, os.path.join(tmp, name + "-churners.log"), 0)
        c0, t0 = nn.cpu_ticks(ag.p.pid), time.monotonic()
        time.sleep(SECONDS)
        cpu = (nn.cpu_ticks(ag.p.pid) - c0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0)
        ops, secs, ooms = nn.churners_stop(ps)
    finally:
        res = ag.stop()
    try:
        os.unlink(state)
    except OSError:
        pass
    res.update(ops_per_s=ops / secs if secs else 0.0, cpu_pct=100 * cpu, ooms=ooms)
    say("%s: %d churners, %.0f alloc/free per s (%d out of memory), agent CPU %.0f %%" %
        (name, CHURNERS, res["ops_per_s"], ooms, res["cpu_pct"]))
    if "scrub_line" in res:
        say("%s: agent %s" % (name, res["scrub_line"]))
    return res


def main():
    for f in (FAKE, os.path.join(BD, "gshare-agent"), os.path.join(BD, "libgshare.so")):
        if not os.path.exists(f):
            raise SystemExit("noisy_bench: %s not built" % f)
    tmp = tempfile.mkdtemp(prefix="gs-noisy-bench.")
    r = run("gshare", BD, tmp)
    cmp_dir = os.environ.get("GSHARE_BENCH_COMPARE")
    extra = ""
    if cmp_dir:
        c = run("compare", cmp_dir, tmp)
        extra = " compare_churn_ops_per_s=%.0f compare_agent_cpu_pct=%.0f" % (c["ops_per_s"], c["cpu_pct"])
        if "grants" in c:
            extra += " compare_grants_scrubbed_sync=%d" % c.get("grants_scrubbed_sync", 0)
    print("RESULT noisy_fake_grants=%d grants_scrubbed_sync=%d grants_waited=%d scrubbed_bg=%d "
          "churn_ops_per_s=%.0f agent_cpu_pct=%.0f%s" %
          (r.get("grants", 0), r.get("grants_scrubbed_sync", 0), r.get("grants_waited", 0),
           r.get("scrubbed_bg", 0), r["ops_per_s"], r["cpu_pct"], extra), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
