#!/usr/bin/env python3
"""The workloads of test/gpu/qos_check.sh (issue 30, docs/compute.md).

  qos_workload.py hp [--requests N] [--period-ms P] [--arrivals steady|poisson] [--warmup-s S]
      a latency-critical server: a 4-layer bf16 TransformerEncoder (d=1024,
      16 heads, ff 4096), batch 8 x 256 tokens, its forward captured once in
      a CUDA graph and replayed every P ms (open loop; poisson: at
      exponential gaps of mean P, seeded); latency = replay +
      synchronize, wall clock.  Prints {"t0":..,"t1":..,"p50_ms":..,
      "p99_ms":..,"p99_steady_ms":..,"worst":..} (t0, t1: time.monotonic()
      of the first and last request; p99_steady_ms: of the requests after
      the first --warmup-s seconds (2), when what a trainer queued before
      this server registered has drained; worst: the 12 slowest, each with
      how late it started, ms).
  qos_workload.py be {train,gemm} [--seconds S]
      a trainer (4-layer TransformerEncoder, d=2048, batch 16 x 512, bf16
      autocast, AdamW) or a loop of 8192^3 bf16 GEMMs, for S seconds after a
      warm-up; prints "warm" once warm, then one line a second:
      {"t":..,"done":..} (steps or GEMMs completed so far, synchronized).
"""
import argparse
import json
import random
import sys
import time

import torch


def hp(a):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dtype=torch.bfloat16,
                                             device="cuda")
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    x = torch.randn(8, 256, 1024, dtype=torch.bfloat16, device="cuda")
    s = torch.cuda.Stream()
    with torch.no_grad():
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    lat, worst, steady = [], [], []
    t0 = time.monotonic()
    nxt = t0
    rng = random.Random(30)
    for _ in range(a.requests):
        now = time.monotonic()
        if nxt > now:
            time.sleep(nxt - now)
        due = nxt
        # steady: one request every period; poisson: exponential gaps of
        # that mean (a server fed at random: nothing to foresee).
        nxt += (a.period_ms if a.arrivals == "steady" else rng.expovariate(1 / a.period_ms)) / 1000
        late = (time.monotonic() - due) * 1000
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        lat.append((time.perf_counter() - t) * 1000)
        worst.append((lat[-1], late))
        if due >= t0 + a.warmup_s:
            steady.append(lat[-1])
    t1 = time.monotonic()
    lat.sort()
    steady.sort()
    # The 12 slowest requests, each with how late it started (steady
    # arrivals: after its time; a sleep overshoots now and then).
    worst = [[round(x, 3), round(y, 3)] for x, y in sorted(worst, reverse=True)[:12]]
    print(json.dumps({"t0": t0, "t1": t1, "p50_ms": lat[len(lat) // 2], "p99_ms": lat[int(len(lat) * 0.99)],
                      "p99_steady_ms": steady[int(len(steady) * 0.99)] if steady else -1, "worst": worst}),
          flush=True)
    # Idle but alive (still latency-critical on the board): the others'
    # ramp back to full speed is measured against t1.
    time.sleep(a.linger)


def be(a):
    if a.kind == "gemm":
        m = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        n = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")

        def step():
            torch.mm(m, n)
    else:
        layer = torch.nn.TransformerEncoderLayer(2048, 16, 8192, batch_first=True, device="cuda")
        model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(16, 512, 2048, device="cuda")

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    print("warm", flush=True)
    done, t_end, last = 0, time.monotonic() + a.seconds, 0.0
    while time.monotonic() < t_end:
        step()
        done += 1
        if time.monotonic() - last >= a.every_ms / 1000:
            torch.cuda.synchronize()
            last = time.monotonic()
            print(json.dumps({"t": last, "done": done}), flush=True)
    torch.cuda.synchronize()
    print(json.dumps({"t": time.monotonic(), "done": done}), flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hp")
    h.add_argument("--requests", type=int, default=1000)
    h.add_argument("--period-ms", type=float, default=10)
    h.add_argument("--arrivals", choices=("steady", "poisson"), default="steady")
    h.add_argument("--warmup-s", type=float, default=2)
    h.add_argument("--linger", type=float, default=0, help="seconds to stay alive, idle, after the requests")
    b = sub.add_parser("be")
    b.add_argument("kind", choices=("train", "gemm"))
    b.add_argument("--seconds", type=float, default=20)
    b.add_argument("--every-ms", type=float, default=1000, help="a progress line (after a synchronize) this often")
    a = p.parse_args()
    return hp(a) if a.cmd == "hp" else be(a)


if __name__ == "__main__":
    sys.exit(main())
