#!/usr/bin/python3
"""test_giveback.py — memory a process frees is usable again on any path,
by it and by the other processes of its pod (issue 19, item 1).

The hook keeps chunks without a live block mapped (cached for the next
request: a freed coalesced block whole, one empty chunk); the agent asks
for them back when memory is wanted elsewhere (GS_OP_GIVE_BACK,
gs_shm.give_back).  On the fake driver, one allocation of 512 MiB:

  paths   one process: cuMemAlloc fills and frees, then cuMemCreate (VMM)
          must obtain the whole quota, then cuMemAlloc all it had before
          (blocks of 1 MiB: one cached chunk; of 40 MiB: coalesced blocks
          cached whole)
  others  process A allocates and frees 320 MiB in coalesced blocks and
          keeps calling the driver; process B of the same pod then fills:
          it must obtain the quota less what A's context-free process
          still holds (nothing), not the quota less A's cache.
  idle    the same with A idle (blocked on its stdin, no CUDA call): its
          hook's thread gives the cached chunks back when the agent asks
          (issue 28, item 7).  A then still allocates.

Environment: B (build dir), SANITIZE (asan: see test_e2e.py)."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

UNITS = 8  # of 64 MiB: 512 MiB, 16 chunks of 32 MiB


def paths(ag, A, quota):
    for block in (1, 40):
        r = e.run([e.CUDA, "paths", str(block), "2"], e.hook_env(ag, A))
        m = re.search(r"paths: alloc (\d+) MiB, then vmm (\d+) MiB, then alloc (\d+) MiB", r.stdout)
        check(r.returncode == 0 and m is not None, "paths %d MiB: ran (%s %s)"
              % (block, r.stdout.strip(), r.stderr.strip()[-300:]))
        if not m:
            continue
        a, v, a2 = (int(x) for x in m.groups())
        check(v * MiB == quota, "paths %d MiB blocks: cuMemCreate after cuMemAlloc filled %d MiB and freed it "
              "obtains the whole quota: %d of %d MiB (vmm_after_alloc_pct %.1f)"
              % (block, a, v, quota // MiB, 100.0 * v / max(a, 1)))
        check(a2 == a, "paths %d MiB blocks: cuMemAlloc after that obtains what it did before: %d, was %d"
              % (block, a2, a))


def others(ag, A, quota, idle=False):
    what = "idle" if idle else "others"
    env = e.hook_env(ag, A)
    a = subprocess.Popen([e.CUDA, "grow", "0"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)

    def say(cmd):
        a.stdin.write(cmd + "\n")
        a.stdin.flush()
        return a.stdout.readline().split()

    check(a.stdout.readline().startswith("held"), "%s: process A runs" % what)
    got = [say("alloc 40") for _ in range(8)]
    check(all(x == ["alloc", "ok"] for x in got), "%s: A allocates 8 blocks of 40 MiB" % what)
    check(say("free") == ["free", "ok"], "%s: A frees them (its hook keeps the chunks cached)" % what)
    held = ag.allocs()[A["id"]]["parts"][0]
    print("info %s: after A's free the allocation has %d of %d chunks free"
          % (what, held["chunks_free"], held["chunks_quota"]))
    check(held["chunks_free"] < held["chunks_quota"], "%s: A keeps chunks cached (%d of %d free)"
          % (what, held["chunks_free"], held["chunks_quota"]))
    if not idle:
        # A keeps calling the driver (cuMemGetInfo) while B fills.
        a.stdin.write("busy 20000\n")
        a.stdin.flush()
    r = e.run([e.CUDA, "fill", "1"], env, timeout=120)
    m = re.search(r"obtained (\d+) MiB", r.stdout)
    got = int(m.group(1)) if m else -1
    check(r.returncode == 0 and got * MiB == quota,
          "%s: process B of the same pod fills the whole quota, A's cached chunks given back: "
          "%d of %d MiB (%s)" % (what, got, quota // MiB, r.stdout.strip()))
    check(a.poll() is None, "%s: A runs on" % what)
    if idle:
        check(say("alloc 40") == ["alloc", "ok"], "%s: A allocates again afterwards" % what)
    a.kill()
    a.wait()


def main():
    e.need(e.AGENT, e.CTL, e.FAKE, e.HOOK, e.CUDA)
    tmp = tempfile.mkdtemp(prefix="gshare-giveback-")
    ag = e.Agent(tmp)
    ag.start()
    try:
        uuid = ag.gpus()[0]["uuid"]
        A = ag.create(["%s-u%d" % (uuid, u) for u in range(UNITS)])["allocation"]
        quota = A["parts"][0]["quota_bytes"]
        paths(ag, A, quota)
        others(ag, A, quota)
        others(ag, A, quota, idle=True)
    finally:
        ag.stop()
    e.report(ag, tmp)


if __name__ == "__main__":
    main()
