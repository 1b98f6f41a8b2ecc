#!/usr/bin/python3
"""The hook's NVML memory queries (nvmlDeviceGetMemoryInfo and _v2).

Starts the real agent on the fake driver as test/e2e/test_e2e.py does (its
helpers are reused), with the fake libnvidia-ml (test/fakenvml: 2 devices,
whose UUIDs are the fake CUDA GPUs'; it reports 80 GiB per GPU), and runs
nvml_client (direct calls and dlopen+dlsym, as nvidia-smi does) and a
python3 ctypes program (as pynvml does) under the hook.

Environment: B (build dir), SANITIZE (asan: the ASan runtime is preloaded
first; tsan: the ctypes check is skipped, python3 is not TSan-built).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402  (Agent, hook_env, run, check)

from test_e2e import MiB, UNIT, check, run  # noqa: E402

CLIENT = os.path.join(e2e.BD, "test/nvml_client")
FAKENVML = os.path.join(e2e.BD, "test/fakenvml")
GPU0 = "GPU-67736872-fa4e-4be0-8000-5eed00000000"
FAKE_TOTAL = 80 << 30
NVML_ERROR_UNKNOWN = 999
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

CTYPES = r"""
import ctypes, sys
class Mem(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]
lib = ctypes.CDLL("libnvidia-ml.so.1")
assert lib.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert lib.nvmlDeviceGetHandleByIndex_v2(int(sys.argv[1]), ctypes.byref(h)) == 0
m = Mem()
r = lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(m))
print("ctypes", r, m.total, m.free, m.used)
"""


def parse(out):
    """{(how, idx, kind): [rc, numbers...]} and the other lines by first word."""
    q, other = {}, {}
    for line in out.splitlines():
        w = line.split()
        if len(w) >= 4 and w[0] in ("direct", "dlsym"):
            q[(w[0], int(w[1]), w[2])] = [int(x) for x in w[3:]]
        elif w:
            other[w[0]] = [int(x) for x in w[1:]]
    return q, other


def both(q, idx, kind):
    return [q.get((how, idx, kind)) for how in ("direct", "dlsym")]


def expect(q, idx, total, free, used, what):
    """Both paths, v1 and v2, report (total, free, used); v2 reserved 0."""
    for how in ("direct", "dlsym"):
        v1, v2 = q.get((how, idx, "v1")), q.get((how, idx, "v2"))
        check(v1 == [0, total, free, used] and v2 == [0, total, free, used, 0],
              "%s (%s): v1 %s v2 %s, want total %d free %d used %d" % (what, how, v1, v2, total, free, used))


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.HOOK, CLIENT, e2e.CUDA)
    tmp = tempfile.mkdtemp(prefix="gshare-nvml-")
    ag = e2e.Agent(tmp)
    ag.env["GSHARE_FAKENVML_DEVICES"] = "2"
    ag.start()
    try:
        body(ag, tmp)
    finally:
        if ag.proc:
            ag.stop()
    e2e.report(ag, tmp)


def body(ag, tmp):
    g = ag.gpus()[0]
    check(g["uuid"] == GPU0, "the fake NVML's device 0 is the fake CUDA GPU (%s)" % g["uuid"])
    A = ag.create(["%s-u0" % GPU0, "%s-u1" % GPU0])["allocation"]
    Q = 2 * UNIT
    env = e2e.hook_env(ag, A)

    # Without the hook the fake's whole-GPU figures come through: the test
    # can tell them from the allocation's.
    r = run([CLIENT, "query", "0"], ag.env)
    q, _ = parse(r.stdout)
    check(r.returncode == 0 and q.get(("dlsym", 0, "v1"), [None, None])[1] == FAKE_TOTAL,
          "no hook: the whole GPU (%s)" % r.stdout.split("\n")[2:3])

    # Idle allocation: total = quota, all of it free; device 1 is not in
    # the allocation: 0 / 0 / 0.
    r = run([CLIENT, "query", "0", "1"], env)
    q, other = parse(r.stdout)
    check(r.returncode == 0 and "gshare:" not in r.stderr, "hooked query runs cleanly" + r.stderr)
    check(other.get("dlsym-same") == [1], "dlsym on the libnvidia-ml handle hands out the hook's functions")
    check(other.get("dlsym-uuid-real") == [1], "dlsym of a name the hook does not interpose passes through")
    expect(q, 0, Q, Q, 0, "idle allocation: total = quota, free = quota")
    expect(q, 1, 0, 0, 0, "a GPU outside the allocation")
    check(both(q, 0, "v2-badversion") == [[NVML_ERROR_ARGUMENT_VERSION_MISMATCH]] * 2,
          "v2 with a wrong struct version: NVML_ERROR_ARGUMENT_VERSION_MISMATCH")

    # Memory allocated through the hook in the same process: NVML agrees
    # with cuMemGetInfo.
    r = run([CLIENT, "alloc", "40", "0"], env)
    q, other = parse(r.stdout)
    cuda = other.get("cuda", [None, 0, 0])
    check(r.returncode == 0 and cuda[0] == 0 and cuda[2] == Q, "alloc 40 MiB: cuMemGetInfo %s" % cuda + r.stderr)
    free = cuda[1]
    check(0 < free <= Q - 40 * MiB, "alloc 40 MiB: at least 40 MiB gone (free %d)" % free)
    expect(q, 0, Q, free, Q - free, "alloc 40 MiB: NVML free = cuMemGetInfo free, used = quota - free")

    # Another process of the allocation holds 64 MiB (two whole chunks):
    # this one sees it as used.
    holder = subprocess.Popen([e2e.CUDA, "hold", "64"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        check(holder.stdout.readline().strip() == "held", "a hooked process holds 64 MiB")
        r = run([CLIENT, "query", "0"], env)
        q, _ = parse(r.stdout)
        expect(q, 0, Q, Q - 64 * MiB, 64 * MiB, "another process holds 64 MiB: used 64 MiB")
        if os.environ.get("SANITIZE") != "tsan":
            cenv = dict(env)
            cenv["LD_LIBRARY_PATH"] = FAKENVML + ":" + cenv.get("LD_LIBRARY_PATH", "")
            r = run([sys.executable, "-c", CTYPES, "0"], cenv)
            check(r.stdout.split() == ["ctypes", "0", str(Q), str(Q - 64 * MiB), str(64 * MiB)],
                  "python3 ctypes (as pynvml): %s" % (r.stdout.strip() + r.stderr[-300:]))
    finally:
        holder.kill()
        holder.wait()

    # The agent cannot be reached: fail closed, never the real figures.
    bad = dict(env)
    bad["GSHARE_SOCKET"] = os.path.join(tmp, "no-such-dir", "agent.sock")
    r = run([CLIENT, "query", "0", "1"], bad)
    q, _ = parse(r.stdout)
    rcs = [q.get((how, i, k), [None])[0] for how in ("direct", "dlsym") for i in (0, 1) for k in ("v1", "v2")]
    check(r.returncode == 0 and rcs == [NVML_ERROR_UNKNOWN] * 8,
          "agent unreachable: NVML_ERROR_UNKNOWN on every query (%s)" % rcs)
    check(r.stderr.count("gshare:") == 1 and "cannot reach the gshare agent" in r.stderr,
          "agent unreachable: one gshare: line" + ("" if r.stderr.count("gshare:") == 1 else ": " + r.stderr))


if __name__ == "__main__":
    main()
