"""Two GPUs in one gshare allocation (test/gpu/two_gpu.sh runs these as
processes of the allocation, and natively for comparison).

  python3 two_gpu.py peer            t.to("cuda:1"), copy_ across GPUs, a CuPy
                                     kernel on GPU 1 reading GPU 0's memory
  python3 two_gpu.py dist RANK FILE  one of two NCCL ranks: all-reduce sums, a
                                     tensor-parallel block vs one GPU, quota
  python3 two_gpu.py bench RANK FILE all-reduce bus bandwidth 1 MiB..1 GiB
  python3 two_gpu.py hf              a transformers model over both GPUs with
                                     device_map (accelerate) vs one GPU
  python3 two_gpu.py size            vLLM-style: size from mem_get_info of each
                                     GPU, take 90 % of it, use it
Prints PASS/FAIL lines (and BW lines); exits 1 on a failure."""
import importlib
import os
import sys
import time

import torch

MiB = 1 << 20
fails = 0


def check(cond, what):
    global fails
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    if not cond:
        fails += 1


def peer():
    check(torch.cuda.device_count() == 2, "two GPUs visible (%d)" % torch.cuda.device_count())
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda:0")
    y = x.to("cuda:1")
    check(torch.equal(y.cpu(), x.cpu()), 't.to("cuda:1") of a cuda:0 tensor')
    z = torch.empty_like(y)
    z.copy_(x)
    check(torch.equal(z.cpu(), x.cpu()), "copy_ from cuda:0 into cuda:1")
    w = (y * 2).to("cuda:0")
    check(torch.equal(w.cpu(), (x * 2).cpu()), "back from cuda:1 to cuda:0")
    try:
        import cupy
        import numpy as np
        with cupy.cuda.Device(0):
            a0 = cupy.arange(1 << 16, dtype=cupy.float32)
        with cupy.cuda.Device(1):
            try:
                cupy.cuda.runtime.deviceEnablePeerAccess(0)
            except cupy.cuda.runtime.CUDARuntimeError:
                pass
            out = cupy.zeros(1 << 16, dtype=cupy.float32)
            k = cupy.RawKernel(r'''
extern "C" __global__ void rd(unsigned long long src, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = ((const float *)src)[i] + 1.0f;
}''', "rd")
            k(((1 << 16) // 256,), (256,), (np.uint64(a0.data.ptr), out, np.int32(1 << 16)))
            cupy.cuda.Device(1).synchronize()
            ok = bool((out.get() == (np.arange(1 << 16, dtype=np.float32) + 1)).all())
        check(ok, "a kernel on GPU 1 reads GPU 0's memory")
    except ImportError:
        print("SKIP cupy not installed")
    for d in (0, 1):
        f, t = torch.cuda.mem_get_info(d)
        print("mem_get_info cuda:%d free %d MiB total %d MiB" % (d, f // MiB, t // MiB), flush=True)


def init(rank, path):
    import torch.distributed as dist
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="file://" + path, rank=rank, world_size=2)
    return dist


def distributed(rank, path):
    dist = init(rank, path)
    t = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    check(bool((t == 3).all()), "rank %d: all-reduce sum" % rank)
    # Tensor-parallel MLP block: W1 split by columns, W2 by rows.
    g = torch.Generator().manual_seed(0)
    d, h = 1024, 4096
    x = torch.randn(64, d, generator=g)
    w1 = torch.randn(d, h, generator=g) / d ** 0.5
    w2 = torch.randn(h, d, generator=g) / h ** 0.5
    ref = (torch.relu(x.double() @ w1.double()) @ w2.double()).float()
    cols = slice(rank * h // 2, (rank + 1) * h // 2)
    part = torch.relu(x.cuda() @ w1[:, cols].cuda()) @ w2[cols, :].cuda()
    dist.all_reduce(part)
    err = (part.cpu() - ref).abs().max().item()
    check(err < 1e-2, "rank %d: tensor-parallel block matches one GPU (max err %.2e)" % (rank, err))
    q = int(os.environ.get("GSHARE_EXPECT_QUOTA", "0"))
    if q:
        free, total = torch.cuda.mem_get_info()
        check(total == q, "rank %d: mem_get_info total %d MiB = quota" % (rank, total // MiB))
        xs = []
        try:
            while len(xs) < 4096:
                xs.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
        got = len(xs) * 256 * MiB
        check(free - 1024 * MiB <= got <= q, "rank %d: stopped at its quota (%d MiB of %d, %d free at start)"
              % (rank, got // MiB, q // MiB, free // MiB))
        del xs
    dist.barrier()
    dist.destroy_process_group()


def bench(rank, path):
    dist = init(rank, path)
    for mib in (1, 16, 256, 1024):
        n = mib * MiB // 4
        t = torch.ones(n, device="cuda")
        for _ in range(3):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        iters = 20 if mib < 1024 else 10
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        busbw = mib * MiB / dt / 1e9  # 2(n-1)/n = 1 for two ranks
        if rank == 0:
            print("BW %d MiB %.1f GB/s" % (mib, busbw), flush=True)
    dist.destroy_process_group()


def hf():
    try:
        importlib.import_module("accelerate")  # device_map needs it
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as e:
        print("SKIP %s" % e)
        return
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=8, n_embd=512, n_head=8, vocab_size=5000, n_positions=256)
    model = GPT2LMHeadModel(cfg).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        one = model.to("cuda:0").generate(ids.to("cuda:0"), max_new_tokens=16, do_sample=False, pad_token_id=0)
        model.to("cpu")
        from accelerate import dispatch_model
        # lm_head's weight is wte's (tied): both on GPU 0; the second half
        # of the layers and ln_f on GPU 1, activations moved between them.
        dm = {"transformer.wte": 0, "transformer.wpe": 0, "transformer.drop": 0, "transformer.ln_f": 1, "lm_head": 0}
        for i in range(cfg.n_layer):
            dm["transformer.h.%d" % i] = 0 if i < cfg.n_layer // 2 else 1
        split = dispatch_model(model, device_map=dm)
        two = split.generate(ids.to("cuda:0"), max_new_tokens=16, do_sample=False, pad_token_id=0)
    check(torch.equal(one.cpu(), two.cpu()), "a model split over both GPUs generates the same tokens")


def size():
    keep = []
    for d in (0, 1):
        free, total = torch.cuda.mem_get_info(d)
        n = int(free * 0.9)
        try:
            t = torch.empty(n, dtype=torch.uint8, device="cuda:%d" % d)
            t.fill_(1)
            keep.append(t)
            check(True, "cuda:%d: took 90%% of mem_get_info's free (%d of %d MiB)" % (d, n // MiB, total // MiB))
        except torch.OutOfMemoryError as e:
            check(False, "cuda:%d: 90%% of free (%d MiB) failed: %s" % (d, n // MiB, str(e)[:120]))


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "peer":
        peer()
    elif mode == "dist":
        distributed(int(sys.argv[2]), sys.argv[3])
    elif mode == "bench":
        bench(int(sys.argv[2]), sys.argv[3])
    elif mode == "hf":
        hf()
    elif mode == "size":
        size()
    sys.exit(1 if fails else 0)
