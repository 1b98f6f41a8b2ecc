#!/usr/bin/python3
"""Kept fds cannot take memory past the quota (hostile tenant), on the fake
driver, which keeps memory used while any process holds an fd or a mapping of
it, as a GPU does.

A process A of a 64 MiB allocation (with and without a 64 MiB balloon) keeps
the fd of every chunk and VMM allocation it is sent, maps it and writes its
own pattern on every page (e2e_keptfd), frees and releases them and asks
again, many times, in several orders:

  keepfd  two chunks, then a one-chunk VMM allocation, each round
  v       a VMM allocation of the whole quota, released (issue 28: 512 MiB
          on a 64 MiB quota after 8 rounds, the agent showing nothing held)
  cv, vc  chunks of the whole quota and a VMM allocation of it, both orders
  hcv     a one-chunk VMM allocation, chunks, a VMM allocation of the quota

While A lives, must hold: the distinct memory A reaches stays within its
quota plus balloon cap, every page of it holding A's pattern; the GPU's
whole use stays within pool + reserve + the agent's context (nothing is
created twice); what A keeps of its VMM allocations stays charged to its
allocation; a process B of another allocation of most of the rest of the
GPU obtains its whole quota (A took nothing of B's); after A exits every
chunk is back in the pool with memory and nothing is lost.  Once with the
agent killed (kill -9) and restarted while A holds its fds: the new agent
charges the same (its ledger) and B still obtains its quota.

Environment: B (build dir), SANITIZE.
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402
from test_e2e import MiB, check, wait_for  # noqa: E402
from test_density import fake_used  # noqa: E402

B_UNITS = 10  # 640 MiB: the rest of the 896 MiB pool leaves room for A's balloon


def ck(what, cond):
    return check(cond, what)


def part(ag, aid):
    return ag.allocs()[aid]["parts"][0]


def restart(ag):
    """kill -9, then a new agent on the same state directory."""
    ag.proc.kill()
    ag.proc.wait(timeout=20)
    os.unlink(ag.sock)
    ag.start()
    ck("the agent answers after its restart", wait_for(lambda: ag.ctl("gpus", ok=False).returncode == 0)
       is not None)


def attack(ag, cap, args, tag, rst=False):
    gpu = ag.gpus()[0]
    chunks_before = gpu["chunks_total"]
    cb = gpu["chunk_bytes"]
    a = ag.create(["%s-u0" % gpu["uuid"]])["allocation"]
    quota = a["parts"][0]["quota_bytes"]
    p = subprocess.Popen([e2e.KEPTFD, args[0], e2e.sockpath(a)] + args[1:], env=ag.env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = p.stdout.readline().split()
    kept = int(out[3]) if len(out) == 9 and out[0] == "kept" else -1
    what = "%s, balloon %d MiB%s" % (tag, cap // MiB, ", agent restarted" if rst else "")
    ck("%s: A ran its rounds (%s)" % (what, " ".join(out)), kept >= 0)
    if rst:
        restart(ag)
    g = ag.gpus()[0]
    pool = chunks_before * cb
    ck("%s: the memory A keeps stays within quota + cap (%d MiB of %d)" %
       (what, kept // MiB, (quota + cap) // MiB), 0 <= kept <= quota + cap)
    used, _ = fake_used(ag)
    ck("%s: the GPU's use stays within pool + reserve + context (%d MiB <= %d)" %
       (what, used // MiB, (pool + g["reserve_bytes"]) // MiB + 64),
       used <= pool + g["reserve_bytes"] + 64 * MiB)
    if "v" in args[-1] and "c" not in args[-1]:
        # Nothing of A's is in its pprocs' chunks: what it keeps is its
        # VMM allocations', charged to the allocation (requested too, but
        # a restarted agent knows only the chunks its ledger names).
        pa = part(ag, a["id"])
        ck("%s: what A keeps of its VMM allocations is charged (%d MiB held by the allocation, "
           "%d MiB requested)" % (what, pa["used_bytes"] // MiB, pa["bytes_requested"] // MiB),
           pa["used_bytes"] >= kept and (rst or pa["bytes_requested"] >= kept))
    # Another pod's process gets its whole quota: A took none of its memory.
    b = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in range(1, 1 + B_UNITS)])["allocation"]
    h = subprocess.Popen([e2e.WIRE, "hold", e2e.sockpath(b), str(b["parts"][0]["quota_bytes"])], env=ag.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    held = h.stdout.readline().strip()
    h.kill()
    _, err = h.communicate(timeout=20)
    ck("%s: B obtains its whole quota while A keeps its fds (%s)" % (what, held or err.strip()), held == "held")
    wait_for(lambda: not ag.allocs()[b["id"]]["processes"])
    ag.ctl("release", b["id"])
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait(timeout=60)
    rest = p.stdout.read().strip()
    ck("%s: every page A kept held A's pattern (%s)" % (what, rest), p.returncode == 0 and " 0 wrong" in rest)
    ok = wait_for(lambda: not ag.allocs()[a["id"]]["processes"])
    ag.ctl("release", a["id"])
    back = wait_for(lambda: ag.gpus()[0]["chunks_total"] == chunks_before and
                    ag.gpus()[0]["chunks_free"] == chunks_before)
    g = ag.gpus()[0]
    ck("%s: after A exits every chunk is back in the pool (%d/%d free)" %
       (what, g["chunks_free"], chunks_before), ok is not None and back is not None)


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.WIRE, e2e.KEPTFD, e2e.FAKE)
    cases = [(["keepfd", "20"], "kept chunks and one-chunk VMM"),
             (["vmm", "8", "v"], "8 VMM allocations of the quota"),
             (["vmm", "4", "cv"], "chunks then VMM"),
             (["vmm", "4", "vc"], "VMM then chunks"),
             (["vmm", "4", "hcv"], "VMM of a chunk, chunks, VMM of the quota")]
    for cap in (0, 64 * MiB):
        tmp = tempfile.mkdtemp(prefix="gshare-keptfd-")
        ag = e2e.Agent(tmp, ["--balloon-cap", "%dMi" % (cap // MiB), "--reconcile-interval", "0"])
        ag.start()
        try:
            for args, tag in cases:
                attack(ag, cap, args, tag)
            attack(ag, cap, ["vmm", "8", "v"], "8 VMM allocations of the quota", rst=True)
        finally:
            ag.stop()
        e2e.report(ag, tmp)


if __name__ == "__main__":
    main()
