"""PyTorch: mem_get_info reports the allocation; tensors allocate up to the
quota and the next one raises torch.OutOfMemoryError. Run it with and without
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."""
import os
import torch
from fw_common import MiB, GiB, check, quota

q = quota()
mode = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default")
free, total = torch.cuda.mem_get_info()
check(total == q, f"torch mem_get_info total {total} == quota {q} [{mode}]")
check(0 < free <= q, f"torch mem_get_info free {free} <= quota [{mode}]")
# The process's context is charged to the allocation: used includes it.
check(q - free >= 256 * MiB, f"torch mem_get_info used {(q - free) // MiB} MiB includes the context [{mode}]")

step = 256 * MiB
xs = []
oom = False
try:
    while len(xs) * step <= q + GiB:
        t = torch.empty(step, dtype=torch.uint8, device="cuda")
        t.fill_(len(xs) & 0xff)
        xs.append(t)
except torch.OutOfMemoryError:
    oom = True
got = len(xs) * step
check(oom, f"torch raised OutOfMemoryError after {got // MiB} MiB [{mode}]")
check(got <= q, f"torch got {got // MiB} MiB <= quota {q // MiB} MiB [{mode}]")
check(got >= free - 2 * step, f"torch got {got // MiB} MiB, close to what was free ({free // MiB} MiB) [{mode}]")
# The memory is real and usable: every tensor still holds its own value
# (checked after giving one tensor back: the reductions need a little memory).
last = xs.pop()
del last, t
torch.cuda.synchronize()
ok = all(int(x[::step // 7].min()) == (i & 0xff) == int(x.max()) for i, x in enumerate(xs))
check(ok, f"torch tensors keep their values [{mode}]")
del xs
torch.cuda.empty_cache()
free2, _ = torch.cuda.mem_get_info()
check(free2 >= free - 512 * MiB, f"torch memory back after empty_cache: free {free2 // MiB} MiB [{mode}]")
