"""PyTorch in an allocation with a burst limit (docs/burst.md): its
guarantee is GSHARE_EXPECT_QUOTA, its burst GSHARE_EXPECT_BURST.
mem_get_info's total is what it may use now (at most the burst, more than
the quota while the GPU has free memory); tensors allocate past the quota
up to what was free, keep their values, and the next one raises
torch.OutOfMemoryError; after empty_cache the borrowed memory is back."""
import os
import time
import torch
from fw_common import MiB, GiB, check, quota

q = quota()
burst = int(os.environ["GSHARE_EXPECT_BURST"])
free, total = torch.cuda.mem_get_info()
print(f"INFO mem_get_info free {free // MiB} MiB total {total // MiB} MiB, quota {q // MiB}, burst {burst // MiB}")
check(q < total <= burst, f"torch mem_get_info total {total // MiB} MiB is past the quota, within the burst")
check(free <= total, "free <= total")

step = 256 * MiB
xs = []
oom = False
t0 = time.monotonic()
try:
    while len(xs) * step <= burst + GiB:
        t = torch.empty(step, dtype=torch.uint8, device="cuda")
        t.fill_(len(xs) & 0xff)
        xs.append(t)
except torch.OutOfMemoryError:
    oom = True
torch.cuda.synchronize()
got = len(xs) * step
print(f"INFO got {got // MiB} MiB in {time.monotonic() - t0:.2f} s (quota {q // MiB} MiB)")
check(oom, f"torch raised OutOfMemoryError after {got // MiB} MiB")
check(q < got <= burst, f"torch got {got // MiB} MiB: past the quota {q // MiB}, within the burst {burst // MiB}")
check(got >= free - 2 * step, f"torch got {got // MiB} MiB, close to what was free ({free // MiB} MiB)")
last = xs.pop()
del last, t
torch.cuda.synchronize()
ok = all(int(x[::step // 7].min()) == (i & 0xff) == int(x.max()) for i, x in enumerate(xs))
check(ok, "torch tensors in borrowed memory keep their values")
del xs
torch.cuda.empty_cache()
free2, total2 = torch.cuda.mem_get_info()
print(f"INFO after empty_cache: free {free2 // MiB} MiB total {total2 // MiB} MiB")
check(free2 >= free - 512 * MiB, f"memory back after empty_cache: free {free2 // MiB} MiB")
