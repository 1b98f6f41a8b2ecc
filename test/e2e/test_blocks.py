#!/usr/bin/python3
"""The live-block caps end to end (issue 10, item 5).

The agent's memory grows with the blocks a process keeps live, so the
blocks are capped per process (maxBlocksPerProcess) and per allocation on a
GPU (maxBlocksPerAllocation).  Starts the real agent on the fake driver with
small caps in its config file and checks, through the hook, that cuMemAlloc
past either cap fails with CUDA_ERROR_OUT_OF_MEMORY, that a free makes room
again, and that the agent's accounting is whole afterwards.
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e2e  # noqa: E402

PER_PROC = 50
PER_ALLOC = 80
OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY


def blocks(env, n):
    """e2e_cuda blocks n, run to the end: (count, result, again)."""
    r = e2e.run([e2e.CUDA, "blocks", str(n)], env)
    return parse(r.stdout), r


def parse(out):
    got = {}
    for line in out.splitlines():
        w = line.split()
        if w and w[0] in ("blocks", "again"):
            got[w[0]] = [int(x) for x in w[1:]]
    return got


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-blocks-")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("maxBlocksPerProcess: %d\nmaxBlocksPerAllocation: %d\n" % (PER_PROC, PER_ALLOC))
    ag = e2e.Agent(tmp, ["--config", cfg])
    ag.start()
    try:
        body(ag)
    finally:
        if ag.proc:
            ag.stop()
    e2e.report(ag, tmp)


def body(ag):
    uuid = ag.gpus()[0]["uuid"]
    A = ag.create(["%s-u0" % uuid])["allocation"]
    env = e2e.hook_env(ag, A)

    # One process: PER_PROC blocks, then out of memory; a free makes room.
    got, r = blocks(env, 10 * PER_PROC)
    e2e.check(r.returncode == 0 and got.get("blocks") == [PER_PROC, OOM] and got.get("again") == [0],
              "a process gets %d live blocks, then CUDA_ERROR_OUT_OF_MEMORY; after a free one more: %s%s"
              % (PER_PROC, r.stdout.strip(), r.stderr))
    e2e.check(e2e.wait_idle(ag, A["id"]) is not None, "its blocks and chunks are back after it exits")

    # Two processes of one allocation: PER_ALLOC between them.
    holder = subprocess.Popen([e2e.CUDA, "blocks", str(PER_PROC)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = parse(holder.stdout.readline())
    e2e.check(first.get("blocks") == [PER_PROC, 0], "a first process holds %d blocks: %s" % (PER_PROC, first))
    procs = ag.allocs()[A["id"]]["processes"]
    e2e.check(len(procs) == 1, "the agent lists the holding process")
    got, r = blocks(env, PER_PROC)
    e2e.check(r.returncode == 0 and got.get("blocks") == [PER_ALLOC - PER_PROC, OOM] and got.get("again") == [0],
              "a second process gets the allocation's other %d, then CUDA_ERROR_OUT_OF_MEMORY: %s%s"
              % (PER_ALLOC - PER_PROC, r.stdout.strip(), r.stderr))
    holder.stdin.close()
    e2e.check(holder.wait(timeout=30) == 0, "the holder frees its blocks and exits")
    e2e.check(e2e.wait_idle(ag, A["id"]) is not None, "the allocation is idle after both")

    # The cap was the only limit: with the holder gone a process again gets
    # its full PER_PROC.
    got, r = blocks(env, 10 * PER_PROC)
    e2e.check(got.get("blocks") == [PER_PROC, OOM], "a process again gets %d: %s" % (PER_PROC, r.stdout.strip()))
    e2e.check(ag.alive(), "the agent is still serving")


if __name__ == "__main__":
    main()
