"""PyTorch: a short training loop of a transformer block on random data.

Plain run (the suite): 30 steps of a small model, deterministic; prints the
final loss and parameter checksum; run.sh runs it natively and under gshare
and compares the two bit for bit.

GSHARE_BENCH_FIRST=1: also prints "FIRST_STEP_MS <ms from process start to
the end of the first step>".

GSHARE_BENCH_SERVE=1 (bench_step.py drives it): a larger model; after the
warm-up prints "READY" and then runs one timed step per "step" line on
stdin, answering "STEP <ms>" (CUDA events around the step, synchronized),
until "quit".  Two such processes stepped in turn measure native and gshare
step times under the same GPU conditions.
"""
import os
import sys
import time

T0 = time.monotonic()
import torch  # noqa: E402

serve = os.environ.get("GSHARE_BENCH_SERVE") == "1"
torch.manual_seed(0)
if not serve:
    torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
if serve:
    d, heads, seq, batch, layers = 1024, 16, 512, 16, 4
else:
    d, heads, seq, batch, layers = 512, 8, 256, 16, 1
model = torch.nn.Sequential(*[torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, batch_first=True,
                                                               dropout=0.0) for _ in range(layers)]).to(dev)
head = torch.nn.Linear(d, 10).to(dev)
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-3)
g = torch.Generator(device="cpu").manual_seed(1)
xs = [torch.randn(batch, seq, d, generator=g).to(dev) for _ in range(4)]
ys = [torch.randint(0, 10, (batch,), generator=g).to(dev) for _ in range(4)]


def step(i):
    opt.zero_grad(set_to_none=True)
    out = head(model(xs[i % 4]).mean(dim=1))
    loss = torch.nn.functional.cross_entropy(out, ys[i % 4])
    loss.backward()
    opt.step()
    return loss


loss = step(0)
torch.cuda.synchronize()
first_ms = (time.monotonic() - T0) * 1000
for i in range(1, 30):
    loss = step(i)
torch.cuda.synchronize()
if serve:
    print("READY", flush=True)
    i = 0
    for line in sys.stdin:
        if line.strip() != "step":
            break
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        step(i)
        e.record()
        e.synchronize()
        i += 1
        print(f"STEP {s.elapsed_time(e):.6f}", flush=True)
    sys.exit(0)
csum = sum(float(p.double().sum()) for p in model.parameters())
print(f"LOSS {float(loss):.9f}")
print(f"CHECKSUM {csum:.9f}")
if os.environ.get("GSHARE_BENCH_FIRST") == "1":
    print(f"FIRST_STEP_MS {first_ms:.1f}")
sys.stdout.flush()
