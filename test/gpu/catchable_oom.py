"""Issue 19, item 2, on a real GPU: a process fills its memory to about 90
MiB free, then calls cuFFT and cuSOLVER, whose modules load lazily outside
any allocation.  Natively (a GPU filled the same way) the calls fail with
errors the program catches and it lives; under gshare it must live too (the
agent covers the growth from the pod's free memory or fails its allocations,
never kills it within overQuotaBound).  Then the program frees half of what
it holds and tries again.  Prints one JSON line; run by catchable_oom.sh."""
import json
import os
import time

import torch

LEFT = 90 << 20
res = {}
x = torch.ones(1, device="cuda")  # the context
held = []
for step in (256 << 20, 64 << 20, 4 << 20, 1 << 20):
    while True:
        free, total = torch.cuda.mem_get_info()
        if free < LEFT + step:
            break
        try:
            held.append(torch.empty(step, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            break
free, total = torch.cuda.mem_get_info()
res["filled_free_mib"] = free >> 20
res["total_mib"] = total >> 20


def attempt(name, fn):
    try:
        fn()
        torch.cuda.synchronize()
        res[name] = "ok"
    except Exception as e:  # what a program that handles out of memory catches
        res[name] = "%s: %s" % (type(e).__name__, str(e).split("\n")[0][:160])


a = None


def make():
    global a
    a = torch.randn(512, 512, device="cuda")


attempt("tensor", make)
if a is not None:
    attempt("fft", lambda: torch.fft.fft(a))
    attempt("svd", lambda: torch.linalg.svd(a))
    attempt("eigh", lambda: torch.linalg.eigh(a @ a.T))
del held[: len(held) // 2]
torch.cuda.empty_cache()
attempt("tensor_after_free", make)
attempt("fft_after_free", lambda: torch.fft.fft(a))
attempt("svd_after_free", lambda: torch.linalg.svd(a))
attempt("alloc_after_free", lambda: torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
# Living on: the agent's usage scans (every second) see what the modules
# hold; a process killed over its quota never prints the line below.
time.sleep(float(os.environ.get("GSHARE_LIVE_S", "4")))
attempt("alloc_later", lambda: torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))
res["alive"] = True
print(json.dumps(res), flush=True)
