"""PyTorch: CUDA tensors shared between two processes of one container with
torch.multiprocessing (CUDA IPC)."""
import torch
import torch.multiprocessing as mp
from fw_common import check


def child(q_in, q_out):
    t = q_in.get()
    t.add_(1)               # write through the shared mapping
    torch.cuda.synchronize()
    q_out.put(float(t.sum()))
    q_in.get()              # keep t alive until the parent has checked


if __name__ == "__main__":
    mp.set_start_method("spawn")
    q_in, q_out = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(q_in, q_out))
    p.start()
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    before = float(t.sum())
    q_in.put(t)
    child_sum = q_out.get(timeout=120)
    torch.cuda.synchronize()
    check(child_sum == before + (1 << 20), "torch.multiprocessing child sees and writes the tensor")
    check(float(t.sum()) == before + (1 << 20), "torch.multiprocessing parent sees the child's write")
    q_in.put(None)
    p.join(60)
    check(p.exitcode == 0, "torch.multiprocessing child exited cleanly")
