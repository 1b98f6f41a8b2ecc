#!/usr/bin/python3
"""End to end: CUDA IPC handles exported before an agent restart or upgrade
still open in a sibling process of the same allocation (issue 28), on the
fake driver, with test_restart.py's agent and allocation.

A process exports a 40 MiB block (over a 32 MiB chunk), another exports a
block and frees it, a third frees its exported block while the agent is
dead (kill -9).  After the kill -9 and a new start, and then after an
upgrade (a new agent beside the running one takes over): once the
exporters reconnected and reclaimed (the hook's thread does it), the agent logs
that the exporter's handles resolve again; a sibling process opens the
handle, reads the exporter's data, writes it, and the exporter sees the
writes; the handle is refused in another allocation; the handles of the
freed blocks stay refused.  Last, the exporter frees its block: its handle
is refused.

Deadlines only catch hangs.  Environment: B (build dir), SANITIZE (as
test_e2e.py).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import check  # noqa: E402
from test_restart import UNITS, WAIT, Setup  # noqa: E402


class Exporter:
    """e2e_cuda ipc-export MIB under the hook of allocation env: its
    handle, and its commands on stdin (test/e2e/e2e_cuda.c)."""

    def __init__(self, mib, env):
        self.p = subprocess.Popen([e.CUDA, "ipc-export", str(mib)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().split()
        self.handle = line[1] if len(line) == 2 and line[0] == "handle" else None

    def say(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def exit(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("exit\n")
                self.p.stdin.flush()
                return self.p.wait(timeout=WAIT)
            except (OSError, subprocess.TimeoutExpired):
                self.p.kill()
        return self.p.wait()


def ipc_restart():
    """CUDA IPC handles exported before a kill -9, then an upgrade."""
    what = "ipc"
    s = Setup(what)
    exps = []
    try:
        if not s.ok:
            return
        uuid = s.gpu0["uuid"]
        B = s.ag.create(["%s-u%d" % (uuid, u) for u in range(UNITS, UNITS + 4)])["allocation"]
        ea, eb = e.hook_env(s.ag, s.A), e.hook_env(s.ag, B)
        mib = 40  # over a 32 MiB chunk
        exp, gone, late = Exporter(mib, ea), Exporter(4, ea), Exporter(4, ea)
        exps += [exp, gone, late]
        check(all(x.handle for x in exps), "ipc: the exporters get handles (%s)" % [x.handle for x in exps])
        if not all(x.handle for x in exps):
            return
        check(gone.say("free") == "freed", "ipc: the second exporter frees its block before the restart")
        for how in ("crash", "upgrade"):
            w = "ipc after %s" % ("a kill -9" if how == "crash" else "an upgrade")
            n0 = s.ag.logtext().count("IPC handles it exported resolve again")
            if how == "crash":
                s.ag.kill9()
                # A free never waits for an agent: its handle dies all the same.
                check(late.say("free") == "freed", "%s: a third exporter frees its block while no agent runs" % w)
                if not s.ag.start():
                    return
            else:
                handed, rc = s.ag.handover()
                check(handed and rc == 0, "%s: the new agent took over, the old one exited 0 (%s, rc %s)"
                      % (w, handed, rc))
            # The hook's thread reconnects them, or their next memory call
            # (docs/agent.md, "Restarts").
            check(exp.say("alloc") == "alloc ok", "%s: the exporter allocates under the new agent" % w)
            check(gone.say("alloc") == "alloc ok", "%s: the other exporter allocates under the new agent" % w)
            check(e.wait_for(lambda: s.ag.logtext().count("IPC handles it exported resolve again") > n0, e.HANG)
                  is not None, "%s: the agent logs that the exporter's handles resolve again" % w)
            r = e.run([e.CUDA, "ipc-import", exp.handle, str(mib)], ea)
            check(r.returncode == 0, "%s: a sibling opens the handle exported before, reads the exporter's data, "
                  "writes, closes: %s" % (w, r.stdout.strip() + r.stderr[-500:]))
            check(exp.say("check") == "seen-ok", "%s: the exporter sees the sibling's writes" % w)
            check(exp.say("reset") == "reset", "%s: the exporter writes its pattern again" % w)
            r = e.run([e.CUDA, "ipc-open", exp.handle], eb)
            check(r.returncode == 0, "%s: the handle is refused in another allocation: %s"
                  % (w, r.stdout.strip() + r.stderr[-300:]))
            check(late.say("alloc") == "alloc ok", "%s: the third exporter allocates under the new agent" % w)
            for x, when in ((gone, "before the restart"), (late, "while no agent ran")):
                r = e.run([e.CUDA, "ipc-open", x.handle], ea)
                check(r.returncode == 0, "%s: the handle of the block freed %s is refused: %s"
                      % (w, when, r.stdout.strip() + r.stderr[-300:]))
        check(exp.say("free") == "freed", "ipc: the exporter frees its block")
        r = e.run([e.CUDA, "ipc-open", exp.handle], ea)
        check(r.returncode == 0, "ipc: then its handle is refused: " + r.stdout.strip() + r.stderr[-300:])
        for x in exps:
            check(x.exit() == 0, "ipc: exporter exits 0")
    finally:
        for x in exps:
            if x.p.poll() is None:
                x.p.kill()
                x.p.wait()
        s.finish()


def main():
    missing = [f for f in (e.AGENT, e.CTL, e.FAKE, e.HOOK, e.CUDA) if not os.path.exists(f)]
    for f in missing:
        check(False, "built: %s (run make)" % f)
    if missing:
        sys.exit(1)
    ipc_restart()
    if e.failures:
        print("%d checks failed" % len(e.failures))
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
