"""PyTorch: a short training loop of a transformer block on random data.
Prints the final loss and parameter checksum; run.sh runs it natively and
under gshare and compares. With GSHARE_BENCH_STEPS it also times steps and
prints "STEP_MS <median>" and "FIRST_STEP_MS <ms since process start>"."""
import os
import statistics
import sys
import time

T0 = time.monotonic()
import torch  # noqa: E402

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
d, heads, seq, batch = 512, 8, 256, 16
model = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, batch_first=True,
                                         dropout=0.0).to(dev)
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


steps = int(os.environ.get("GSHARE_BENCH_STEPS", "0"))
loss = step(0)
torch.cuda.synchronize()
first_ms = (time.monotonic() - T0) * 1000
for i in range(1, 30):
    loss = step(i)
torch.cuda.synchronize()
times = []
for i in range(steps):
    s = torch.cuda.Event(enable_timing=True)
    e = torch.cuda.Event(enable_timing=True)
    s.record()
    step(i)
    e.record()
    e.synchronize()
    times.append(s.elapsed_time(e))
csum = sum(float(p.double().sum()) for p in model.parameters())
print(f"LOSS {float(loss):.9f}")
print(f"CHECKSUM {csum:.9f}")
if steps:
    print(f"STEP_MS {statistics.median(times):.6f}")
    print(f"FIRST_STEP_MS {first_ms:.1f}")
sys.stdout.flush()
