#!/usr/bin/python3
"""test_agentaway.py — processes that the agent's absence must not break
(issue 28, items 5 and 7), on the fake driver: the agent of test_restart.py
(4 GiB fake GPU, 32 MiB chunks), one allocation of 2 GiB.

  late     the agent is killed (kill -9: its socket is left, connections
           are refused), then stopped (SIGTERM: no socket at all); each
           time a new hooked process (e2e_cuda grow 64) starts while no
           agent runs: its hook says once that it waits, and once the
           agent is back its first allocation (64 MiB, made at start) and
           a later one succeed, and the agent lists it as registered.
  gone     an allocation deleted (its socket directory removed): a process
           started with its socket fails closed at once with one line
           saying the directory is gone, even with GSHARE_AGENT_WAIT=600.
  idle     process A allocates 8 blocks of 40 MiB; the agent is killed;
           A frees them while no agent runs, then sits idle (blocked on its
           stdin, no CUDA call); a new agent starts: A's hook connects
           again on its own (the agent logs that A reclaimed its memory),
           and a process B of the allocation that fills it obtains the
           whole quota: A gave back the chunks without a CUDA call.

Deadlines only catch hangs.  Environment: B, SANITIZE (as test_e2e.py)."""
import os
import re
import select
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402
from test_restart import LONG, WAIT, Setup, wait_for  # noqa: E402


class Proc:
    """An e2e_cuda process under the hook, talking on its stdin/stdout;
    its stderr goes to a file."""

    def __init__(self, s, name, args, env=None):
        self.errpath = os.path.join(s.tmp, name + ".stderr")
        self.err = open(self.errpath, "w")
        henv = e.hook_env(s.ag, s.A)
        henv.update(env or {})
        self.p = subprocess.Popen([e.CUDA] + list(args), env=henv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        self.pid = self.p.pid

    def line(self, limit=LONG):
        """Its next line of output, split, or [] if none within limit."""
        r, _, _ = select.select([self.p.stdout], [], [], limit)
        return self.p.stdout.readline().split() if r else []

    def say(self, cmd, limit=LONG):
        try:
            self.p.stdin.write(cmd + "\n")
            self.p.stdin.flush()
        except OSError:  # it exited
            return []
        return self.line(limit)

    def stderr(self):
        with open(self.errpath) as f:
            return f.read()

    def end(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.err.close()


def late(s):
    for how in ("kill -9", "SIGTERM"):
        if how == "kill -9":
            s.ag.kill9()
        else:
            check(s.ag.term() == 0, "late: the agent exits 0 on SIGTERM")
        check(os.path.exists(os.path.join(s.A["socket_dir"], "agent.sock")) == (how == "kill -9"),
              "late (%s): the socket is %s" % (how, "left behind" if how == "kill -9" else "gone"))
        p = Proc(s, "late-%s" % how.split()[-1], ["grow", "64"], {"GSHARE_AGENT_WAIT": "120"})
        try:
            waits = wait_for(lambda: "waiting up to 120000 ms" in p.stderr() or p.p.poll() is not None, LONG)
            check(bool(waits) and p.p.poll() is None,
                  "late (%s): a process started while no agent runs waits for one: %s"
                  % (how, p.stderr().strip()[-300:]))
            if not s.ag.start():
                return
            held = p.line()
            check(held[:1] == ["held"], "late (%s): once the agent is back its first allocation (64 MiB) "
                  "succeeds: %s %s" % (how, held, p.stderr().strip()[-300:]))
            check(p.say("alloc 40") == ["alloc", "ok"], "late (%s): and a later one" % how)
            check(p.pid in s.pids(), "late (%s): the agent lists it (pid %d)" % (how, p.pid))
            check(re.search(r"process %d \(.*\) registered on allocation" % p.pid, s.ag.logtext()) is not None,
                  "late (%s): the agent logs that it registered" % how)
            lines = [x for x in p.stderr().splitlines() if x.startswith("gshare:")]
            check(len(lines) == 1, "late (%s): one gshare: line, the wait: %s" % (how, lines))
        finally:
            p.end()


def gone(s):
    uuid = s.gpu0["uuid"]
    G = s.ag.create(["%s-u%d" % (uuid, 40)])["allocation"]
    s.ag.ctl("release", G["id"])
    check(bool(wait_for(lambda: not os.path.exists(G["socket_dir"]))),
          "gone: a deleted allocation's socket directory is removed")
    env = e.hook_env(s.ag, s.A)
    env.update(GSHARE_SOCKET=e.sockpath(G), GSHARE_AGENT_WAIT="600")
    r = e.run([e.CUDA, "bypass", "1"], env, timeout=LONG)
    lines = [x for x in r.stderr.splitlines() if x.startswith("gshare:")]
    check(r.returncode == 0 and "CUDA_ERROR_OUT_OF_MEMORY" in r.stdout,
          "gone: a process of a deleted allocation fails closed (%s), without waiting GSHARE_AGENT_WAIT=600"
          % r.stdout.strip())
    check(len(lines) == 1 and "its directory is gone" in lines[0],
          "gone: one gshare: line says the socket's directory is gone: %s" % lines)


def idle(s):
    a = Proc(s, "idle-a", ["grow", "0"])
    try:
        check(a.line()[:1] == ["held"], "idle: process A runs")
        got = [a.say("alloc 40") for _ in range(8)]
        check(all(x == ["alloc", "ok"] for x in got), "idle: A allocates 8 blocks of 40 MiB")
        part = s.part()
        print("info idle: A holds %d chunks" % (part["chunks_quota"] - part["chunks_free"]))
        s.ag.kill9()
        check(a.say("free") == ["free", "ok"], "idle: A frees them while no agent runs")
        if not s.ag.start():
            return
        # A makes no call from here on: its hook reconnects on its own.
        pat = r"process %d \(.*\) reclaimed its memory" % a.pid
        back = wait_for(lambda: re.search(pat, s.ag.logtext()) is not None, WAIT)
        check(bool(back), "idle: A, making no call, connects to the new agent and reclaims its memory")
        r = e.run([e.CUDA, "fill", "8"], e.hook_env(s.ag, s.A), timeout=LONG)
        m = re.search(r"obtained (\d+) MiB", r.stdout)
        n = int(m.group(1)) if m else -1
        check(r.returncode == 0 and n * MiB == s.quota,
              "idle: process B fills the whole quota, A's chunks given back without a CUDA call: %d of %d MiB (%s)"
              % (n, s.quota // MiB, r.stdout.strip()))
        check(a.p.poll() is None and a.say("alloc 40") == ["alloc", "ok"], "idle: A runs on and allocates again")
    finally:
        a.end()


def main():
    e.need(e.AGENT, e.CTL, e.FAKE, e.HOOK, e.CUDA)
    for name, fn in (("late", late), ("gone", gone), ("idle", idle)):
        s = Setup(name)
        try:
            if s.ok:
                fn(s)
        except Exception as x:  # noqa: BLE001 -- a failed part, not a crash of the test
            check(False, "%s: %r" % (name, x))
        finally:
            s.finish()
    if e.failures:
        print("%d checks failed" % len(e.failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
