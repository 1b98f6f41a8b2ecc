#!/usr/bin/python3
"""Memory outside the pool (issue: many pods on one GPU), on the fake driver.

The fake driver charges every context GSHARE_FAKECUDA_CTX_BYTES and shows
per-process usage through the fake NVML, as a GPU does.  The agent measures
its own context at start and charges that much to an allocation when a
process is about to create one (GS_OP_CTX), releasing pool memory for it;
an NVML scan charges what processes hold outside the pool, growth and
processes that bypass the hook included.  Checks: contexts refused at the
quota (CUDA_ERROR_OUT_OF_MEMORY and one line naming the allocation),
memory back when a process exits, cuMemGetInfo counting contexts, growth
charged, the over-quota policy (kill and report), a bypassing process of
the same pod charged, and the fake GPU's whole use staying within pool +
reserve.

Environment: B (build dir), SANITIZE (asan: see test_e2e.py).
"""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

NVML = os.path.join(e2e.BD, "test/fakenvml/libnvidia-ml.so.1")
CTX = 40 * MiB


def ck(what, cond):
    return check(cond, what)


POD = "0b5e7c1a-2f3d-4e5f-8a9b-0c1d2e3f4a5b"


def metrics(ag):
    import urllib.request
    port = open(ag.config).read().split("127.0.0.1:")[1].split()[0]
    return urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()


class DensityAgent(e2e.Agent):
    """One fake GPU of 1 GiB, contexts of 40 MiB, an NVML scan every 100 ms."""

    def __init__(self, tmp, policy="kill", extra=""):
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w") as f:
            f.write("nvmlLibrary: %s\nusageInterval: 100ms\noverQuota: %s\nmetricsAddress: 127.0.0.1:%d\n%s"
                    % (NVML, policy, e2e.free_port(), extra))
        super().__init__(tmp, ["--config", config])
        self.config = config
        self.env["GSHARE_FAKECUDA_CTX_BYTES"] = str(CTX)
        self.env["GSHARE_PROC_ROOT"] = os.path.join(tmp, "proc")


class Proc:
    """e2e_cuda grow under the hook: registers, creates its context,
    allocates mib, then obeys "module N" and "exit" on stdin."""

    def __init__(self, ag, alloc, mib, hook=True):
        env = e2e.hook_env(ag, alloc) if hook else dict(ag.env)
        self.p = subprocess.Popen([e2e.CUDA, "grow", str(mib)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.line = self.p.stdout.readline().split()
        self.ok = bool(self.line) and self.line[0] == "held"

    def meminfo(self):
        return int(self.line[1]), int(self.line[2])

    def module(self, mib):
        self.p.stdin.write("module %d\n" % mib)
        self.p.stdin.flush()
        return self.p.stdout.readline().split()

    def end(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("exit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        return self.p.stderr.read()


def part(ag, aid):
    return ag.allocs()[aid]["parts"][0]


def wait_for(fn, limit=20.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        v = fn()
        if v:
            return v
        time.sleep(0.02)
    return fn()


def pod_cgroup(tmp, pid):
    d = os.path.join(tmp, "proc", str(pid))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "cgroup"), "w") as f:
        f.write("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/"
                "cri-containerd-0123.scope\n" % POD.replace("-", "_"))


def fake_used(ag):
    """The fake GPU's whole use, as nvidia-smi would show it."""
    import struct
    with open(ag.env["GSHARE_FAKECUDA_STATE"], "rb") as f:
        head = f.read(16 + 8 * 16)
    magic, version, ndev, _ = struct.unpack_from("<IIII", head)
    total = struct.unpack_from("<Q", head, 16)[0]
    used = struct.unpack_from("<Q", head, 16 + 8 * 8)[0]
    return used, total


def contexts(ag, tmp):
    gpu = ag.gpus()[0]
    ck("GPU log names the context size measured at start",
          re.search(r"contexts charged 40 MiB", ag.logtext()) is not None)
    a = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in range(4)])["allocation"]  # 256 MiB
    aid = a["id"]
    procs = []
    # Each process: a 40 MiB context and nothing else; 6 fit in 256 MiB.
    for _ in range(8):
        p = Proc(ag, a, 0)
        procs.append(p)
        if not p.ok:
            break
    ran = [p for p in procs if p.ok]
    refused = procs[-1]
    err = refused.end()
    ck("6 processes with 40 MiB contexts run in a 256 MiB allocation (%d)" % len(ran), len(ran) == 6)
    ck("the 7th is refused at context creation: %r" % err.strip()[:200],
          "no room for a CUDA context" in err and aid in err and "CUDA_ERROR_OUT_OF_MEMORY" in err)
    pt = part(ag, aid)
    ck("outside bytes = 6 contexts (%d MiB)" % (pt["outside_bytes"] // MiB),
          pt["outside_bytes"] == 6 * CTX)
    ck("used counts the contexts (%d MiB)" % (pt["used_bytes"] // MiB),
          pt["used_bytes"] >= 6 * CTX and pt["used_bytes"] <= pt["quota_bytes"])
    m = metrics(ag)
    ck("/metrics: the allocation's outside bytes",
       'gshare_allocation_outside_bytes{allocation="%s",gpu="%s"} %d' % (aid, gpu["uuid"], 6 * CTX) in m)
    ck("/metrics: each process's outside bytes",
       'gshare_process_outside_bytes{allocation="%s",gpu="%s",pid="%d"} %d'
       % (aid, gpu["uuid"], ran[0].p.pid, CTX) in m)
    procs_json = ag.allocs()[aid]["processes"]
    ck("gsharectl: each process shows its context as outside bytes",
       len(procs_json) == 6 and all(p["outside_bytes"] == CTX for p in procs_json))
    fr, total = ran[-1].meminfo()
    ck("cuMemGetInfo: total = quota, free excludes the contexts (free %d MiB)" % (fr // MiB),
          total == 256 * MiB and fr <= 256 * MiB - 6 * CTX)
    used, gtot = fake_used(ag)
    pool = gpu["chunks_total"] * gpu["chunk_bytes"]
    ck("the GPU's whole use stays within pool + reserve + agent context (%d MiB)" % (used // MiB),
          used <= pool + gpu["reserve_bytes"] + CTX)
    # One exits: its context's room comes back and a new process runs.
    ran[0].end()
    ok = wait_for(lambda: part(ag, aid)["outside_bytes"] == 5 * CTX)
    ck("an exited process's context is no longer charged", bool(ok))
    p = Proc(ag, a, 0)
    ck("a new process runs in the room it left", p.ok)
    ran[0] = p
    for q in ran:
        q.end()
    ok = wait_for(lambda: part(ag, aid)["outside_bytes"] == 0 and
                  part(ag, aid)["chunks_free"] == part(ag, aid)["chunks_quota"])
    ck("all processes gone: nothing charged, every chunk back with memory", bool(ok))
    ag.ctl("release", aid)


def growth(ag, tmp, policy):
    gpu = ag.gpus()[0]
    a = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in range(4, 6)])["allocation"]  # 128 MiB
    aid = a["id"]
    p = Proc(ag, a, 32)
    ck("a process with 32 MiB runs", p.ok)
    r = p.module(32)
    ck("it loads a 32 MiB module (%s)" % r, len(r) == 4 and r[1] == "ok")
    ok = wait_for(lambda: part(ag, aid)["outside_bytes"] == CTX + 32 * MiB)
    ck("the scan charges module growth (%d MiB)" % (part(ag, aid)["outside_bytes"] // MiB), bool(ok))
    r = p.module(0)
    ck("cuMemGetInfo's free falls by the module (%s)" % r,
          len(r) == 4 and int(r[2]) <= 128 * MiB - 32 * MiB - CTX - 32 * MiB)
    # Over the quota: 128 MiB - 32 - 40 - 32 = 24 MiB left; 64 more is over.
    r = p.module(64)
    if policy == "kill":
        dead = wait_for(lambda: p.p.poll() is not None)
        ck("overQuota kill: the process over its quota is killed", bool(dead))
        ck("the agent says so", "killed (overQuota: kill)" in ag.logtext())
    else:
        time.sleep(0.5)
        ck("overQuota report: the process lives on", p.p.poll() is None)
        ck("the agent reports it", "over its quota" in ag.logtext() and "report" in ag.logtext())
    p.end()
    wait_for(lambda: not ag.allocs()[aid]["processes"])
    ag.ctl("release", aid)


def bypass(ag, tmp):
    gpu = ag.gpus()[0]
    a = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in range(6, 8)])["allocation"]  # 128 MiB
    aid = a["id"]
    p = Proc(ag, a, 0)
    ck("a hooked process of the pod runs", p.ok)
    pod_cgroup(tmp, p.p.pid)
    q = Proc(ag, a, 0, hook=False)  # no hook: its context is its own business
    pod_cgroup(tmp, q.p.pid)
    ck("a process of the same pod without the hook runs", q.ok)
    ok = wait_for(lambda: part(ag, aid)["outside_bytes"] >= 2 * CTX)
    ck("its context is charged to the pod's allocation (%d MiB)" %
          (part(ag, aid)["outside_bytes"] // MiB), bool(ok))
    r = q.module(64)  # 40 + 40 + 64 > 128: over
    dead = wait_for(lambda: q.p.poll() is not None)
    ck("the bypassing process over the quota is killed (%s)" % r, bool(dead))
    ck("the hooked one lives", p.p.poll() is None)
    p.end()
    q.end()
    wait_for(lambda: not ag.allocs()[aid]["processes"])
    ag.ctl("release", aid)


def over_bytes(ag, aid):
    for line in metrics(ag).splitlines():
        if line.startswith("gshare_allocation_over_quota_bytes{") and 'allocation="%s"' % aid in line:
            return int(line.split()[-1])
    return None


def scans(ag, n):
    """Waits for n more usage scans (the agent counts them in /metrics)."""
    def count():
        for line in metrics(ag).splitlines():
            if line.startswith("gshare_usage_scans_total "):
                return int(line.split()[-1])
        return None
    c0 = count()
    if c0 is None:
        return False
    return wait_for(lambda: count() >= c0 + n, 30)


def catchable(ag, tmp):
    """Issue 19, item 2: a module load past the quota, within overQuotaBound
    (default): the process lives, its allocations fail with
    CUDA_ERROR_OUT_OF_MEMORY, and memory it frees covers the overage."""
    gpu = ag.gpus()[0]
    a = ag.create(["%s-u%d" % (gpu["uuid"], u) for u in range(2, 4)])["allocation"]  # 128 MiB
    aid = a["id"]
    p = Proc(ag, a, 32)
    ck("catchable: a process with 32 MiB runs", p.ok)
    r = p.module(32)
    ck("catchable: it loads a 32 MiB module (%s)" % r, len(r) == 4 and r[1] == "ok")
    # 128 - 40 (context) - 32 (module) - 32 (block) = 24 MiB left; 64 more: 40 over.
    r = p.module(64)
    ck("catchable: the fake driver gives the module its memory from the reserve (%s)" % r,
       len(r) == 4 and r[1] == "ok")
    over = wait_for(lambda: over_bytes(ag, aid), 20)
    ck("catchable: the agent sees the pod over its quota (%s bytes uncovered)" % over,
       bool(over) and over > 0)
    ck("catchable: and says so, killing nobody", "over its quota" in ag.logtext()
       and "no process is killed (within overQuotaBound)" in ag.logtext())
    r = p.p.stdin.write("alloc 1\n") and p.p.stdin.flush()
    line = p.p.stdout.readline().split()
    ck("catchable: meanwhile its cuMemAlloc fails with an error it can catch (%s)" % line,
       line == ["alloc", "CUDA_ERROR_OUT_OF_MEMORY"])
    ck("catchable: many scans later it still lives", bool(scans(ag, 10)) and p.p.poll() is None)
    ck("catchable: not killed", "killed (overQuota: kill)" not in ag.logtext())
    # It frees its 32 MiB: that chunk comes back to cover the overage.
    p.p.stdin.write("free\n")
    p.p.stdin.flush()
    line = p.p.stdout.readline().split()
    ck("catchable: it frees its block (%s)" % line, line == ["free", "ok"])
    p.module(0)  # a call: the hook gives back what the agent asked for
    wait_for(lambda: (lambda v: v is not None and v < over)(over_bytes(ag, aid)), 20)
    left = over_bytes(ag, aid)
    ck("catchable: the freed chunk covers what it can (%s of %s bytes left uncovered)" % (left, over),
       left is not None and left < over)
    ck("catchable: the process lives on", p.p.poll() is None)
    p.end()
    ok = wait_for(lambda: not ag.allocs()[aid]["processes"] and over_bytes(ag, aid) == 0, 20)
    ck("catchable: once it exited nothing is over", bool(ok))
    ag.ctl("release", aid)


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK, NVML)
    # kill: over by more than 8 MiB kills at once; report: never; default:
    # overQuotaBound 256Mi, overQuotaGrace 5s.
    for policy, extra in (("kill", "overQuotaBound: 8Mi\noverQuotaGrace: 0s\n"), ("report", ""),
                          ("default", "")):
        tmp = tempfile.mkdtemp(prefix="gshare-density-")
        ag = DensityAgent(tmp, "kill" if policy == "default" else policy, extra)
        ag.start()
        try:
            if policy == "kill":
                contexts(ag, tmp)
                bypass(ag, tmp)
            if policy == "default":
                catchable(ag, tmp)
            else:
                growth(ag, tmp, policy)
        finally:
            ag.stop()
        e2e.report(ag, tmp)


if __name__ == "__main__":
    main()
