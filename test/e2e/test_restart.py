#!/usr/bin/python3
"""End to end: hooked processes keep working while the agent is killed or
stopped and a new one started with the same configuration and state
directory (issue 18), on the fake driver.

One fake GPU of 4 GiB (32 MiB chunks, 64 MiB units: 124 chunks, 62 units),
one allocation of 32 units (2 GiB: room for the clients' chunks, which
they keep once granted, several times over).  e2e_restart clients (test/e2e/
e2e_restart.c) hold memory filled with their own pattern and churn: blocks
of 256 B .. 8 MiB and of 40 MiB (over a chunk), cuMemAllocAsync,
cuMemCreate/cuMemMap, everything written and read back; they count every
failed call, the longest call and every byte read back wrong.

  crash     3 clients; kill -9 of the agent; a new agent with the same
            arguments.  The clients see no failed call and no wrong byte;
            the units advertised are the same; the clients' processes are
            registered again (listed; each allocates again under the new
            agent, which logs that it reclaimed its memory) and the
            allocation's usage counts their hold; a new process of the
            allocation grows to at most the quota less what they hold (one
            chunk of slack), and to at least the allocation's free chunks
            as the agent lists them (less one; checked before the kill too,
            as a baseline); once the clients exit the pool's chunks are all
            back, the allocation idle, and after its release the fake GPU's
            use is what it was at the first start.
  term      the same across SIGTERM (exit 0) and a new start (a container
            restart).
  upgrade   the same across an upgrade as the chart makes it (maxSurge): a
            new agent started beside the running one takes over (the old
            one logs "upgrade: handed over to the new agent"), then the old
            one gets SIGTERM and exits 0; a second allocation, best-effort
            with cap 40 and weight 20 (gsharectl create), has the same
            compute policy under the new agent.
  wait      GSHARE_AGENT_WAIT=1 and the agent down for 5 s: the client's
            allocations wait for the bound (the first fails >= 0.9 s and
            < 15 s after the kill), then fail
            with CUDA_ERROR_OUT_OF_MEMORY (only those, and memory queries),
            its frees succeed without waiting (each < 1 s), it is not
            killed, its data stays; once the agent is back its allocations
            succeed again.
  storm     kill -9 of the agent 5 times in a row while 3 clients churn
            flat out; then the same accounting as after a crash.

Deadlines only catch hangs (30-60 s, polling); no timing is asserted
tighter than the 1 s wait bound.  A missing build product is a failure.

Arguments: the parts to run (crash, term, upgrade, wait, storm,
handover_faults; default all; --list names them): test/tests.list runs each
as an entry of its own.  Environment: B (build dir), SANITIZE (as
test_e2e.py), GSHARE_TEST_SEED (the clients' seeds and the storm's timing;
printed).  CUDA IPC handles across restarts: test_ipcrestart.py.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402
from test_density import fake_used  # noqa: E402

RESTART = os.path.join(e.BD, "test/e2e/e2e_restart")
FAKE_MEM = "4Gi"
UNITS = 32
HOLD_MIB = (48, 48, 32)
# A client's churn: up to 6 live blocks of 256 B .. 8 MiB, one in 32 of
# them 40 MiB (over a 32 MiB chunk), up to 2 cuMemCreate allocations.
CHURN = ["--churn", "6", "--vmm", "2", "--big", "40", "--big-every", "32"]
LONG = 60      # hang catchers
WAIT = 30
# The old agent's line once the new one took over (docs/agent.md, "Upgrades").
HANDED_OVER = "upgrade: handed over to the new agent"


def wait_for(fn, limit=WAIT, step=0.1):
    """fn() until it is true or limit seconds passed; its last value."""
    t0 = time.monotonic()
    while True:
        v = fn()
        if v or time.monotonic() - t0 > limit:
            return v
        time.sleep(step)


class Agent(e.Agent):
    """test_e2e's agent on a 4 GiB fake GPU, restartable with the same
    arguments: start() waits until the new agent answers on its control
    socket (a killed agent leaves its socket file behind)."""

    def __init__(self, tmp, extra=None):
        super().__init__(tmp, ["--reconcile-interval", "0"] + list(extra or []))
        self.env["GSHARE_FAKECUDA_MEM"] = FAKE_MEM
        self.starts = 0

    def args(self):
        return [e.AGENT, "--cuda-library", e.FAKE, "--socket", self.sock,
                "--socket-root", os.path.join(self.tmp, "alloc"),
                "--state-dir", os.path.join(self.tmp, "state"),
                "--chunk-size", "32Mi", "--unit-size", "64Mi", "--reserve", "128Mi"] + self.extra

    def start(self):
        self.starts += 1
        self.log.write("==== test_restart: agent start %d\n" % self.starts)
        self.log.flush()
        self.proc = subprocess.Popen(self.args(), env=self.env, stdout=self.log, stderr=self.log)
        t0 = time.monotonic()
        while time.monotonic() - t0 < LONG:
            if self.proc.poll() is not None:
                break
            if self.ctl("gpus", ok=False).returncode == 0:
                return True
            time.sleep(0.05)
        check(False, "agent start %d answers on its control socket within %d s (rc %s)"
              % (self.starts, LONG, self.proc.poll()))
        return False

    def handover(self):
        """An upgrade as the chart does it: a new agent started beside the
        running one takes over (docs/agent.md, "Upgrades"), then the old one
        gets SIGTERM.  Returns (handed over, the old agent's exit status)."""
        old, n0 = self.proc, self.logtext().count(HANDED_OVER)
        self.starts += 1
        self.log.write("==== test_restart: agent start %d, beside the running one\n" % self.starts)
        self.log.flush()
        self.proc = subprocess.Popen(self.args(), env=self.env, stdout=self.log, stderr=self.log)
        done = wait_for(lambda: self.logtext().count(HANDED_OVER) > n0 or self.proc.poll() is not None
                        or old.poll() is not None, LONG)
        handed = bool(done) and self.logtext().count(HANDED_OVER) > n0
        old.send_signal(signal.SIGTERM)
        try:
            rc = old.wait(timeout=LONG)
        except subprocess.TimeoutExpired:
            old.kill()
            rc = old.wait()
        return handed, rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def term(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=LONG)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def stop(self):
        if self.proc and self.proc.poll() is None:
            rc = self.term()
            check(rc == 0, "agent exits 0 on SIGTERM (rc %s)" % rc)
        self.proc = None

    def gpu(self):
        return self.gpus()[0]

    def alloc(self, aid):
        return self.allocs().get(aid)


class Client:
    """One e2e_restart process under the hook; its JSON lines are read by a
    thread of its own."""

    def __init__(self, ag, alloc, name, args, env=None):
        self.name = name
        self.stop_file = os.path.join(ag.tmp, name + ".stop")
        self.pause_file = os.path.join(ag.tmp, name + ".pause")
        self.errpath = os.path.join(ag.tmp, name + ".stderr")
        self.lines = []
        self.cv = threading.Condition()
        henv = e.hook_env(ag, alloc)
        henv.update(env or {})
        cmd = [RESTART, "--stop-file", self.stop_file, "--pause-file", self.pause_file,
               "--seed", str(random.randrange(1 << 30))] + list(args)
        self.err = open(self.errpath, "w")
        self.p = subprocess.Popen(cmd, env=henv, stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.pid = self.p.pid
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.summary = None
        self.rc = None

    def _read(self):
        for line in self.p.stdout:
            try:
                d = json.loads(line)
            except ValueError:
                d = {"event": "garbage", "text": line}
            with self.cv:
                self.lines.append(d)
                self.cv.notify_all()
        with self.cv:
            self.lines.append({"event": "eof"})
            self.cv.notify_all()

    def mark(self):
        with self.cv:
            return len(self.lines)

    def wait_event(self, event, after=0, limit=LONG):
        """The first line of that event at index >= after, or None."""
        t0 = time.monotonic()
        with self.cv:
            while True:
                for d in self.lines[after:]:
                    if d.get("event") == event:
                        return d
                    if d.get("event") == "eof":
                        return None
                left = limit - (time.monotonic() - t0)
                if left <= 0:
                    return None
                self.cv.wait(min(left, 0.5))

    def wait_line(self, pred, after=0, limit=LONG):
        """The first tick/ready/... line at index >= after that pred accepts."""
        t0 = time.monotonic()
        with self.cv:
            while True:
                for d in self.lines[after:]:
                    if d.get("event") == "eof":
                        return None
                    if d.get("event") != "garbage" and pred(d):
                        return d
                left = limit - (time.monotonic() - t0)
                if left <= 0:
                    return None
                self.cv.wait(min(left, 0.5))

    def last(self):
        with self.cv:
            for d in reversed(self.lines):
                if "calls" in d:
                    return d
        return {}

    def ticks(self, n, limit=LONG):
        """Waits until n more ticks came (the client lives and its ticker
        runs); True if they did."""
        m = self.mark()
        for _ in range(n):
            d = self.wait_event("tick", m, limit)
            if d is None:
                return False
            with self.cv:
                m = self.lines.index(d, m) + 1
        return True

    def pause(self):
        m = self.mark()
        open(self.pause_file, "w").close()
        return self.wait_event("paused", m)

    def resume(self):
        m = self.mark()
        os.unlink(self.pause_file)
        return self.wait_event("resumed", m)

    def stop(self, limit=LONG):
        if self.rc is not None:
            return self.summary
        open(self.stop_file, "w").close()
        try:
            self.rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.rc = self.p.wait()
            check(False, "%s: stops within %d s of its stop file (killed)" % (self.name, limit))
        self.reader.join(10)
        self.err.close()
        self.summary = self.wait_event("summary", 0, 0)
        return self.summary

    def stderr(self):
        with open(self.errpath) as f:
            return f.read().strip()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def brief(s):
    """The summary's numbers that matter, for the check lines."""
    if not s:
        return "no summary"
    return ("calls %d failed %d %s verify_failures %d faults %d max %.1f ms (%s) hooked max %.1f ms (%s)"
            % (s["calls"], s["failed_calls"], json.dumps(s.get("errors", {})), s["verify_failures"],
               s["faults"], s["max_ms"], s["max_call"], s["max_hooked_ms"], s["max_hooked_call"]))


def clean_summary(c, what):
    s = c.summary
    ok = (s is not None and c.rc == 0 and s["failed_calls"] == 0 and s["verify_failures"] == 0
          and s["faults"] == 0)
    check(ok, "%s: %s (pid %d) exits 0 with no failed call and every byte read back right: rc %s, %s%s"
          % (what, c.name, c.pid, c.rc, brief(s), "" if ok else "; stderr: " + c.stderr()[-600:]))


class Setup:
    """A fresh agent, one allocation of UNITS units, the starting figures."""

    def __init__(self, name, extra=None):
        self.tmp = tempfile.mkdtemp(prefix="gshare-restart-%s-" % name)
        self.name = name
        self.nfail = len(e.failures)
        self.ag = Agent(self.tmp, extra)
        self.clients = []
        self.ok = self.ag.start()
        if not self.ok:
            return
        self.used0, _ = fake_used(self.ag)
        self.gpu0 = self.ag.gpu()
        uuid = self.gpu0["uuid"]
        self.chunk = self.gpu0["chunk_bytes"]
        self.A = self.ag.create(["%s-u%d" % (uuid, u) for u in range(UNITS)])["allocation"]
        self.quota = self.A["parts"][0]["quota_bytes"]
        self.gpu1 = self.ag.gpu()  # with the allocation made

    def client(self, name, args, env=None):
        c = Client(self.ag, self.A, "%s-%s" % (self.name, name), args, env)
        self.clients.append(c)
        return c

    def pids(self):
        a = self.ag.alloc(self.A["id"])
        return {p["pid"] for p in a["processes"]} if a else set()

    def part(self):
        a = self.ag.alloc(self.A["id"])
        return a["parts"][0] if a else None

    def finish(self):
        for c in self.clients:
            c.kill()
        if self.ag.proc:
            self.ag.stop()
        if len(e.failures) > self.nfail:
            print("---- %s: kept %s; the end of the agents' log:\n%s"
                  % (self.name, self.tmp, self.ag.logtext()[-20000:]))
            for c in self.clients:
                err = c.stderr()
                if err:
                    print("---- %s stderr:\n%s" % (c.name, err[-2000:]))
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def start_clients(s, n=3, extra=(), env=None):
    cs = []
    for i in range(n):
        args = ["--hold", str(HOLD_MIB[i % len(HOLD_MIB)]),
                "--hold-block", "40" if i == 0 else "8"] + CHURN + list(extra)
        cs.append(s.client("c%d" % i, args, env))
    for c in cs:
        r = c.wait_event("ready")
        want = HOLD_MIB[cs.index(c) % len(HOLD_MIB)] * MiB
        check(r is not None and r["hold_bytes"] == want and r["failed_calls"] == 0,
              "%s: holds %d MiB, written and read back, before anything happens: %s"
              % (c.name, want // MiB, r if r is None else "failed %d" % r["failed_calls"]))
    return cs


def registered(s, cs, what):
    pids = {c.pid for c in cs}
    got = wait_for(lambda: pids <= s.pids())
    check(bool(got), "%s: the clients' processes %s are registered with the agent (listed: %s)"
          % (what, sorted(pids), sorted(s.pids())))
    return bool(got)


def hold_of(c):
    return (c.wait_event("ready", 0, 0) or {}).get("hold_bytes", 0)


def reconnected(s, cs, what):
    """Each client allocates again under the new agent (a process the
    ledger names is listed as a ghost before it reconnects: being listed is
    not enough) and the agent says it reclaimed its memory."""
    for c in cs:
        c.ticks(1)              # a tick from after the new agent answered
        base = c.last().get("allocs_ok", 0)
        d = c.wait_line(lambda x: x.get("allocs_ok", 0) > base, c.mark(), WAIT)
        check(d is not None, "%s: %s allocates again under the new agent (allocations done %s -> %s)"
              % (what, c.name, base, (d or c.last()).get("allocs_ok")))
    log = s.ag.logtext()
    for c in cs:
        check(re.search(r"process %d \(.*\) reclaimed its memory" % c.pid, log) is not None,
              "%s: the agent logs that process %d reclaimed its memory" % (what, c.pid))


def usage_counts_hold(s, cs, what, limit=WAIT):
    hold = sum(hold_of(c) for c in cs)
    p = wait_for(lambda: (lambda q: q if q and q["used_bytes"] >= hold and
                          (q["chunks_quota"] - q["chunks_free"]) * s.chunk >= hold else None)(s.part()), limit)
    q = p or s.part() or {}
    check(p is not None, "%s: the allocation's usage counts the %d MiB the clients hold "
          "(used_bytes %s MiB, chunks out %s of %s)"
          % (what, hold // MiB, q.get("used_bytes", 0) // MiB,
             q.get("chunks_quota", 0) - q.get("chunks_free", 0), q.get("chunks_quota")))


def units_same(s, what):
    g = s.ag.gpu()
    check(g["units_total"] == s.gpu0["units_total"] and g["units_allocated"] == s.gpu1["units_allocated"],
          "%s: units advertised %d (were %d), allocated %d (were %d)"
          % (what, g["units_total"], s.gpu0["units_total"], g["units_allocated"], s.gpu1["units_allocated"]))
    a = s.ag.alloc(s.A["id"])
    check(a is not None and a["socket_dir"] == s.A["socket_dir"] and
          a["parts"][0]["quota_bytes"] == s.quota,
          "%s: the allocation is there, same socket directory and quota" % what)


def grow_check(s, cs, what):
    """Pauses the clients (only their hold left), grows a new process of the
    allocation, resumes them."""
    held = 0
    for c in cs:
        p = c.pause()
        check(p is not None, "%s: %s pauses (frees its churn, keeps its hold)" % (what, c.name))
        held += p["bytes_held"] if p else hold_of(c)
    free_chunks = (s.part() or {}).get("chunks_free", 0)
    g = s.client("grow-%d" % len(s.clients), ["--grow"])
    g.wait_event("grown")
    sm = g.stop()
    # Its chunks go back to the allocation once the agent saw it exit; the
    # clients must not find the allocation full when they resume.
    check(bool(wait_for(lambda: g.pid not in s.pids())),
          "%s: the growing process is gone from the agent's list after it exited" % what)
    got = sm["grow_bytes"] if sm else -1
    top = s.quota - held + s.chunk
    # The paused clients keep their empty chunks (as without a restart):
    # what is obtainable is what the agent lists free in the allocation.
    low = (free_chunks - 1) * s.chunk
    check(sm is not None and sm["failed_calls"] == 0 and sm["verify_failures"] == 0 and got <= top,
          "%s: a new process of the allocation obtains at most the quota less what the others hold "
          "(%d MiB <= %d - %d + one chunk = %d MiB): %s"
          % (what, got // MiB, s.quota // MiB, held // MiB, top // MiB, brief(sm)))
    check(got >= low, "%s: ... and at least the allocation's free chunks as the agent listed them, less one "
          "(%d MiB >= (%d - 1) x %d MiB)" % (what, got // MiB, free_chunks, s.chunk // MiB))
    for c in cs:
        check(c.resume() is not None, "%s: %s resumes" % (what, c.name))


def pool_back(s, what):
    """After every client exited: the allocation idle, the pool's chunks
    back; then released: the pool whole, the fake GPU's use as at start."""
    def idle():
        a = s.ag.alloc(s.A["id"])
        g = s.ag.gpu()
        if not a:
            return None
        p = a["parts"][0]
        if (not a["processes"] and p["chunks_free"] == p["chunks_quota"] and p["bytes_requested"] == 0
                and g["chunks_total"] == s.gpu1["chunks_total"] and g["chunks_free"] == s.gpu1["chunks_free"]
                and g["units_total"] == s.gpu0["units_total"]):
            return True
        return None
    ok = wait_for(idle)
    g, a = s.ag.gpu(), s.ag.alloc(s.A["id"]) or {"parts": [{}], "processes": []}
    check(bool(ok), "%s: once the clients exited the allocation is idle and the pool's chunks are back "
          "(GPU chunks %d/%d free, were %d/%d; allocation %s/%s free, %d processes)"
          % (what, g["chunks_free"], g["chunks_total"], s.gpu1["chunks_free"], s.gpu1["chunks_total"],
             a["parts"][0].get("chunks_free"), a["parts"][0].get("chunks_quota"), len(a["processes"])))
    s.ag.ctl("release", s.A["id"])

    def whole():
        g = s.ag.gpu()
        if not g["chunks_free"] == g["chunks_total"] == s.gpu0["chunks_total"]:
            return None
        # The fake driver drops what dead processes held when a process
        # opens it: a process of its own (no hook) does.
        e.run([e.CUDA, "meminfo"], s.ag.env)
        return fake_used(s.ag)[0] == s.used0
    ok = wait_for(whole, step=0.5)
    g = s.ag.gpu()
    check(bool(ok), "%s: released, the whole pool is free (%d/%d chunks, at first start %d) and the fake "
          "GPU's use is what it was at the first start (%d MiB, was %d MiB): nothing leaked"
          % (what, g["chunks_free"], g["chunks_total"], s.gpu0["chunks_total"],
             fake_used(s.ag)[0] // MiB, s.used0 // MiB))


def restart(how):
    """crash: kill -9, then a new agent; term: SIGTERM, then a new agent (a
    container restart); upgrade: a new agent beside the running one takes
    over, then SIGTERM to the old one (the chart's rolling update)."""
    what = how
    s = Setup(what)
    try:
        if not s.ok:
            return
        # An allocation with a compute policy set by an administrator: the
        # new agent has it (docs/compute.md: restarts and upgrades keep
        # the last policy).  Only in upgrade (the chunks are handed over):
        # test_qos kills its agent with -9 and checks the policies, and
        # here after a kill -9 this allocation's two chunks, made again
        # beside the memory the clients still map, once left a client's
        # allocation without room under TSan.
        Q = None
        if how == "upgrade":
            Q = s.ag.create_args(["--compute-class", "best-effort", "--compute-cap", "40", "--compute-weight",
                                  "20", "%s-u%d" % (s.gpu0["uuid"], UNITS)])["allocation"]
        cs = start_clients(s)
        for c in cs:
            c.ticks(2)
        registered(s, cs, what + ": before")
        usage_counts_hold(s, cs, what + ": before")
        if how == "crash":
            grow_check(s, cs, what + ": before")  # the same figures without a restart
            for c in cs:
                c.ticks(1)
        if how == "crash":
            s.ag.kill9()
        elif how == "term":
            rc = s.ag.term()
            check(rc == 0, "term: the old agent exits 0 on SIGTERM (rc %s)" % rc)
        if how in ("crash", "term"):
            time.sleep(0.5)  # the clients call on while no agent runs
            if not s.ag.start():
                return
        else:
            handed, rc = s.ag.handover()
            check(handed, "upgrade: the new agent started beside the running one takes over (%r logged)"
                  % HANDED_OVER)
            check(rc == 0, "upgrade: the old agent then exits 0 on SIGTERM (rc %s)" % rc)
            if s.ag.proc.poll() is not None or s.ag.ctl("gpus", ok=False).returncode != 0:
                check(False, "upgrade: the new agent runs and answers (rc %s)" % s.ag.proc.poll())
                return
        for c in cs:
            check(c.ticks(3) and c.p.poll() is None, "%s: %s still runs after the new agent started"
                  % (what, c.name))
        if Q:
            q = s.ag.alloc(Q["id"]) or {}
            check((q.get("compute_class"), q.get("compute_cap"), q.get("compute_weight")) == ("best-effort", 40, 20),
                  "%s: the new agent keeps the allocation's compute policy (best-effort, cap 40, weight 20: %s)"
                  % (what, {k: v for k, v in q.items() if k.startswith("compute_")}))
            s.ag.ctl("release", Q["id"])
        units_same(s, what + ": after")
        reg = registered(s, cs, what + ": after")
        reconnected(s, cs, what + ": after")
        usage_counts_hold(s, cs, what + ": after", WAIT if reg else 5)
        grow_check(s, cs, what + ": after")
        for c in cs:
            c.ticks(2)
        for c in cs:
            c.stop()
            clean_summary(c, what)
        if how != "crash":
            stall = max((c.summary or {}).get("max_hooked_ms", 0) for c in cs)
            print("info %s: the longest alloc/free/VMM/meminfo call the clients saw: %.1f ms" % (what, stall))
        pool_back(s, what)
    finally:
        s.finish()


def agent_wait():
    """(c) GSHARE_AGENT_WAIT=1 and the agent down for 5 s."""
    what = "wait"
    s = Setup(what)
    try:
        if not s.ok:
            return
        c = start_clients(s, 1, env={"GSHARE_AGENT_WAIT": "1"})[0]
        c.ticks(2)
        registered(s, [c], what + ": before")
        killed_ms = time.time() * 1000
        s.ag.kill9()
        down = time.monotonic()
        d = c.wait_line(lambda x: x.get("allocs_failed", 0) > 0, c.mark(), LONG)
        check(d is not None, "wait: with the agent down past GSHARE_AGENT_WAIT=1, an allocation fails "
              "(after %.1f s)" % (time.monotonic() - down))
        # While no agent runs: the client frees its churn blocks and VMM
        # allocations (it keeps at least one live, and keeps them while
        # allocations fail).
        before = c.last()
        p = c.pause()
        check(p is not None and p["frees_ok"] > before.get("frees_ok", 0) and p["frees_failed"] == 0,
              "wait: while no agent runs its frees succeed (%s -> %s ok, %s failed)"
              % (before.get("frees_ok"), (p or {}).get("frees_ok"), (p or {}).get("frees_failed")))
        if p is not None:
            c.resume()
        time.sleep(max(0.0, 5 - (time.monotonic() - down)))
        check(c.p.poll() is None, "wait: the client is not killed while no agent runs")
        if not s.ag.start():
            return
        back = c.last()
        d = c.wait_line(lambda x: x.get("allocs_ok", 0) > back.get("allocs_ok", 0), c.mark(), WAIT)
        check(d is not None, "wait: once the agent is back the client's allocations succeed again")
        if d is not None:
            # From a tick after the first success on: no more failures.
            c.ticks(1)
            base = c.last()
            c.ticks(3)
            now = c.last()
            check(now.get("allocs_failed") == base.get("allocs_failed") and
                  now.get("allocs_ok", 0) > base.get("allocs_ok", 0),
                  "wait: ... and keep succeeding (allocs ok %s -> %s, failed %s -> %s)"
                  % (base.get("allocs_ok"), now.get("allocs_ok"), base.get("allocs_failed"),
                     now.get("allocs_failed")))
        registered(s, [c], what + ": after")
        check(re.search(r"process %d \(.*\) reclaimed its memory" % c.pid, s.ag.logtext()) is not None,
              "wait: the agent logs that process %d reclaimed its memory" % c.pid)
        sm = c.stop() or {}
        errs = sm.get("errors", {})
        # cuMemGetInfo asks the agent too: past the bound it may fail the
        # same way (nothing is specified for it there).
        only_oom = all(call in ("cuMemAlloc", "cuMemAllocAsync", "cuMemCreate", "cuMemGetInfo") and
                       set(v) == {"CUDA_ERROR_OUT_OF_MEMORY"} for call, v in errs.items())
        check(sm and c.rc == 1 and only_oom and sm["allocs_failed"] > 0,
              "wait: the failed calls were allocations (and memory queries), each CUDA_ERROR_OUT_OF_MEMORY; "
              "the client ran to its end (rc %s): %s" % (c.rc, brief(sm)))
        # The bound runs from when the hook noticed the loss (never before
        # the kill); a slow client may call first after it ran out, and that
        # call fails at once: so the first failure is >= 0.9 s after the kill.
        first = sm.get("first_alloc_fail_unix_ms", 0) - killed_ms
        check(900 <= first < 15000,
              "wait: allocations waited for the agent: the first failed %.0f ms after the kill "
              "(bound 1000 ms), none before" % first)
        check(sm and sm["frees_failed"] == 0,
              "wait: no free failed while no agent ran (%s ok, %s failed)" % (sm.get("frees_ok"), sm.get("frees_failed")))
        # A time, not a test (a busy machine stretches it): frees do not
        # wait for the agent, bench/restart_bench.py measures calls.
        print("info wait: the longest free took %s ms" % (sm or {}).get("free_max_ms"))
        check(sm and sm["verify_failures"] == 0 and sm["faults"] == 0,
              "wait: every byte read back right (%s wrong, %s faults)"
              % (sm.get("verify_failures"), sm.get("faults")))
        pool_back(s, what)
    finally:
        s.finish()


def handover_faults():
    """(e) Faults during a handover: the new agent killed at a random moment
    of it (the old one serves on, its sockets its own again), then a proper
    upgrade; then the old agent killed at a random moment of one (a new
    start recovers as after a crash).  The clients see no failed call."""
    what = "handover faults"
    s = Setup(what)
    try:
        if not s.ok:
            return
        cs = start_clients(s)
        for c in cs:
            c.ticks(1)
        ag = s.ag
        # A port held here: a new agent told to serve its metrics there
        # fails after TAKE, before READY, every time (the abort path).
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        cfg = os.path.join(s.tmp, "metrics-taken.yaml")
        with open(cfg, "w") as f:
            f.write('metricsAddress: "127.0.0.1:%d"\n' % held.getsockname()[1])
        for i in range(4):
            n0 = ag.logtext().count("a new agent takes over")
            h0 = ag.logtext().count("handed over to the new agent")
            if i == 0:
                new = subprocess.Popen(ag.args() + ["--config", cfg], env=ag.env, stdout=ag.log, stderr=ag.log)
                check(wait_for(lambda: new.poll() is not None, LONG) and new.returncode != 0,
                      "%s: a new agent that cannot serve its metrics fails after taking over (rc %s)"
                      % (what, new.returncode))
                check(ag.logtext().count("the new agent failed to take over") > 0,
                      "%s: the old agent saw it fail after TAKE" % what)
            else:
                new = subprocess.Popen(ag.args(), env=ag.env, stdout=ag.log, stderr=ag.log)
                wait_for(lambda: ag.logtext().count("a new agent takes over") > n0 or new.poll() is not None, LONG)
                time.sleep(random.uniform(0, 0.05))
            new.kill()
            new.wait()
            if ag.logtext().count("handed over to the new agent") > h0:
                # It had served already: a crash of the serving agent.  The
                # rollout stops the old one; the kubelet starts the new again.
                print("info %s: the new agent had taken over before it was killed (%d)" % (what, i))
                ag.proc.terminate()
                check(wait_for(lambda: ag.proc.poll() is not None, LONG),
                      "%s: the old agent, handed over, stops on SIGTERM (%d)" % (what, i))
                if not ag.start():
                    return
            else:
                check(ag.proc.poll() is None, "%s: the old agent runs on after the new one died mid-handover (%d)"
                      % (what, i))
                check(wait_for(lambda: ag.ctl("gpus", ok=False).returncode == 0, LONG),
                      "%s: and answers on its control socket (%d)" % (what, i))
            for c in cs:
                check(c.ticks(1) and c.p.poll() is None, "%s: %s still runs (%d)" % (what, c.name, i))
        held.close()
        # A process that registers now reaches the old agent's socket again
        # (the new one had bound its own at that path).
        r = e.run([e.CUDA, "meminfo"], e.hook_env(ag, s.A), timeout=LONG)
        check(r.returncode == 0, "%s: a new process registers with the old agent: %s" % (what, r.stdout.strip()[:200]))
        handed, rc = ag.handover()
        check(handed and rc == 0, "%s: then a new agent takes over (rc %s)" % (what, rc))
        for c in cs:
            check(c.ticks(1) and c.p.poll() is None, "%s: %s still runs after the upgrade" % (what, c.name))
        # The old agent killed in the middle of a handover.
        n0 = ag.logtext().count("a new agent takes over")
        old = ag.proc
        ag.proc = subprocess.Popen(ag.args(), env=ag.env, stdout=ag.log, stderr=ag.log)
        wait_for(lambda: ag.logtext().count("a new agent takes over") > n0 or ag.proc.poll() is not None, LONG)
        time.sleep(random.uniform(0, 0.05))
        old.kill()
        old.wait()
        if not wait_for(lambda: ag.proc.poll() is not None or ag.ctl("gpus", ok=False).returncode == 0, LONG):
            check(False, "%s: the new agent either serves or stops after the old one died" % what)
            return
        if ag.proc.poll() is not None:
            ag.start()  # it stopped before READY: a restart (the kubelet's)
        for c in cs:
            check(c.ticks(2) and c.p.poll() is None, "%s: %s still runs after the old agent died mid-handover"
                  % (what, c.name))
        units_same(s, what + ": after")
        reconnected(s, cs, what + ": after")
        for c in cs:
            c.stop()
            sm = c.summary
            # Killed mid-handover the old agent may have dropped free chunks'
            # memory for the new one's context (PREPARE): allocations may
            # fail for want of room until it is made again.  Never data,
            # never a process, never a byte.
            check(sm is not None and sm["verify_failures"] == 0 and sm["faults"] == 0 and c.p.poll() is not None,
                  "%s: %s (pid %d) ran to its end with every byte read back right: %s"
                  % (what, c.name, c.pid, brief(sm)))
            print("info %s: %s: %d failed calls" % (what, c.name, (sm or {}).get("failed_calls", -1)))
        pool_back(s, what)
    finally:
        s.finish()


def storm():
    """(d) kill -9 five times in a row while the clients churn flat out."""
    what = "storm"
    s = Setup(what)
    try:
        if not s.ok:
            return
        cs = start_clients(s, 3, ["--sleep-us", "0"])
        for c in cs:
            c.ticks(1)
        units = []
        for i in range(5):
            time.sleep(random.uniform(0.3, 1.5))
            s.ag.kill9()
            time.sleep(random.uniform(0, 0.3))
            if not s.ag.start():
                return
            units.append(s.ag.gpu()["units_total"])
        check(all(u == s.gpu0["units_total"] for u in units),
              "storm: units advertised after each of 5 kill -9: %s (were %d)" % (units, s.gpu0["units_total"]))
        for c in cs:
            check(c.ticks(2) and c.p.poll() is None, "storm: %s still runs" % c.name)
        units_same(s, what + ": after")
        reg = registered(s, cs, what + ": after")
        reconnected(s, cs, what + ": after")
        usage_counts_hold(s, cs, what + ": after", WAIT if reg else 5)
        for c in cs:
            c.stop()
            clean_summary(c, what)
        pool_back(s, what)
    finally:
        s.finish()


def main():
    parts = {"crash": lambda: restart("crash"), "term": lambda: restart("term"),
             "upgrade": lambda: restart("upgrade"), "wait": agent_wait, "storm": storm,
             "handover_faults": handover_faults}
    chosen = e.chosen_cases(list(parts))
    missing = [f for f in (e.AGENT, e.CTL, e.FAKE, e.HOOK, e.CUDA, RESTART) if not os.path.exists(f)]
    for f in missing:
        check(False, "built: %s (run make)" % f)
    if missing:
        sys.exit(1)
    seed = int(os.environ.get("GSHARE_TEST_SEED", str(int(time.time()))))
    print("info GSHARE_TEST_SEED=%d" % seed)
    random.seed(seed)
    for name in chosen:
        try:
            parts[name]()
        except SystemExit as x:  # the harness gave up (gsharectl failed, ...)
            check(False, "%s: %s" % (name, x))
    if e.failures:
        print("%d checks failed" % len(e.failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
