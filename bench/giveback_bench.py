#!/usr/bin/python3
"""giveback_bench: memory freed on one path, obtained on another (issue 19).

The real agent, one allocation of GSHARE_BENCH_UNITS units (default 8 on
the fake driver's 1 GiB GPU); one hooked process (e2e_cuda paths): cuMemAlloc
blocks of BLOCK MiB until out of memory, free them all; cuMemCreate pieces
of 2 MiB until out of memory, release them all; cuMemAlloc again.  For
BLOCK = 1 MiB, one chunk and 1.25 chunks (coalesced), prints what each path
obtained; last

  RESULT vmm_after_alloc_pct=X alloc_after_vmm_pct=Y

vmm_after_alloc_pct: the least, over the block sizes, of what cuMemCreate
obtained as a percentage of what cuMemAlloc had (target >= 95);
alloc_after_vmm_pct: the same for the second cuMemAlloc against the first.

Environment: B (build dir), GSHARE_BENCH_UNITS, GSHARE_BENCH_CUDA (a
libcuda.so.1 other than the fake: a real GPU; then GSHARE_LIBDIR is the
library path of the agent and the hooked process)."""
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test", "e2e"))
import test_e2e as e  # noqa: E402


def main():
    units = int(os.environ.get("GSHARE_BENCH_UNITS", "8"))
    e.need(e.AGENT, e.CTL, e.CUDA, e.HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-giveback-bench-")
    ag = e.Agent(tmp)
    cuda = os.environ.get("GSHARE_BENCH_CUDA")
    if cuda:
        ag.extra += ["--cuda-library", cuda]
        ag.env["LD_LIBRARY_PATH"] = os.environ.get("GSHARE_LIBDIR", "")
    ag.start()
    worst_v = worst_a = 1e9
    try:
        g = ag.gpus()[0]
        A = ag.create(["%s-u%d" % (g["uuid"], u) for u in range(units)])["allocation"]
        cmib = g["chunk_bytes"] >> 20
        # 1 MiB: one empty chunk cached; a chunk; 1.25 chunks: coalesced
        # blocks, whose chunks are cached whole.
        for block in (1, cmib, cmib + cmib // 4):
            r = e.run([e.CUDA, "paths", str(block), "2"], e.hook_env(ag, A), timeout=600)
            m = re.search(r"paths: alloc (\d+) MiB, then vmm (\d+) MiB, then alloc (\d+) MiB", r.stdout)
            if not m:
                raise SystemExit("e2e_cuda paths %d failed: %s %s" % (block, r.stdout, r.stderr[-500:]))
            a, v, a2 = (int(x) for x in m.groups())
            print("block %d MiB: cuMemAlloc %d MiB, then cuMemCreate %d MiB, then cuMemAlloc %d MiB (quota %d MiB)"
                  % (block, a, v, a2, A["parts"][0]["quota_bytes"] >> 20))
            worst_v = min(worst_v, 100.0 * v / max(a, 1))
            worst_a = min(worst_a, 100.0 * a2 / max(a, 1))
    finally:
        ag.stop()
    print("RESULT vmm_after_alloc_pct=%.1f alloc_after_vmm_pct=%.1f" % (worst_v, worst_a))


if __name__ == "__main__":
    main()
