#!/usr/bin/python3
"""One kubelet restart, one registration (issue 28, item 6).

A kubelet restart removes the plugin sockets (ours and its old kubelet.sock)
and creates kubelet.sock again; the plugin handled "our socket is gone" and
"kubelet.sock created" as two registrations 130 ms apart, and serving a fresh
socket for the second ended the first registration's stream: the kubelet
marked every unit Unhealthy and published allocatable 0 for a status period.

Runs the plugin against the stand-in agent and a kubelet stand-in that, like
the 1.36 kubelet, opens the plugin's ListAndWatch before it answers Register,
and restarts that kubelet many times, in both orders, with the events close
together:
  A  our socket and kubelet.sock removed, then a new kubelet.sock listening
     at once, 0 to 20 ms later (what a kubelet does);
  B  a new kubelet.sock bound (not accepting yet, as 1.36 does), then our
     socket removed, then the kubelet accepting.
Checks for each restart: exactly one Register reaches the new kubelet, and
the ListAndWatch stream it opened is not ended by the plugin and lists every
unit Healthy, up to the next restart (a duplicate Register comes within
milliseconds; each restart waits 1 s of quiet before the next, so a slow
machine can only hide a duplicate, never fail this test).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gsproto  # noqa: E402
import kubelet_standin as ks  # noqa: E402
import standin_agent  # noqa: E402

B = os.environ.get("B", "build")
PLUGIN = os.path.join(gsproto.REPO, B, "gshare-device-plugin")
QUIET = 1.0
# Seconds between the removal and the new kubelet.sock in order A: the
# plugin reads the first event and is serving when the second comes.
GAPS_A = [0, 0.001, 0.002, 0.003, 0.005, 0.008, 0.012, 0.02]
ROUNDS_B = 4


class Instance:
    """One kubelet process: its Registration server, and for order B the
    listener in front of it (bound at once, accepting on listen())."""

    def __init__(self, ns, kdir, tmp, n, slow):
        self.k = ks.Kubelet(ns, kdir)
        self.k.stream_first = True
        self.proxy = None
        if slow:
            self.k.sock = os.path.join(tmp, "kubelet-inner-%d.sock" % n)
        self.k.start()
        if slow:
            self.proxy = ks.SlowListener(os.path.join(kdir, "kubelet.sock"), self.k.sock)

    def stop(self):
        # Its connections die with it: the plugin's stream to it ends.
        for _, st in self.k.streams:
            st.cancel()
        if self.proxy:
            self.proxy.close()
        self.k.stop()

    def registers(self):
        n = 0
        while not self.k.registered.empty():
            self.k.registered.get()
            n += 1
        return n


def unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def settle(inst, failures, what):
    """Waits for the restart's Register and then QUIET s without another;
    checks the count and the stream."""
    t, reg = inst.k.wait_register(ks.HANG)
    if not ks.check("%s: registered" % what, reg is not None):
        failures.append(what)
        return
    n = 1
    while inst.k.wait_register(QUIET)[1] is not None:
        n += 1
    n += inst.registers()
    ok = ks.check("%s: exactly one Register" % what, n == 1, "%d Registers" % n)
    msgs, ended = [], None
    for _, st in inst.k.streams:
        if isinstance(st.first, Exception) or st.first is None:
            ended = st.first
        else:
            msgs.append(st.first)
        while not st.q.empty():
            m = st.q.get()
            if isinstance(m, Exception):
                ended = m
            else:
                msgs.append(m)
    ok &= ks.check("%s: its ListAndWatch stream still open" % what, ended is None and len(inst.k.streams) == 1,
                   "%d streams, ended: %r" % (len(inst.k.streams), ended))
    ok &= ks.check("%s: every list has all 16 units Healthy" % what,
                   bool(msgs) and all(len(m.devices) == 16 and all(d.health == "Healthy" for d in m.devices) for m in msgs),
                   [sorted(set(ks.health(m).values())) for m in msgs])
    if not ok:
        failures.append(what)


def main():
    if not os.path.exists(PLUGIN):
        print("missing %s: run make first" % PLUGIN)
        return 1
    tmp = tempfile.mkdtemp(prefix="gshare-kubelet-restart-")
    ns = gsproto.load(tmp)
    kdir = os.path.join(tmp, "dp")
    os.makedirs(kdir)
    agent_sock = os.path.join(tmp, "agent.sock")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("resourceName: gshare.io/gpumem\nunitSize: 1Gi\nkubeletDir: %s\nagentSocket: %s\n"
                "hookPath: %s/libgshare.so\npreloadPath: %s/ld.so.preload\nsocketRoot: %s/alloc\n"
                "inject: preload\nlogLevel: info\n" % (kdir, agent_sock, tmp, tmp, tmp))
    agent = standin_agent.Agent(ns.ctl, agent_sock, ngpus=2, units=8, numa=[0, -1],
                                sockroot=os.path.join(tmp, "alloc"))
    agent.start()
    inst = Instance(ns, kdir, tmp, 0, False)
    log = open(os.path.join(tmp, "plugin.log"), "w+")
    plugin = subprocess.Popen([PLUGIN, "--config", cfg, "--nvidia-proc", os.path.join(tmp, "nvproc"),
                               "--agent-timeout-ms", "2000", "-v"], stderr=log)
    failures = []
    ours, ksock = os.path.join(kdir, "gshare.sock"), os.path.join(kdir, "kubelet.sock")
    try:
        settle(inst, failures, "start")
        n = 1
        for gap in GAPS_A:
            inst.stop()
            new = None
            unlink(ours)
            unlink(ksock)
            if gap:
                time.sleep(gap)
            new = inst = Instance(ns, kdir, tmp, n, False)
            settle(new, failures, "restart A (sockets removed, kubelet.sock %.0f ms later)" % (gap * 1000))
            n += 1
        for _ in range(ROUNDS_B):
            inst.stop()
            unlink(ksock)
            inst = Instance(ns, kdir, tmp, n, True)
            unlink(ours)
            inst.proxy.listen()
            settle(inst, failures, "restart B (kubelet.sock bound, our socket removed, then accepting)")
            n += 1
        ks.check("plugin still running", plugin.poll() is None)
    finally:
        inst.stop()
        plugin.send_signal(signal.SIGTERM)
        try:
            plugin.wait(10)
        except subprocess.TimeoutExpired:
            plugin.kill()
            plugin.wait()
        agent.stop()
        log.seek(0)
        if ks.failed:
            print("---- plugin log ----\n" + "\n".join(
                l for l in log.read().splitlines() if "ListAndWatch: sent" not in l)[-8000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (ks.passed, ks.failed))
    return 1 if ks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
