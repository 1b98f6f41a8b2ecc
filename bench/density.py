#!/usr/bin/env python3
"""density: how many pods share one GPU under gshare, against native.

GPU part (where `nvidia-smi -L` works; skipped elsewhere):
  native   N PyTorch processes started at once (N = GSHARE_DENSITY_NATIVE,
           default 48), each running a cuBLAS matmul, a cuDNN convolution
           and holding a 1 GiB tensor: how many run.
  gshare   the agent with the default config (chunks, reserve, units);
           as many 2-unit allocations as the GPU advertises, one such
           process in each, started at once: how many run, and the GPU's
           whole use (nvidia-smi) at the peak against pool + reserve.
  one pod  a 2-unit allocation: light PyTorch processes (matmul, conv,
           64 MiB) started one after another until one is refused; what
           the allocation shows then; then a new pod must run.
  RESULT density_2u_gshare=... density_2u_native=... reserve_mib=...
         ctx_mib=... pods_advertised=... peak_used_mib=... pool_plus_reserve_mib=...

Fake part (always): one 2-unit pod (units 1Gi, chunks 64Mi) on the fake
driver with 32 MiB contexts; processes each holding 64 MiB started until
one is refused.
  RESULT small_procs_util_pct=... small_procs=...
  (bytes asked for plus the processes' outside memory, % of the quota)

Environment: B (build dir), GSHARE_LIBDIR (extra shared libraries for the
agent), PYTHON (the interpreter with torch for the workers, default python3).
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

B = os.environ.get("B", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BD = os.path.join(ROOT, B)
AGENT = os.path.join(BD, "gshare-agent")
CTL = os.path.join(BD, "gsharectl")
HOOK = os.path.join(BD, "libgshare.so")
CUDA = os.path.join(BD, "test/e2e/e2e_cuda")
FAKE = os.path.join(BD, "test/fakecuda/libcuda.so.1")
NVML_FAKE = os.path.join(BD, "test/fakenvml/libnvidia-ml.so.1")
PY = os.environ.get("PYTHON", "python3")
MiB = 1 << 20

WORKER = r"""
import os, sys, time
try:
    import torch
    tensor_mib = int(sys.argv[1])
    d = torch.device("cuda")
    a = torch.randn(2048, 2048, device=d)
    b = (a @ a).sum().item()
    x = torch.randn(8, 16, 64, 64, device=d)
    w = torch.randn(32, 16, 3, 3, device=d)
    y = torch.nn.functional.conv2d(x, w).sum().item()
    t = torch.empty(tensor_mib << 20, dtype=torch.uint8, device=d)
    t.fill_(1)
    torch.cuda.synchronize()
    print("READY", flush=True)
except Exception as e:
    print("FAIL", type(e).__name__, str(e).splitlines()[0][:200], flush=True)
    sys.exit(1)
sys.stdin.readline()
"""


def gpu_present():
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def smi_used_mib():
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                        "-i", "0"], capture_output=True, text=True)
    try:
        return int(r.stdout.strip().splitlines()[0])
    except (ValueError, IndexError):
        return -1


def lib_env(env):
    libdir = os.environ.get("GSHARE_LIBDIR")
    if libdir:
        env["LD_LIBRARY_PATH"] = libdir + ":" + env.get("LD_LIBRARY_PATH", "")
    return env


class Agent:
    def __init__(self, tmp, extra=(), env=None, config=""):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "agent.sock")
        self.env = lib_env(dict(env or os.environ))
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config)
        self.log = open(os.path.join(tmp, "agent.log"), "a")
        args = [AGENT, "--config", cfg, "--socket", self.sock, "--socket-root",
                os.path.join(tmp, "alloc"), "--state-dir", os.path.join(tmp, "state"),
                "--reconcile-interval", "0"] + list(extra)
        self.taken = set()
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=self.log)
        for _ in range(1500):
            if os.path.exists(self.sock):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise SystemExit("agent did not start:\n" + open(self.log.name).read())

    def ctl(self, *args):
        r = subprocess.run([CTL, "--socket", self.sock, "--json"] + list(args), capture_output=True,
                           text=True, timeout=60, env=self.env)
        if r.returncode != 0:
            raise SystemExit("gsharectl %s: %s" % (args, r.stderr))
        return json.loads(r.stdout) if r.stdout.strip() else None

    def gpu(self):
        return self.ctl("gpus")["gpus"][0]

    def create(self, units):
        g = self.gpu()
        held = {int(d.rsplit("-u", 1)[1]) for a in self.ctl("allocations") for d in a["device_ids"]}
        self.taken &= held
        free = [u for u in range(g["units_total"]) if u not in self.taken]
        ids = ["%s-u%d" % (g["uuid"], u) for u in free[:units]]
        self.taken.update(free[:units])
        return self.ctl("create", *ids)["allocation"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)

    def logtext(self):
        return open(self.log.name).read()


def hook_env(base, alloc):
    env = dict(base)
    env.update(LD_PRELOAD=HOOK, GSHARE_SOCKET=os.path.join(alloc["socket_dir"], "agent.sock"))
    return env


def start_workers(envs, tensor_mib):
    ps = [subprocess.Popen([PY, "-c", WORKER, str(tensor_mib)], env=e, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for e in envs]
    return ps


def collect(ps, timeout=240):
    """READY count; the processes stay until end_workers."""
    ready, fails = 0, []
    t0 = time.monotonic()
    for p in ps:
        left = max(1, timeout - (time.monotonic() - t0))
        line = ""
        try:
            import select
            r, _, _ = select.select([p.stdout], [], [], left)
            line = p.stdout.readline() if r else "TIMEOUT"
        except Exception as e:  # noqa: BLE001
            line = "ERR %s" % e
        if line.startswith("READY"):
            ready += 1
        else:
            fails.append(line.strip() or (p.stderr.read()[-300:] if p.poll() is not None else "?"))
    return ready, fails


def end_workers(ps):
    for p in ps:
        try:
            p.stdin.write("\n")
            p.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass
    for p in ps:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def gpu_part():
    n_native = int(os.environ.get("GSHARE_DENSITY_NATIVE", "48"))
    base = dict(os.environ)
    bulk = os.environ.get("GSHARE_DENSITY_BULK", "1") == "1"
    # native
    ps = start_workers([base] * n_native, 1024) if bulk else []
    native, nf = collect(ps)
    native_peak = smi_used_mib()
    end_workers(ps)
    print("native: %d of %d ran (GPU used at peak %d MiB)%s" %
          (native, n_native, native_peak, "; first failure: " + nf[0] if nf else ""), flush=True)
    tmp = tempfile.mkdtemp(prefix="gshare-density-")
    ag = Agent(tmp)
    try:
        g = ag.gpu()
        ctx_mib = 0
        for line in ag.logtext().splitlines():
            if "contexts charged" in line:
                ctx_mib = int(line.split("contexts charged ")[1].split()[0])
        pods = g["units_total"] // 2
        pool = g["chunks_total"] * g["chunk_bytes"] // MiB
        reserve = g["reserve_bytes"] // MiB
        allocs = [ag.create(2) for _ in range(pods if bulk else 0)]
        ps = start_workers([hook_env(base, a) for a in allocs], 1024)
        ran, fails = collect(ps)
        peak = smi_used_mib()
        ag_state = ag.ctl("allocations")
        outside = [p["outside_bytes"] // MiB for a in ag_state for p in a["parts"]]
        end_workers(ps)
        print("gshare: %d of %d pods ran; GPU used at peak %d MiB, pool %d + reserve %d MiB; "
              "outside charged per pod (MiB) min %d max %d%s" %
              (ran, pods, peak, pool, reserve, min(outside or [0]), max(outside or [0]),
               "; first failure: " + fails[0] if fails else ""), flush=True)
        for a in allocs:
            ag.ctl("release", a["id"])
        time.sleep(2)
        # one pod, processes one after another until refused
        one = ag.create(2)
        seq, n = [], 0
        while n < 8:
            p = start_workers([hook_env(base, one)], 64)[0]
            r, f = collect([p], 120)
            if not r:
                err = p.stderr.read() if p.poll() is not None else ""
                refusal = [l for l in (f + err.splitlines()) if "gshare" in l or "FAIL" in l]
                print("one pod: process %d refused: %s" % (n + 1, " | ".join(refusal)[:400]), flush=True)
                break
            seq.append(p)
            n += 1
            st = [a for a in ag.ctl("allocations") if a["id"] == one["id"]][0]["parts"][0]
            print("one pod: %d processes run; used %d of %d MiB, %d MiB outside the pool" %
                  (n, st["used_bytes"] // MiB, st["quota_bytes"] // MiB, st["outside_bytes"] // MiB),
                  flush=True)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total",
                              "--format=csv,noheader"], env=hook_env(base, one),
                             capture_output=True, text=True)
        print("nvidia-smi inside the pod: %s" % smi.stdout.strip(), flush=True)
        after = ag.create(2)
        q = start_workers([hook_env(base, after)], 64)[0]
        r, f = collect([q], 120)
        print("a pod created after it: %s" % ("runs" if r else "FAILED " + " ".join(f)), flush=True)
        end_workers(seq + [q])
    finally:
        ag.stop()
    print("RESULT density_2u_gshare=%d density_2u_native=%d reserve_mib=%d ctx_mib=%d "
          "pods_advertised=%d peak_used_mib=%d pool_plus_reserve_mib=%d" %
          (ran, native, reserve, ctx_mib, pods, peak, pool + reserve), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


def fake_part():
    tmp = tempfile.mkdtemp(prefix="gshare-density-fake-")
    env = dict(os.environ)
    env.update(GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"), GSHARE_FAKECUDA_MEM="16Gi",
               GSHARE_FAKECUDA_CTX_BYTES=str(32 * MiB), LD_LIBRARY_PATH=os.path.dirname(FAKE))
    ag = Agent(tmp, ["--cuda-library", FAKE], env=env,
               config="nvmlLibrary: %s\nusageInterval: 100ms\n" % NVML_FAKE)
    procs = []
    try:
        a = ag.create(2)
        quota = a["parts"][0]["quota_bytes"] if "parts" in a else 2048 * MiB
        while len(procs) < 200:
            p = subprocess.Popen([CUDA, "grow", "64"], env=hook_env(ag.env, a), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = p.stdout.readline()
            if not line.startswith("held"):
                p.wait()
                break
            procs.append(p)
        n = len(procs)
        asked = n * 64 * MiB + n * 32 * MiB
        pct = 100.0 * asked / quota
    finally:
        for p in procs:
            p.stdin.write("exit\n")
            p.stdin.flush()
            p.wait()
        ag.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print("fake: %d processes of 64 MiB (32 MiB contexts) in a 2-unit pod" % n, flush=True)
    print("RESULT small_procs_util_pct=%.1f small_procs=%d" % (pct, n), flush=True)


def main():
    for f in (AGENT, CTL, HOOK, CUDA, FAKE, NVML_FAKE):
        if not os.path.exists(f):
            raise SystemExit("missing %s: run make first" % f)
    if gpu_present() and os.environ.get("GSHARE_DENSITY_GPU", "1") == "1":
        gpu_part()
    else:
        print("density (GPU part): skipped, no GPU", flush=True)
    fake_part()


if __name__ == "__main__":
    main()
