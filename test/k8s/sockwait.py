#!/usr/bin/python3
"""sockwait.py PATH up|down [TIMEOUT_S] — waits until the Unix socket PATH
accepts a connection (up) or refuses one / is absent (down), trying every
20 ms; prints the unix time in ms when it saw it and exits 0, or exits 1
after TIMEOUT_S (default 300).  A connection made is closed at once without
a byte sent.  Used by test/k8s/late_start_run.sh to time the agent's gap."""
import socket
import sys
import time

path, want = sys.argv[1], sys.argv[2]
end = time.time() + (float(sys.argv[3]) if len(sys.argv) > 3 else 300.0)
while time.time() < end:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        up = True
    except OSError:
        up = False
    finally:
        s.close()
    if up == (want == "up"):
        print(int(time.time() * 1000), flush=True)
        sys.exit(0)
    time.sleep(0.02)
sys.exit(1)
