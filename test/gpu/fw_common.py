"""Shared helpers for the framework suite (runs on a real GPU, under the hook).

Each fw_*.py script is started by test/gpu/run.sh inside one allocation:
LD_PRELOAD names libgshare.so, GSHARE_SOCKET the allocation's socket, and
GSHARE_EXPECT_QUOTA the allocation's quota in bytes. A script prints
"PASS <name> ..." lines and exits 0, or raises."""
import os
import sys

MiB = 1 << 20
GiB = 1 << 30


def quota():
    return int(os.environ["GSHARE_EXPECT_QUOTA"])


def under_gshare():
    return "libgshare" in os.environ.get("LD_PRELOAD", "")


def check(cond, what):
    if not cond:
        print(f"FAIL {what}", flush=True)
        sys.exit(1)
    print(f"PASS {what}", flush=True)
