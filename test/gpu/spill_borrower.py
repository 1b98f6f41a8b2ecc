"""The borrower of test/gpu/spill_check.sh (docs/burst.md "Giving it
back"): fills up to GSHARE_FILL_GIB GiB (or out of memory) with 256 MiB
int32 tensors of seeded random values, each with its checksum, then
steps: one step reads every tensor (its sum) and checks it.  Prints JSON
lines: {"ready": GiB} (the last 1 GiB of tensors freed, kept in PyTorch's
cache as the steps' workspace), then per step {"step": ms, "ok": bool}.  Commands
on stdin (a line each): "pause" (no steps until "go"), "go", "quit"."""
import json
import os
import select
import sys
import time
import torch

MiB = 1 << 20
want = float(os.environ.get("GSHARE_FILL_GIB", "40")) * (1 << 30)
n = 64 * MiB  # int32 elements: 256 MiB
xs, sums = [], []
g = torch.Generator(device="cuda")
try:
    while (len(xs) + 1) * 4 * n <= want:
        g.manual_seed(len(xs) + 1)
        t = torch.randint(-(1 << 30), 1 << 30, (n,), dtype=torch.int32, device="cuda", generator=g)
        s = int(t.sum(dtype=torch.int64))  # may run out of memory itself: then t is not kept
        xs.append(t)
        sums.append(s)
except torch.OutOfMemoryError:
    pass
# Room for a step's temporaries (the int64 sums): the last 1 GiB of tensors
# stays in PyTorch's cache as the step's workspace.
del xs[-4:], sums[-4:]
torch.cuda.synchronize()
print(json.dumps({"ready": len(xs) * 4 * n / (1 << 30)}), flush=True)
paused = False
while True:
    r, _, _ = select.select([sys.stdin], [], [], 0 if not paused else 0.2)
    if r:
        cmd = sys.stdin.readline().strip()
        if cmd in ("quit", ""):
            break
        paused = cmd == "pause"
        print(json.dumps({"cmd": cmd}), flush=True)
        continue
    if paused:
        continue
    t0 = time.monotonic()
    got = torch.stack([x.sum(dtype=torch.int64) for x in xs]).tolist()
    ms = (time.monotonic() - t0) * 1e3
    print(json.dumps({"step": round(ms, 3), "ok": got == sums}), flush=True)
