#!/usr/bin/env python3
"""Noisy neighbour (issue 19, item 3): how much a churning pod slows a
training pod on the same GPU, natively and under gshare.

Pod A trains a transformer (4 nn.TransformerEncoderLayer, d_model 1024,
16 heads, sequence 512, fp32; the batch is sized at the start so that a
step takes about --target-ms, 60 by default) with PyTorch's caching
allocator, as usual: after its warm-up it asks the driver (or the agent)
for nothing.  Pod B is --churners (4) processes with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 that keep --live (32) tensors of random
sizes (4 KiB .. 64 MiB, uniform; --dist log for log-uniform) and
allocate and free in a loop (torch.empty / del: cudaMalloc / cudaFree).

Each mode keeps one trainer process alive and measures the median step
(CUDA events around each step, after its warm-up) in turns: A alone, A
with B churning, A alone, A with B (--steps each), so drifting clocks
weigh on both; slowdown = median with B / median alone - 1.

  native        no agent, no hook
  gshare        gshare-agent (B=build dir) on GPU 0, pods A and B each an
                allocation of their own (--units-a, --units-b of 1 GiB),
                every process of a pod under LD_PRELOAD=libgshare.so with
                its allocation's GSHARE_SOCKET
  gshare-NAME   the same with another build (--compare NAME=DIR, a
                directory holding gshare-agent, gsharectl, libgshare.so),
                e.g. the build before a change, in the same run

Also printed: B's alloc+free operations per second in each mode (a slower
neighbour is a lighter one), the agent's CPU over the runs with B, and
the agent's scrub figures (its log at exit: chunks zeroed on the request
path and in the background).  Last line:

  RESULT noisy_slowdown_pct_native=X noisy_slowdown_pct_gshare=Y [...]

Run on a GPU machine from the repository root (python3 with torch):

  B=build GSHARE_LIBDIR=<agent's libraries> python3 test/gpu/noisy_neighbour.py \\
      [--compare before=<other build dir>]

GSHARE_LIBDIR: as for test/gpu/run.sh (docs/gpu.md), given to the agent
and gsharectl only.  Logs go to $OUT if set, else to a temporary folder.
The GPU must be otherwise idle.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MiB = 1 << 20


# ---- pod A: the trainer (a subprocess: `noisy_neighbour.py trainer`) ----

def trainer_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=0)
    ap.add_argument("--target-ms", type=float, default=60.0)
    ap.add_argument("--warmup", type=int, default=20)
    a = ap.parse_args(argv)
    import torch

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    d, heads, seq, layers = 1024, 16, 512, 4
    model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d,
                                                                   batch_first=True, dropout=0.0)
                                  for _ in range(layers)]).to(dev)
    head = torch.nn.Linear(d, 10).to(dev)
    opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
    state = {}

    def data(batch):
        g = torch.Generator(device="cpu").manual_seed(1)
        state["xs"] = [torch.randn(batch, seq, d, generator=g).to(dev) for _ in range(2)]
        state["ys"] = [torch.randint(0, 10, (batch,), generator=g).to(dev) for _ in range(2)]

    def step(i):
        opt.zero_grad(set_to_none=True)
        out = head(model(state["xs"][i % 2]).mean(dim=1))
        loss = torch.nn.functional.cross_entropy(out, state["ys"][i % 2])
        loss.backward()
        opt.step()

    def timed(n):
        ts = []
        for i in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step(i)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        return ts

    batch = a.batch
    if batch <= 0:
        # A step of about target-ms: time a small batch, scale.
        batch = 8
        data(batch)
        timed(5)
        ms = statistics.median(timed(5))
        batch = max(1, min(256, round(batch * a.target_ms / ms)))
        del state["xs"], state["ys"]
        torch.cuda.empty_cache()
    data(batch)
    timed(a.warmup)
    torch.cuda.synchronize()
    print(f"READY batch={batch} step_ms={statistics.median(timed(10)):.2f}", flush=True)
    for line in sys.stdin:
        w = line.split()
        if not w or w[0] == "quit":
            break
        if w[0] == "steps":
            print("STEPS " + json.dumps(timed(int(w[1]))), flush=True)
    return 0


# ---- pod B: a churner (`noisy_neighbour.py churner`) ----

def churner_main(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", type=int, default=32)
    ap.add_argument("--min", type=int, default=4096)
    ap.add_argument("--max", type=int, default=64 * MiB)
    ap.add_argument("--dist", default="uniform")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", choices=("torch", "cuda"), default="torch",
                    help="cuda: cuMemAlloc/cuMemFree through ctypes (no torch: the fake driver's bench)")
    a = ap.parse_args(argv)
    import math

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    rnd = random.Random(a.seed)
    lo, hi = math.log(a.min), math.log(a.max)

    def size():
        if a.dist == "log":
            return int(math.exp(rnd.uniform(lo, hi)))
        return rnd.randint(a.min, a.max)

    if a.backend == "torch":
        import torch
        oom = torch.OutOfMemoryError
        alloc = lambda n: torch.empty(n, dtype=torch.uint8, device="cuda")  # noqa: E731
        alloc(1)
    else:
        alloc, oom = cuda_ctypes()
    live = []
    ops = ooms = 0
    print("CHURNING", flush=True)
    t0 = time.monotonic()
    while not stop:
        if len(live) < a.live:
            try:
                live.append(alloc(size()))
            except oom:
                ooms += 1
                if live:
                    live.pop(rnd.randrange(len(live)))
        else:
            live.pop(rnd.randrange(len(live)))
        ops += 1
    secs = time.monotonic() - t0
    live.clear()
    print(json.dumps({"ops": ops, "seconds": secs, "ooms": ooms}), flush=True)
    return 0


def cuda_ctypes():
    """(alloc, OOM exception): cuMemAlloc_v2 / cuMemFree_v2 as a program
    linked with libcuda resolves them (the hook first when preloaded)."""
    import ctypes

    ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    cu = ctypes.CDLL(None)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if (cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), 0) or
            cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) or cu.cuCtxSetCurrent(ctx)):
        raise SystemExit("churner: no CUDA context")

    class OOM(Exception):
        pass

    class Block:
        def __init__(self, n):
            self.p = ctypes.c_uint64()
            r = cu.cuMemAlloc_v2(ctypes.byref(self.p), ctypes.c_size_t(n))
            if r:
                self.p = None
                if r == 2:  # CUDA_ERROR_OUT_OF_MEMORY
                    raise OOM()
                raise SystemExit(f"churner: cuMemAlloc: error {r}")

        def __del__(self):
            if self.p is not None:
                cu.cuMemFree_v2(self.p)

    return Block, OOM


# ---- the driver ----

class Trainer:
    def __init__(self, env, args, log):
        cmd = [sys.executable, os.path.abspath(__file__), "trainer", "--target-ms", str(args.target_ms),
               "--batch", str(args.batch), "--warmup", str(args.warmup)]
        self.p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=open(log, "ab"), text=True)
        line = self.p.stdout.readline().strip()
        if not line.startswith("READY"):
            raise SystemExit(f"trainer did not start ({line!r}); see {log}")
        self.ready = line
        self.batch = int(re.search(r"batch=(\d+)", line).group(1))

    def steps(self, n):
        self.p.stdin.write(f"steps {n}\n")
        self.p.stdin.flush()
        w = self.p.stdout.readline().split(None, 1)
        if not w or w[0] != "STEPS":
            raise SystemExit(f"trainer: {w!r}")
        return json.loads(w[1])

    def quit(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.close()
        self.p.wait(timeout=60)


def churners_start(env, args, log, round_):
    ps = []
    for i in range(args.churners):
        cmd = [sys.executable, os.path.abspath(__file__), "churner", "--live", str(args.live),
               "--dist", args.dist, "--seed", str(1000 * round_ + i),
               "--backend", getattr(args, "backend", "torch")]
        ps.append(subprocess.Popen(cmd, env=dict(env, PYTORCH_NO_CUDA_MEMORY_CACHING="1"),
                                   stdout=subprocess.PIPE, stderr=open(log, "ab"), text=True))
    for p in ps:
        line = p.stdout.readline().strip()
        if line != "CHURNING":
            raise SystemExit(f"churner did not start ({line!r}); see {log}")
    time.sleep(args.settle)
    return ps


def churners_stop(ps):
    for p in ps:
        p.send_signal(signal.SIGTERM)
    ops, secs, ooms = 0, 0.0, 0
    for p in ps:
        out = p.communicate(timeout=120)[0].strip().splitlines()
        r = json.loads(out[-1]) if out else {"ops": 0, "seconds": 0, "ooms": 0}
        ops, secs, ooms = ops + r["ops"], max(secs, r["seconds"]), ooms + r["ooms"]
    return ops, secs, ooms


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            w = f.read().rsplit(")", 1)[1].split()
        return int(w[11]) + int(w[12])  # utime + stime
    except OSError:
        return 0


def measure(name, env_a, env_b, args, logdir, agent_pid=None):
    """One mode: A alone / with B, in turns; returns a dict of figures."""
    tlog = os.path.join(logdir, f"{name}-pods.log")
    tr = Trainer(env_a, args, tlog)
    if args.batch <= 0:
        args.batch = tr.batch  # every mode steps the same batch as the first
    print(f"{name}: trainer {tr.ready}", flush=True)
    alone, noisy = [], []
    ops = ooms = 0
    secs = cpu_s = wall = 0.0
    hz = os.sysconf("SC_CLK_TCK")
    for r in range(args.rounds):
        alone += tr.steps(args.steps)
        ps = churners_start(env_b, args, tlog, r)
        c0, w0 = (cpu_ticks(agent_pid), time.monotonic()) if agent_pid else (0, 0.0)
        noisy += tr.steps(args.steps)
        if agent_pid:
            cpu_s += (cpu_ticks(agent_pid) - c0) / hz
            wall += time.monotonic() - w0
        o, s, m = churners_stop(ps)
        ops, secs, ooms = ops + o, secs + s, ooms + m
    tr.quit()
    a, n = statistics.median(alone), statistics.median(noisy)
    res = {"alone_ms": a, "noisy_ms": n, "slowdown_pct": (n / a - 1) * 100,
           "churn_ops_per_s": ops / secs if secs else 0.0, "churn_ooms": ooms}
    if agent_pid:
        res["agent_cpu_pct"] = 100 * cpu_s / wall if wall else 0.0
    print(f"{name}: step alone {a:.2f} ms, with B {n:.2f} ms: {res['slowdown_pct']:+.2f} %; "
          f"B {res['churn_ops_per_s']:.0f} alloc/free per s ({ooms} out of memory)"
          + (f"; agent CPU {res['agent_cpu_pct']:.0f} %" if agent_pid else ""), flush=True)
    return res


class Agent:
    """gshare-agent of the build in bdir on GPU 0 (GSHARE_LIBDIR for it and
    gsharectl), its control socket answering."""

    def __init__(self, name, bdir, base_env, reserve, logdir, extra=()):
        self.bdir = bdir
        self.env = dict(base_env)
        if os.environ.get("GSHARE_LIBDIR"):
            self.env["LD_LIBRARY_PATH"] = os.environ["GSHARE_LIBDIR"] + (
                ":" + base_env["LD_LIBRARY_PATH"] if base_env.get("LD_LIBRARY_PATH") else "")
        work = tempfile.mkdtemp(prefix="gshare-noisy.")
        self.sock = os.path.join(work, "agent.sock")
        self.log = os.path.join(logdir, f"{name}-agent.log")
        self.p = subprocess.Popen([os.path.join(bdir, "gshare-agent"), "--socket", self.sock, "--socket-root",
                                   os.path.join(work, "alloc"), "--state-dir", os.path.join(work, "state"),
                                   "--reserve", reserve, "--devices", "0", *extra],
                                  env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        for _ in range(1200):
            try:
                self.uuid = self.ctl("gpus")["gpus"][0]["uuid"]
                return
            except (RuntimeError, json.JSONDecodeError):
                if self.p.poll() is not None:
                    raise SystemExit(f"{name}: the agent exited; see {self.log}")
                time.sleep(0.1)
        self.stop()
        raise SystemExit(f"{name}: the agent did not answer; see {self.log}")

    def ctl(self, *args):
        r = subprocess.run([os.path.join(self.bdir, "gsharectl"), "--socket", self.sock, "--json", *args],
                           env=self.env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"gsharectl {' '.join(args)}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def create(self, first_unit, units):
        """A new allocation of units 1 GiB units: the environment of its processes."""
        ids = [f"{self.uuid}-u{u}" for u in range(first_unit, first_unit + units)]
        d = self.ctl("create", *ids)["allocation"]["socket_dir"]
        return {"LD_PRELOAD": os.path.join(self.bdir, "libgshare.so"),
                "GSHARE_SOCKET": os.path.join(d, "agent.sock")}

    def stop(self):
        """SIGTERM; the scrub figures of its log (empty for a build without them)."""
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
        with open(self.log, errors="replace") as f:
            lines = [ln.strip() for ln in f if "scrubs:" in ln]
        if not lines:
            return {}
        line = lines[-1]
        res = {"scrub_line": line[line.index("GPU"):]}
        for key, pat in (("grants", r"(\d+) chunks granted"), ("grants_scrubbed_sync", r"(\d+) zeroed on the request"),
                         ("grants_waited", r"(\d+) waited"), ("scrubbed_bg", r"(\d+) zeroed in \d+ batches")):
            m = re.search(pat, line)
            if m:
                res[key] = int(m.group(1))
        return res


def gshare_mode(name, bdir, base_env, args, logdir):
    ag = Agent(name, bdir, base_env, args.reserve, logdir)
    try:
        env_a = dict(base_env, **ag.create(0, args.units_a))
        env_b = dict(base_env, **ag.create(args.units_a, args.units_b))
        res = measure(name, env_a, env_b, args, logdir, ag.p.pid)
    finally:
        scrub = ag.stop()
    if scrub:
        print(f"{name}: agent {scrub.pop('scrub_line')}", flush=True)
        res.update(scrub)
    return res


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "trainer":
        return trainer_main(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "churner":
        return churner_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="timed steps per turn (default 60)")
    ap.add_argument("--rounds", type=int, default=2, help="turns of alone + with B per mode (default 2)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--target-ms", type=float, default=60.0, help="pod A's step, sizing its batch")
    ap.add_argument("--batch", type=int, default=0, help="pod A's batch (0: sized to --target-ms)")
    ap.add_argument("--churners", type=int, default=4)
    ap.add_argument("--live", type=int, default=32)
    ap.add_argument("--dist", choices=("uniform", "log"), default="uniform")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds B churns before A is timed")
    ap.add_argument("--units-a", type=int, default=16, help="pod A's allocation, 1 GiB units")
    ap.add_argument("--units-b", type=int, default=12, help="pod B's: 4 x 32 x 64 MiB fit in 8")
    ap.add_argument("--reserve", default=os.environ.get("GSHARE_NOISY_RESERVE", "8Gi"),
                    help="the agent's reserve: the processes' CUDA contexts come from it")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=DIR",
                    help="also under the build in DIR (e.g. before a change)")
    ap.add_argument("--skip-native", action="store_true")
    args = ap.parse_args()
    b = os.environ.get("B", os.path.join(ROOT, "build"))
    b = b if os.path.isabs(b) else os.path.join(ROOT, b)
    logdir = os.environ.get("OUT") or tempfile.mkdtemp(prefix="noisy-logs.")
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GSHARE_SOCKET")}
    base["PYTHONUNBUFFERED"] = "1"
    print(f"noisy neighbour: {args.churners} churners x {args.live} live ({args.dist} 4 KiB..64 MiB), "
          f"{args.rounds} x {args.steps} steps per case; logs in {logdir}", flush=True)
    results = {}
    if not args.skip_native:
        results["native"] = measure("native", base, base, args, logdir)
    results["gshare"] = gshare_mode("gshare", b, base, args, logdir)
    for c in args.compare:
        name, _, d = c.partition("=")
        d = d if os.path.isabs(d) else os.path.join(ROOT, d)
        results["gshare_" + name] = gshare_mode("gshare-" + name, d, base, args, logdir)
    with open(os.path.join(logdir, "noisy-results.json"), "w") as f:
        json.dump(results, f, indent=1)
    kv = []
    for k in ["native", "gshare"] + ["gshare_" + c.partition("=")[0] for c in args.compare]:
        if k in results:
            kv.append(f"noisy_slowdown_pct_{k}={results[k]['slowdown_pct']:.2f}")
    for k, r in results.items():
        kv.append(f"step_ms_{k}={r['alone_ms']:.2f}")
        kv.append(f"churn_ops_per_s_{k}={r['churn_ops_per_s']:.0f}")
        if "agent_cpu_pct" in r:
            kv.append(f"agent_cpu_pct_{k}={r['agent_cpu_pct']:.0f}")
        if "grants_scrubbed_sync" in r:
            kv.append(f"grants_scrubbed_sync_{k}={r['grants_scrubbed_sync']}")
    print("RESULT " + " ".join(kv), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
