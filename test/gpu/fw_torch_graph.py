"""PyTorch: CUDA graph capture and replay under gshare (torch.cuda.graph),
with the default caching allocator and with
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (whose allocations inside
the capture are cuMemAllocAsync/cuMemFreeAsync on a capturing stream).
Replays with new inputs must match eager results."""
import os
import torch
from fw_common import check

mode = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
static_in = torch.randn(64, 512, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        model(static_in)
torch.cuda.current_stream().wait_stream(side)
g = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(g):
    static_out = model(static_in)
ok = True
for i in range(5):
    x = torch.randn(64, 512, device="cuda")
    static_in.copy_(x)
    g.replay()
    with torch.no_grad():
        want = model(x)
    ok = ok and torch.allclose(static_out, want, rtol=1e-4, atol=1e-5)
torch.cuda.synchronize()
check(ok, f"torch CUDA graph replays match eager results [{mode}]")
free, total = torch.cuda.mem_get_info()
check(total == int(os.environ["GSHARE_EXPECT_QUOTA"]), f"torch mem_get_info total is the quota after graphs [{mode}]")
