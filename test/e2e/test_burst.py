#!/usr/bin/python3
"""test_burst.py — burstable memory, the per-allocation burst limit
(docs/burst.md, issue 22, item 1).

On the fake driver (one GPU: 28 chunks of 32 MiB, units of 64 MiB):

  burst     allocation A, 2 units (128 MiB) with burst 512 MiB: its process
            sees cuMemGetInfo total 512 MiB while the system list has the
            room, fills exactly 512 MiB (384 MiB of it borrowed), and the
            listing shows burst and borrowed chunks; after it exits nothing
            stays borrowed
  plain     allocation B, 4 units, no burst: exactly its quota, as before
  short     with only k chunks free on the system list, A's total is its
            quota plus k chunks, and it obtains that much
  errors    burst below the quota, over the pool, past burstMax, or another burst for an
            existing allocation: refused with a message naming the problem,
            nothing created or changed
  lent      a create that needs chunks A's live process borrowed: refused,
            naming the lent chunks; once A frees them (borrowed chunks go
            back at once), the same create succeeds
  restart   the burst survives an agent restart (checkpoint burst=)

Environment: B (build dir), SANITIZE (see test_e2e.py)."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402


def fill(ag, alloc):
    r = e.run([e.CUDA, "fill", "1"], e.hook_env(ag, alloc), timeout=120)
    m = re.search(r"obtained (\d+) MiB limit (\d+) MiB", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m and r.returncode == 0 else (-1, -1)


def meminfo(ag, alloc):
    r = e.run([e.CUDA, "meminfo"], e.hook_env(ag, alloc))
    m = re.search(r"free (\d+) total (\d+)", r.stdout)
    return (int(m.group(1)) // MiB, int(m.group(2)) // MiB) if m else (-1, -1)


def part(ag, aid):
    return ag.allocs()[aid]["parts"][0]


def main():
    e.need(e.AGENT, e.CTL, e.FAKE, e.HOOK, e.CUDA)
    tmp = tempfile.mkdtemp(prefix="gshare-burst-")
    ag = e.Agent(tmp, ["--burst-max", "512Mi"])  # bursts may borrow up to 512 MiB
    ag.start()
    try:
        uuid = ag.gpus()[0]["uuid"]
        ids = ["%s-u%d" % (uuid, u) for u in range(14)]

        # ---- errors first: nothing may be created by a refused request
        r = ag.ctl("create", "--burst", "64Mi", ids[0], ids[1], ok=False)
        check(r.returncode == 1 and "burst 64Mi is below the quota on GPU %s's 128Mi" % uuid in r.stderr,
              "burst below the quota refused, naming it (%s)" % r.stderr.strip())
        r = ag.ctl("create", "--burst", "4Gi", ids[0], ids[1], ok=False)
        check(r.returncode == 1 and "burst 4Gi is more than the pool of GPU" in r.stderr,
              "burst over the GPU's pool refused (%s)" % r.stderr.strip())
        r = ag.ctl("create", "--burst", "768Mi", ids[0], ids[1], ok=False)
        check(r.returncode == 1 and "burst 768Mi borrows 640Mi past the quota on GPU %s; this node allows 512Mi "
              "(burstMax)" % uuid in r.stderr, "burst past burstMax refused (%s)" % r.stderr.strip())
        r = ag.ctl("create", "--burst", "lots", ids[0], ok=False)
        check(r.returncode == 2 and "--burst needs a size" in r.stderr, "bad --burst size: usage error")
        check(ag.allocs() == {} and ag.units_allocated() == 0, "refused requests created nothing")

        # ---- burst: A borrows up to its limit
        A = ag.create_args(["--burst", "512Mi", ids[0], ids[1]])["allocation"]
        B = ag.create(ids[2:6])["allocation"]
        pa = A["parts"][0]
        check(pa["quota_bytes"] == 128 * MiB and pa["burst_bytes"] == 512 * MiB,
              "A: quota 128 MiB, burst 512 MiB in the listing (%d, %d)" % (pa["quota_bytes"], pa["burst_bytes"]))
        check(B["parts"][0]["burst_bytes"] == B["parts"][0]["quota_bytes"], "B: no burst: burst = quota")
        free, total = meminfo(ag, A)
        check(total == 512 and free == 512, "A's cuMemGetInfo: what it may use now, 512 of 512 MiB (%d of %d)"
              % (free, total))
        got, limit = fill(ag, A)
        check(got == 512, "A fills its burst, 512 MiB of which 384 borrowed (got %d, limit %d)" % (got, limit))
        free, total = meminfo(ag, B)
        check(total == 256 and free == 256, "B's cuMemGetInfo is its quota, as before (%d of %d)" % (free, total))
        got, _ = fill(ag, B)
        check(got == 256, "B obtains exactly its quota (%d MiB)" % got)
        check(e.wait_idle(ag, A["id"]) is not None and part(ag, A["id"])["chunks_borrowed"] == 0,
              "A's process gone: nothing stays borrowed")

        # ---- short: only some chunks free on the system list
        rest = ag.create(ids[6:12])["allocation"]  # 6 units: 12 chunks; 28 - 4 - 8 - 12 = 4 stay free
        free, total = meminfo(ag, A)
        check(total == 128 + 4 * 32, "A's total with 4 chunks free: quota + 128 MiB (%d)" % total)
        got, _ = fill(ag, A)
        check(got == 256, "A obtains quota + the 4 free chunks (%d MiB)" % got)
        ag.ctl("release", rest["id"])

        # ---- again: the same burst finds A, another is refused
        again = ag.create_args(["--burst", "512Mi", ids[0], ids[1]])
        check(again["allocation"]["id"] == A["id"] and not again.get("created", False),
              "the same burst finds the allocation")
        r = ag.ctl("create", "--burst", "1Gi", ids[0], ids[1], ok=False)
        check(r.returncode == 1 and "exists with burst 512Mi, not 1Gi" in r.stderr,
              "another burst for an existing allocation refused (%s)" % r.stderr.strip())

        # ---- lent: chunks a live borrower caches come back for a create
        a = subprocess.Popen([e.CUDA, "grow", "0"], env=e.hook_env(ag, A), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def say(cmd):
            a.stdin.write(cmd + "\n")
            a.stdin.flush()
            return a.stdout.readline().split()
        check(a.stdout.readline().startswith("held"), "lent: A's process runs")
        check(all(say("alloc 40") == ["alloc", "ok"] for _ in range(8)), "lent: A allocates 320 MiB (borrowing)")
        lent = part(ag, A["id"])["chunks_borrowed"]
        check(lent > 0, "lent: %d chunks borrowed by A" % lent)
        need = ids[6:14]  # 8 units: 16 chunks, of the 16 that B and A's quota leave
        r = ag.ctl("create", *need, ok=False)
        check(r.returncode == 1 and "%d are lent to allocations borrowing past their quota" % lent in r.stderr,
              "lent: a create needing them is refused naming the lent chunks (%s)" % r.stderr.strip())
        check(say("free") == ["free", "ok"], "lent: A frees its blocks")
        check(e.wait_for(lambda: ag.gpus()[0]["chunks_free"] >= 16) is not None,
              "lent: the borrowed chunks are back on the system list")
        r = ag.ctl("create", *need, ok=False)
        check(r.returncode == 0, "lent: the same create succeeds then (%s)" % r.stderr.strip())
        check(a.poll() is None, "lent: A runs on")
        a.kill()
        a.wait()
        if r.returncode == 0:
            ag.ctl("release", json.loads(r.stdout)["allocation"]["id"])

        # ---- restart: the burst is in the checkpoint
        ckpt = open(os.path.join(tmp, "state", "allocations")).read()
        check(re.search(r"^%s .* burst=%d$" % (A["id"], 512 * MiB), ckpt, re.M) is not None,
              "checkpoint line of A ends in burst=536870912")
        check(re.search(r"^%s .* burst=" % B["id"], ckpt, re.M) is None, "B's line has no burst=")
        ag.stop()
        ag.start()
        after = ag.allocs()
        check(after[A["id"]]["parts"][0]["burst_bytes"] == 512 * MiB and
              after[B["id"]]["parts"][0]["burst_bytes"] == 256 * MiB, "restart: bursts restored")
        got, _ = fill(ag, A)
        check(got == 512, "restart: A fills its burst again (%d MiB)" % got)
    finally:
        ag.stop()
    e.report(ag, tmp)


if __name__ == "__main__":
    main()
