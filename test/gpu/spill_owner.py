"""The owner of test/gpu/spill_check.sh: creates its context
({"ctx_ms": ms}), then allocates GSHARE_OWN_GIB GiB in one tensor and says how long that took
({"alloc_ms": ms}: the reclaim, when its memory was lent), then runs
GSHARE_WARM_S seconds (2) of a 4096 x 4096 fp16 matmul chain untimed and
GSHARE_STEPS steps of it ({"steps": [ms...]}),
then waits for "quit" on stdin (holding its memory)."""
import json
import os
import sys
import time
import torch

GiB = 1 << 30
t0 = time.monotonic()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"ctx_ms": round((time.monotonic() - t0) * 1e3, 1)}), flush=True)
# The context was charged first (memory taken back for it too, while the
# driver made it): the allocation below is timed on its own.
time.sleep(float(os.environ.get("GSHARE_OWN_SETTLE_S", "0")))
t0 = time.monotonic()
x = torch.empty(int(float(os.environ.get("GSHARE_OWN_GIB", "8")) * GiB), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print(json.dumps({"alloc_ms": round((time.monotonic() - t0) * 1e3, 1)}), flush=True)
x.fill_(7)
a = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
b = torch.randn(4096, 4096, dtype=torch.float16, device="cuda")
# The GPU's clocks settle first (GSHARE_WARM_S seconds of the same work):
# the alone run is the run's first work on a cold GPU, the others follow
# B's, and a cold GPU's boost clock alone moved the alone step by 2.5 %
# between runs.
t_end = time.monotonic() + float(os.environ.get("GSHARE_WARM_S", "2"))
while time.monotonic() < t_end:
    for _ in range(8):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
steps = []
for i in range(int(os.environ.get("GSHARE_STEPS", "200")) + 20):
    t0 = time.monotonic()
    for _ in range(8):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
    if i >= 20:
        steps.append(round((time.monotonic() - t0) * 1e3, 4))
print(json.dumps({"steps": steps, "ok": bool(int(x[:: 1 << 20].min()) == 7)}), flush=True)
sys.stdin.readline()
