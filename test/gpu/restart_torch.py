"""PyTorch across agent restarts (issue 18): holds HOLD_GIB of data and keeps
training a transformer block, allocating and freeing temporaries (the
caching allocator off, so every step goes to the agent), while
test/gpu/restart_check.sh kills the agent (kill -9) and starts a new one,
then upgrades it (a second build takes over beside it).

Prints one JSON line per second: steps, the longest step (ms, the stall),
failed calls (exceptions), data checks.  Lines on stdin: "reset" (the longest step starts over), "pause" /
"resume" (no steps meanwhile: another process of the pod measures what it
can obtain), "grow": it it
allocates 64 MiB tensors until out of memory and prints what it got; on
"quit" it checks its data one last time, prints a summary and exits 0 if
nothing failed."""
import json
import os
import select
import sys
import time

import torch

HOLD = int(float(os.environ.get("HOLD_GIB", "4")) * (1 << 30))
dev = "cuda"
torch.manual_seed(0)
hold = torch.arange(HOLD // 8, dtype=torch.int64, device=dev)
expect = int(hold[:: 1 << 20].sum().item())
d, heads, seq, batch = 512, 8, 256, 16
model = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, batch_first=True, dropout=0.0).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(batch, seq, d, device=dev)
stats = {"steps": 0, "failed": 0, "errors": [], "max_step_ms": 0.0, "max_step_at": 0.0, "checks": 0,
         "check_failures": 0, "grown_bytes": 0}
t_start = time.monotonic()


def check_data():
    stats["checks"] += 1
    got = int(hold[:: 1 << 20].sum().item())
    if got != expect or int(hold[-1].item()) != HOLD // 8 - 1:
        stats["check_failures"] += 1


def step():
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    tmp = torch.empty(int(torch.randint(1 << 10, 64 << 20, (1,)).item()), dtype=torch.uint8, device=dev)
    tmp.fill_(1)
    del tmp
    torch.cuda.synchronize()


def grow():
    got = []
    try:
        while True:
            got.append(torch.empty(64 << 20, dtype=torch.uint8, device=dev))
    except (torch.OutOfMemoryError, RuntimeError) as e:
        # without the caching allocator an out of memory is an AcceleratorError
        if "out of memory" not in str(e):
            raise
    stats["grown_bytes"] = len(got) * (64 << 20)
    print(json.dumps({"event": "grown", "bytes": stats["grown_bytes"]}), flush=True)
    del got
    torch.cuda.empty_cache()


print(json.dumps({"event": "ready", "hold_bytes": HOLD, "pid": os.getpid()}), flush=True)
last = time.monotonic()
paused = False
cmds, inbuf = [], b""
while True:
    if paused:
        time.sleep(0.01)
    t0 = time.monotonic()
    try:
        if not paused:
            step()
            stats["steps"] += 1
    except Exception as e:  # noqa: BLE001
        stats["failed"] += 1
        stats["last_error_at"] = round(time.monotonic() - t_start, 3)
        if stats["failed"] <= 20:
            import traceback
            tb = traceback.extract_tb(e.__traceback__)[-1]
            print(json.dumps({"event": "error", "t": stats["last_error_at"], "unix": time.time(),
                              "where": "%s:%d %s" % (os.path.basename(tb.filename), tb.lineno, tb.line)}), flush=True)
        if len(stats["errors"]) < 5:
            stats["errors"].append(f"{type(e).__name__}: {e}"[:200])
    ms = (time.monotonic() - t0) * 1000
    if ms > stats["max_step_ms"] and stats["steps"] > 5:
        stats["max_step_ms"] = ms
        stats["max_step_at"] = round(t0 - t_start, 3)
    if time.monotonic() - last >= 1.0:
        last = time.monotonic()
        check_data()
        print(json.dumps({"event": "tick", **stats}), flush=True)
    # Commands are read with os.read, never through sys.stdin's buffer: a
    # buffered readline can take two lines at once ("resume", "reset") and
    # leave the second where select does not see it.
    if not cmds and select.select([0], [], [], 0)[0]:
        chunk = os.read(0, 4096)
        if not chunk:
            cmds.append("")
        inbuf += chunk
        while b"\n" in inbuf:
            line, inbuf = inbuf.split(b"\n", 1)
            cmds.append(line.decode().strip())
    if cmds:
        cmd = cmds.pop(0)
        if cmd == "grow":
            grow()
        elif cmd == "quit" or cmd == "":
            break
        elif cmd == "reset":
            stats["max_step_ms"] = 0.0
        elif cmd == "pause":  # while another process of the pod measures the quota
            paused = True
            print(json.dumps({"event": "paused"}), flush=True)
        elif cmd == "resume":
            paused = False
check_data()
print(json.dumps({"event": "summary", **stats}), flush=True)
sys.exit(0 if stats["failed"] == 0 and stats["check_failures"] == 0 else 1)
