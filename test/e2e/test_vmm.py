#!/usr/bin/python3
"""End-to-end: an application's cuMemCreate pieces of 2 and 20 MiB through
the hook and the real agent on the fake driver, filled to out of memory,
half released at random and refilled, round after round: every round
reaches the whole quota, and every chunk is back after the process exits.
Reuses test_e2e.py's agent harness."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402

VMM = os.path.join(e.BD, "test/e2e/e2e_vmm")


def main():
    for f in (e.AGENT, e.CTL, e.FAKE, e.HOOK, VMM):
        if not os.path.exists(f):
            raise SystemExit("missing %s: run make first" % f)
    tmp = tempfile.mkdtemp(prefix="gshare-e2e-vmm-")
    ag = e.Agent(tmp)
    ag.start()
    try:
        uuid = ag.gpus()[0]["uuid"]
        pool0 = [(g["chunks_total"], g["chunks_free"]) for g in ag.gpus()]
        A = ag.create(["%s-u0" % uuid, "%s-u1" % uuid])["allocation"]
        q = A["parts"][0]["quota_bytes"] // e.MiB
        r = e.run([VMM, "30", "7"], e.hook_env(ag, A), timeout=120)
        out = r.stdout.split()
        lowest = int(out[3]) if r.returncode == 0 and len(out) >= 6 else 0
        e.check(r.returncode == 0 and lowest == q,
                "vmm: 30 rounds of 2/20 MiB pieces refilled after random releases reach the whole "
                "%d MiB quota, stamps intact: %s%s" % (q, r.stdout.strip(), r.stderr))
        e.check(e.wait_idle(ag, A["id"]) is not None, "vmm: the allocation is idle after exit")
        ag.ctl("release", A["id"])
        e.check([(g["chunks_total"], g["chunks_free"]) for g in ag.gpus()] == pool0,
                "vmm: every chunk is back in the pool, none retired")
    finally:
        ag.stop()
    if e.failures:
        print("log of the agent:\n" + open(ag.log.name).read())
        print("%d checks failed" % len(e.failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
