"""Training-step overhead of gshare (issue 5's benchmark).

Step time: one native and one gshare process of fw_torch_train.py (the
larger model, GSHARE_BENCH_SERVE=1) are alive together, and take turns:
each timed step of one is followed by one of the other, the order swapped
every pair, so clocks, temperature and neighbours affect both alike; only
one of them runs on the GPU at a time.  Reports the median of each after
the warm-up and the median of the per-pair ratios.

First step: separate runs from process start to the end of the first step
(the small model), native and gshare alternating, median of each.

    bench_step.py STEPS FIRST_ROUNDS   (env: GS_PRELOAD = libgshare.so,
                                        GS_SOCKET = the allocation's socket)
Last line: RESULT step_ratio=... first_step_ms_native=... first_step_ms_gshare=...
"""
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "fw_torch_train.py")
steps, rounds = int(sys.argv[1]), int(sys.argv[2])
native_env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
for k in ("LD_PRELOAD", "GSHARE_SOCKET"):
    native_env.pop(k, None)
gshare_env = dict(native_env, LD_PRELOAD=os.environ["GS_PRELOAD"], GSHARE_SOCKET=os.environ["GS_SOCKET"])


def spawn(env):
    p = subprocess.Popen([sys.executable, script], env=dict(env, GSHARE_BENCH_SERVE="1"),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    if line != "READY":
        raise SystemExit(f"bench worker did not start: {line!r}")
    return p


def one(p):
    p.stdin.write("step\n")
    p.stdin.flush()
    word, ms = p.stdout.readline().split()
    assert word == "STEP"
    return float(ms)


workers = {"native": spawn(native_env), "gshare": spawn(gshare_env)}
t = {"native": [], "gshare": []}
ratios = []
for i in range(steps):
    order = ("native", "gshare") if i % 2 == 0 else ("gshare", "native")
    got = {who: one(workers[who]) for who in order}
    for who in got:
        t[who].append(got[who])
    ratios.append(got["gshare"] / got["native"])
for p in workers.values():
    p.stdin.write("quit\n")
    p.stdin.close()
    p.wait(timeout=60)

first = {"native": [], "gshare": []}
for r in range(rounds):
    for who, env in (("native", native_env), ("gshare", gshare_env)):
        out = subprocess.run([sys.executable, script], env=dict(env, GSHARE_BENCH_FIRST="1"),
                             capture_output=True, text=True, timeout=300).stdout
        first[who] += [float(x.split()[1]) for x in out.splitlines() if x.startswith("FIRST_STEP_MS")]

n, g = statistics.median(t["native"]), statistics.median(t["gshare"])
q = statistics.quantiles(ratios, n=20)
print(f"steps: {steps} pairs; native median {n:.3f} ms, gshare median {g:.3f} ms; "
      f"per-pair ratio median {statistics.median(ratios):.4f}, 5-95% {q[0]:.4f}..{q[-1]:.4f}")
print("first step ms native:", first["native"], "gshare:", first["gshare"])
print(f"RESULT step_ratio={g / n:.4f} pair_ratio_median={statistics.median(ratios):.4f} "
      f"step_ms_native={n:.3f} step_ms_gshare={g:.3f} "
      f"first_step_ms_native={statistics.median(first['native']):.0f} "
      f"first_step_ms_gshare={statistics.median(first['gshare']):.0f}")
