#!/usr/bin/env python3
"""The processes of test/gpu/mps_fault.sh (issue 30: MPS's fault domain).

  mps_fault.py victim SECONDS
      a loop of 4096^3 bf16 GEMMs, synchronized every 10, for SECONDS;
      prints "warm", then one line a second {"t":..,"done":..}, and at the
      end {"ok": true, "done": N} or {"ok": false, "error": "..."} (the
      first CUDA error its work met).
  mps_fault.py attacker
      one kernel that stores to an address that is not mapped (an illegal
      memory access), then a synchronize; prints {"error": "..."}.
"""
import json
import sys
import time


def victim(seconds):
    import torch
    a = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    print("warm", flush=True)
    done, t0, last = 0, time.monotonic(), 0.0
    try:
        while time.monotonic() - t0 < seconds:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            done += 10
            if time.monotonic() - last >= 1:
                last = time.monotonic()
                print(json.dumps({"t": last, "done": done}), flush=True)
    except Exception as ex:  # noqa: BLE001 — what the fault did is the measure
        print(json.dumps({"ok": False, "error": str(ex).splitlines()[0], "done": done}), flush=True)
        return 1
    print(json.dumps({"ok": True, "done": done}), flush=True)
    return 0


def attacker():
    import cupy
    bad = cupy.RawKernel(r'''extern "C" __global__ void bad(void) {
        *(volatile int *)0x10000000dead0ULL = 1;
    }''', "bad")
    try:
        bad((1,), (1,), ())
        cupy.cuda.runtime.deviceSynchronize()
    except Exception as ex:  # noqa: BLE001
        print(json.dumps({"error": str(ex).splitlines()[0]}), flush=True)
        return 0
    print(json.dumps({"error": None}), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(victim(float(sys.argv[2])) if sys.argv[1] == "victim" else attacker())
