#!/usr/bin/python3
"""hook_bench: cuMemAlloc+cuMemFree through the hook against the native
driver, in one run, alternating rounds (native, hooked, native, ...).

It starts gshare-agent itself, with a small pool (reserve = free - pool) so
that the native process, which runs without the hook, finds the rest of the
GPU free; creates one allocation and runs the hooked measurements in a
process under LD_PRELOAD=libgshare.so.  Prints per size the median and p99
of both, and last a line
    RESULT ratio_256B=... ratio_64KiB=... ratio_2MiB=... ratio_64MiB=... ratio_1GiB=...
(hooked median / native median).

GPU or fake: on a machine where `nvidia-smi -L` works it uses the real
driver (libcuda.so.1 from the loader), else the fake one in $B/test/fakecuda.
Environment overrides: B, GSHARE_BENCH_CUDA_LIBRARY (the agent's driver),
GSHARE_BENCH_FAKE=1|0, GSHARE_BENCH_HOOK, GSHARE_BENCH_AGENT,
GSHARE_BENCH_CTL, GSHARE_BENCH_PROG, GSHARE_BENCH_ROUNDS (default 3),
GSHARE_BENCH_CHUNK (default 256Mi), GSHARE_BENCH_POOL_GIB (default 4).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

B = os.environ.get("B", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BD = B if os.path.isabs(B) else os.path.join(ROOT, B)
E = os.environ.get
AGENT = E("GSHARE_BENCH_AGENT", os.path.join(BD, "gshare-agent"))
CTL = E("GSHARE_BENCH_CTL", os.path.join(BD, "gsharectl"))
PROG = E("GSHARE_BENCH_PROG", os.path.join(BD, "bench/hook_bench_prog"))
HOOK = E("GSHARE_BENCH_HOOK", os.path.join(BD, "libgshare.so"))
FAKE_DIR = os.path.join(BD, "test/fakecuda")
ROUNDS = int(E("GSHARE_BENCH_ROUNDS", "3"))
CHUNK = E("GSHARE_BENCH_CHUNK", "256Mi")
POOL_GIB = int(E("GSHARE_BENCH_POOL_GIB", "4"))
GiB = 1 << 30
SIZES = [("256B", 256, 2000), ("64KiB", 64 << 10, 2000), ("2MiB", 2 << 20, 1000),
         ("64MiB", 64 << 20, 200), ("1GiB", 1 << 30, 40)]


def gpu_present():
    if shutil.which("nvidia-smi") is None:
        return False
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return r.returncode == 0 and "GPU" in r.stdout


def pct(v, p):
    s = sorted(v)
    return s[min(len(s) - 1, int(p * len(s)))]


def measure(env):
    args = [PROG] + ["%d:%d" % (b, n) for _, b, n in SIZES]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit("hook_bench: %s failed: %s" % (PROG, r.stderr.strip()))
    out = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if f[:1] == ["size"]:
            out[int(f[1])] = [int(x) for x in f[3:]]
    return out


def main():
    for f in (AGENT, CTL, PROG):
        if not os.path.exists(f):
            raise SystemExit("hook_bench: missing %s (run make first)" % f)
    if not os.path.exists(HOOK):
        print("hook_bench: SKIP: %s not built" % HOOK)
        return 0
    fake = E("GSHARE_BENCH_FAKE", "0" if gpu_present() else "1") == "1"
    tmp = tempfile.mkdtemp(prefix="gshare-bench-")
    env = dict(os.environ)
    if fake:
        env.update(GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"),
                   GSHARE_FAKECUDA_MEM="16Gi", GSHARE_FAKECUDA_DEVICES="1")
        env["LD_LIBRARY_PATH"] = FAKE_DIR + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        cudalib = E("GSHARE_BENCH_CUDA_LIBRARY", os.path.join(FAKE_DIR, "libcuda.so.1"))
    else:
        cudalib = E("GSHARE_BENCH_CUDA_LIBRARY", "libcuda.so.1")
    native_env = dict(env)

    # Free memory as the native process sees it with no agent running.
    r = subprocess.run([PROG, "meminfo"], env=native_env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("hook_bench: cannot query the driver: " + r.stderr.strip())
    free = int(r.stdout.split()[1])
    pool = POOL_GIB * GiB
    if free < pool + 2 * GiB:
        raise SystemExit("hook_bench: %d MiB free, need %d" % (free >> 20, (pool + 2 * GiB) >> 20))
    reserve = free - pool
    sock = os.path.join(tmp, "agent.sock")
    log = open(os.path.join(tmp, "agent.log"), "w")
    agent = subprocess.Popen([AGENT, "--cuda-library", cudalib, "--socket", sock,
                              "--socket-root", os.path.join(tmp, "alloc"),
                              "--state-dir", os.path.join(tmp, "state"),
                              "--chunk-size", CHUNK, "--unit-size", "1Gi",
                              "--reserve", str(reserve)], env=env, stdout=log, stderr=log)
    try:
        for _ in range(500):
            if os.path.exists(sock) or agent.poll() is not None:
                break
            time.sleep(0.02)
        ctl = lambda *a: json.loads(subprocess.run([CTL, "--socket", sock, "--json"] + list(a),
                                                   capture_output=True, text=True, check=True).stdout)
        g = ctl("gpus")["gpus"][0]
        units = min(g["units_total"], max(2, POOL_GIB - 1))
        ids = ["%s-u%d" % (g["uuid"], u) for u in range(units)]
        alloc = ctl("create", *ids)["allocation"]
        hooked_env = dict(env)
        hooked_env.update(LD_PRELOAD=HOOK, GSHARE_SOCKET=os.path.join(alloc["socket_dir"], "agent.sock"))
        print("hook_bench: %s driver (%s), agent pool %d GiB in %s chunks, allocation of %d GiB, %d rounds"
              % ("fake" if fake else "real", cudalib, POOL_GIB, CHUNK, units, ROUNDS), flush=True)
        nat = {b: [] for _, b, _ in SIZES}
        hk = {b: [] for _, b, _ in SIZES}
        for rnd in range(ROUNDS):
            for b, v in measure(native_env).items():
                nat[b] += v
            for b, v in measure(hooked_env).items():
                hk[b] += v
            print("hook_bench: round %d of %d done" % (rnd + 1, ROUNDS), flush=True)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=30)
    ratios = []
    print("%-6s %12s %12s %12s %12s %8s" % ("size", "native_med", "native_p99", "hooked_med", "hooked_p99", "ratio"))
    for name, b, _ in SIZES:
        nm, n99 = pct(nat[b], 0.5) / 1000, pct(nat[b], 0.99) / 1000
        hm, h99 = pct(hk[b], 0.5) / 1000, pct(hk[b], 0.99) / 1000
        ratios.append("ratio_%s=%.3f" % (name, hm / nm))
        print("%-6s %10.2fus %10.2fus %10.2fus %10.2fus %8.3f" % (name, nm, n99, hm, h99, hm / nm))
    print("RESULT " + " ".join(ratios))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
