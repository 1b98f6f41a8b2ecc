#!/usr/bin/python3
"""restart_bench: hooked processes across an agent crash and an agent
upgrade (issue 18), on the fake driver.

The real agent on one fake GPU of 4 GiB (32 MiB chunks, 64 MiB units), one
allocation of 32 units, GSHARE_BENCH_CLIENTS (default 3) e2e_restart
clients (test/e2e/e2e_restart.c) holding 48 MiB each and churning (blocks of
256 B .. 8 MiB and 40 MiB, cuMemAllocAsync, cuMemCreate), every byte read
back.

  crash    clients run GSHARE_BENCH_SECONDS (default 3), kill -9 of the
           agent, a new agent with the same arguments at once, the clients
           run as long again and stop.
  term     fresh clients; the same with SIGTERM for the kill (a container
           restart).
  upgrade  fresh clients; a new agent started beside the running one takes
           over (the chart's rolling update with maxSurge: docs/agent.md,
           "Upgrades"), then the old one gets SIGTERM.

After each, once the clients exited, the bench waits (up to 30 s) for the
units advertised to come back.  Prints per phase the clients' failed calls
(by call and error), bytes read back wrong, units advertised before /
lowest after / at the end, the longest call; last a line

  RESULT restart_failed_calls=N restart_units_lost=N upgrade_max_stall_ms=X

restart_failed_calls: failed calls of all clients of the three phases (and
blocks read back wrong, counted as failed calls); restart_units_lost: the
largest drop of units_total (gsharectl gpus) from before a phase to its
lowest after the new agent answered; upgrade_max_stall_ms: in the upgrade
phase, the longest single call the agent serves (cuMemAlloc/Free(Async),
cuMemCreate/Release, cuMemGetInfo) that ended from the moment the new agent
was started to the clients' stop, or the longest still in flight then
(the other phases' figure is printed in their line: a crash or a SIGTERM
leaves a gap until the new agent answers).  Targets: 0, 0, <= 100.

Environment: B (build dir), GSHARE_BENCH_CLIENTS, GSHARE_BENCH_SECONDS.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

B = os.environ.get("B", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BD = B if os.path.isabs(B) else os.path.join(ROOT, B)
AGENT = os.path.join(BD, "gshare-agent")
CTL = os.path.join(BD, "gsharectl")
HOOK = os.path.join(BD, "libgshare.so")
FAKE = os.path.join(BD, "test/fakecuda/libcuda.so.1")
PROG = os.path.join(BD, "test/e2e/e2e_restart")
CLIENTS = int(os.environ.get("GSHARE_BENCH_CLIENTS", "3"))
SECONDS = float(os.environ.get("GSHARE_BENCH_SECONDS", "3"))
UNITS = 32
MiB = 1 << 20
HANDED_OVER = "upgrade: handed over to the new agent"
CLIENT_ARGS = ["--hold", "48", "--churn", "6", "--vmm", "2", "--big", "40", "--big-every", "32"]


def say(msg):
    print("restart_bench: " + msg, flush=True)


class Agent:
    def __init__(self, tmp):
        self.tmp = tmp
        self.sock = os.path.join(tmp, "agent.sock")
        self.env = dict(os.environ)
        self.env.update(GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"),
                        GSHARE_FAKECUDA_MEM="4Gi", GSHARE_FAKECUDA_DEVICES="1",
                        LD_LIBRARY_PATH=os.path.dirname(FAKE))
        self.log = open(os.path.join(tmp, "agent.log"), "a")
        self.proc = None

    def start(self):
        """Starts it with the same arguments as ever; True once it answers
        (a killed agent leaves its socket file behind)."""
        args = [AGENT, "--cuda-library", FAKE, "--socket", self.sock,
                "--socket-root", os.path.join(self.tmp, "alloc"),
                "--state-dir", os.path.join(self.tmp, "state"),
                "--chunk-size", "32Mi", "--unit-size", "64Mi", "--reserve", "128Mi",
                "--reconcile-interval", "0"]
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=self.log)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60 and self.proc.poll() is None:
            if self.ctl("gpus") is not None:
                return True
            time.sleep(0.05)
        return False

    def handover(self):
        """A new agent started beside the running one takes over (the
        chart's rolling update, docs/agent.md "Upgrades"); then SIGTERM to
        the old one.  Returns (handed over, old agent's exit status)."""
        old = self.proc
        logpath = self.log.name
        n0 = open(logpath).read().count(HANDED_OVER)
        if not self.start():
            raise SystemExit("restart_bench: the new agent did not start; log in %s" % logpath)
        t0 = time.monotonic()
        handed = False
        while time.monotonic() - t0 < 60 and old.poll() is None:
            if open(logpath).read().count(HANDED_OVER) > n0:
                handed = True
                break
            time.sleep(0.05)
        new, self.proc = self.proc, old
        rc = self.stop(signal.SIGTERM)
        self.proc = new
        return handed, rc

    def ctl(self, *args):
        r = subprocess.run([CTL, "--socket", self.sock, "--json"] + list(args), capture_output=True,
                           text=True, timeout=30, env=self.env)
        return json.loads(r.stdout) if r.returncode == 0 else None

    def units(self):
        g = self.ctl("gpus")
        return g["gpus"][0]["units_total"] if g else None

    def stop(self, sig):
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc


class Client:
    def __init__(self, ag, alloc, name):
        self.stop_file = os.path.join(ag.tmp, name + ".stop")
        self.err = open(os.path.join(ag.tmp, name + ".stderr"), "w")
        env = dict(ag.env)
        env.update(LD_PRELOAD=HOOK, GSHARE_SOCKET=os.path.join(alloc["socket_dir"], "agent.sock"))
        self.p = subprocess.Popen([PROG, "--stop-file", self.stop_file] + CLIENT_ARGS, env=env,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.lines = []
        self.ready = threading.Event()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            self.lines.append(d)
            if d.get("event") == "ready":
                self.ready.set()
        self.ready.set()

    def stop(self):
        open(self.stop_file, "w").close()
        try:
            self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.t.join(10)
        self.err.close()
        s = [d for d in self.lines if d.get("event") == "summary"]
        return s[-1] if s else None


def phase(ag, alloc, name):
    """Fresh clients across one change of agent: crash (kill -9, then a new
    agent), term (SIGTERM, then a new agent) or upgrade (a new agent beside
    the running one takes over, then SIGTERM to the old one)."""
    units0 = ag.units()
    cs = [Client(ag, alloc, "%s-%d" % (name, i)) for i in range(CLIENTS)]
    for c in cs:
        c.ready.wait(120)
    time.sleep(SECONDS)
    t_stop = time.time() * 1000
    if name == "upgrade":
        handed, rc = ag.handover()
        how = "handover %s, old agent's SIGTERM" % ("done" if handed else "FAILED")
    else:
        rc = ag.stop(signal.SIGKILL if name == "crash" else signal.SIGTERM)
        if not ag.start():
            raise SystemExit("restart_bench: the new agent did not start; log in %s" % ag.log.name)
        how = "kill -9" if name == "crash" else "SIGTERM"
    lowest = units0
    t_end = time.monotonic() + SECONDS
    while time.monotonic() < t_end:
        u = ag.units()
        lowest = min(lowest, u if u is not None else 0)
        time.sleep(0.2)
    sums = [c.stop() for c in cs]
    t_done = time.time() * 1000
    # Units come back once the old processes are gone (up to 30 s).
    t0 = time.monotonic()
    end = ag.units()
    while end != units0 and time.monotonic() - t0 < 30:
        time.sleep(0.5)
        end = ag.units()
    lowest = min(lowest, end if end is not None else 0)
    failed = sum(s["failed_calls"] + s["verify_failures"] if s else 1 for s in sums)
    errors = {}
    for s in sums:
        for call, v in (s or {}).get("errors", {}).items():
            for err, n in v.items():
                errors["%s:%s" % (call, err)] = errors.get("%s:%s" % (call, err), 0) + n
    # The stall: ticks of the agent's calls from the stop to the end.
    stall = 0.0
    for c in cs:
        for d in c.lines:
            if d.get("event") == "tick" and t_stop <= d["unix_ms"] <= t_done + 1000:
                stall = max(stall, d.get("interval_max_hooked_ms", 0), d.get("inflight_ms", 0))
    longest = max((s or {}).get("max_hooked_ms", 0) for s in sums)
    say("%s: %d clients, %s (old agent rc %s), a new agent; failed calls %d %s; "
        "bytes read back wrong in %d blocks; units %s before, lowest %s after, %s at the end; "
        "longest agent call %.1f ms, %.1f ms from the stop on"
        % (name, CLIENTS, how, rc, failed, json.dumps(errors),
           sum((s or {}).get("verify_failures", 0) for s in sums), units0, lowest, end, longest, stall))
    return failed, units0 - lowest, stall


def main():
    for f in (AGENT, CTL, HOOK, FAKE, PROG):
        if not os.path.exists(f):
            raise SystemExit("restart_bench: missing %s (run make first)" % f)
    tmp = tempfile.mkdtemp(prefix="gshare-restart-bench-")
    ag = Agent(tmp)
    if not ag.start():
        raise SystemExit("restart_bench: the agent did not start; log in %s" % ag.log.name)
    try:
        g = ag.ctl("gpus")["gpus"][0]
        alloc = ag.ctl("create", *["%s-u%d" % (g["uuid"], u) for u in range(UNITS)])["allocation"]
        say("fake driver, 4 GiB GPU, 32 MiB chunks, %d units advertised, allocation of %d units, "
            "%d clients, %.0f s before and after each restart" % (g["units_total"], UNITS, CLIENTS, SECONDS))
        f1, lost1, _ = phase(ag, alloc, "crash")
        f2, lost2, _ = phase(ag, alloc, "term")
        f3, lost3, stall = phase(ag, alloc, "upgrade")
    finally:
        if ag.proc:
            ag.stop(signal.SIGTERM)
    if f1 + f2 + f3 == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        say("kept %s (the agents' log: agent.log, the clients' stderr: *.stderr)" % tmp)
    print("RESULT restart_failed_calls=%d restart_units_lost=%d upgrade_max_stall_ms=%.1f"
          % (f1 + f2 + f3, max(lost1, lost2, lost3, 0), stall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
