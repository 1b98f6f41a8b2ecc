#!/usr/bin/python3
"""test_spill_restart.py — spilled data and debts across agent restarts
(docs/burst.md "Agent restarts"; issue 28 item 2), on the fake driver, with
test_spill.py's pool (28 chunks of 32 MiB, units of 64 MiB; burstMax 768Mi,
spillMax 512Mi) and moveBackQuiet 300ms.

  owed      B borrows the free chunks and A's 8 idle ones; the agent is
            killed (kill -9) and started again: A is still owed its 8
            chunks, B's checksums hold
  spilled   A's process takes 224 MiB (B's data spilled); kill -9 and a
            restart: the spilled chunks are charged as spilled (host
            memory), not as device memory (B's host bytes match them),
            nothing owed, checksums hold; A's process, reconnected, frees
            and exits: B's data comes back to the GPU
  mid-move  B's fake kernel is held, A asks again: the agent is killed
            while the batch waits in B's mover, the kernel is released (the
            mover finishes the move it was sent); after the restart B says
            which slots are in host memory and they are charged so; a new
            A process gets its 224 MiB; the data comes back once A is gone
  mid-back  A frees with B's kernel held: the agent is killed while a
            move back waits in B's mover, the kernel is released (the mover
            puts the batch on the GPU); after the restart B is neither over
            its quota (the fake NVML counts the dead agent's memory B maps
            as B's) nor killed, its data is on the GPU with no spare left,
            checksums hold, and a new A process gets its 224 MiB again
  upgrade   an upgrade (a new agent beside the old one, handover) while B's
            data is spilled: the same figures on the new agent
  balance   every process gone: nothing held, owed or spilled; a new
            borrower fills 832 MiB again (no unit lost, no spare leaked)

Environment: B (build dir), SANITIZE (see test_e2e.py)."""
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
import test_spill as ts  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

LONG = 60
HANDED_OVER = "upgrade: handed over to the new agent"


class Agent(e.Agent):
    """test_e2e's agent, restartable (kill -9, start again) and upgradable."""

    def args(self):
        return [e.AGENT, "--cuda-library", e.FAKE, "--socket", self.sock,
                "--socket-root", os.path.join(self.tmp, "alloc"),
                "--state-dir", os.path.join(self.tmp, "state"),
                "--chunk-size", "32Mi", "--unit-size", "64Mi", "--reserve", "128Mi",
                "--reconcile-interval", "0"] + self.extra

    def start(self):
        self.proc = subprocess.Popen(self.args(), env=self.env, stdout=self.log, stderr=self.log)
        ok = e.wait_for(lambda: self.proc.poll() is not None or
                        self._ctl(["gpus"], ok=False).returncode == 0, LONG, step=0.05)
        check(ok is not None and self.proc.poll() is None, "the agent answers on its control socket")

    def kill9(self):
        self.proc.kill()
        self.proc.wait()

    def handover(self):
        old, n0 = self.proc, self.logtext().count(HANDED_OVER)
        self.proc = subprocess.Popen(self.args(), env=self.env, stdout=self.log, stderr=self.log)
        e.wait_for(lambda: self.logtext().count(HANDED_OVER) > n0 or self.proc.poll() is not None, LONG)
        handed = self.logtext().count(HANDED_OVER) > n0
        old.send_signal(signal.SIGTERM)
        old.wait(timeout=LONG)
        return handed


def gpu(ag):
    return ag.gpus()[0]


def host_of(b):
    r = b.say("check")
    check(r[:2] == ["check", "ok"], "B's checksums hold (%s)" % r)
    return int(r[3]) if len(r) == 6 else -1


def spilled_matches(ag, b, what):
    """The agent charges B's host memory as spilled chunks, exactly."""
    def same():
        r = b.say("check")
        return r[:2] == ["check", "ok"] and int(r[3]) == gpu(ag)["chunks_spilled"] * 32 * MiB and int(r[3]) > 0
    check(e.wait_for(same, LONG, step=0.2) is not None,
          "%s: B's host memory (%d bytes) charged as %d spilled chunks" % (what, host_of(b), gpu(ag)["chunks_spilled"]))


def spilled_or_back(ag, b, what):
    """After a restart in the middle of a move to host memory: the slots B
    says are in host memory are charged as spilled chunks.  The owner's
    request died with the agent, so the debt they paid may be lent again
    and the data may already be back: then the new agent moved them back
    (which it does only for chunks it charged as spilled)."""
    def settled():
        r = b.say("check")
        if r[:2] != ["check", "ok"]:
            return False
        st = gpu(ag)
        if int(r[3]) > 0:
            return int(r[3]) == st["chunks_spilled"] * 32 * MiB
        return st["chunks_spilled"] == 0 and st["chunks_moved_back"] >= 8
    check(e.wait_for(settled, LONG, step=0.2) is not None,
          "%s: B's host memory (%d bytes) charged as %d spilled chunks, or moved back by the new agent (%d)" %
          (what, host_of(b), gpu(ag)["chunks_spilled"], gpu(ag)["chunks_moved_back"]))


def back_on_gpu(ag, b, what):
    def back():
        r = b.say("check")
        return r[:2] == ["check", "ok"] and r[3] == "0" and gpu(ag)["chunks_spilled"] == 0
    check(e.wait_for(back, LONG, step=0.2) is not None, what + ": B's data back on the GPU, checksums intact")


def config():
    return ("nvmlLibrary: %s\nmoveBackQuiet: 300ms\nusageInterval: 200ms\noverQuota: kill\n"
            "metricsAddress: 127.0.0.1:%d\n" % (ts.NVML, free_port()))


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(ag, name):
    """The sum of a metric's samples on the agent's /metrics."""
    import urllib.request
    port = open(ag.metrics_conf).read().split("127.0.0.1:")[1].split()[0]
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith(name + " ") or line.startswith(name + "{"))


def scans(ag):
    """The usage scans the agent has done."""
    return int(metric(ag, "gshare_usage_scans_total"))


def not_over(ag, what):
    """After two usage scans, no allocation is over its quota."""
    c0 = scans(ag)
    check(e.wait_for(lambda: scans(ag) >= c0 + 2, LONG, step=0.1) is not None, what + ": two usage scans")
    over = metric(ag, "gshare_allocation_over_quota_bytes")
    check(over == 0, "%s: no allocation over its quota (%d bytes over)" % (what, over))


def restart(ag, how):
    if how == "upgrade":
        with open(ag.metrics_conf, "w") as f:  # the new agent listens beside the old one
            f.write(config())
        check(ag.handover(), "upgrade: the new agent took over")
    else:
        ag.kill9()
        ag.start()


def main():
    e.need(e.AGENT, e.CTL, e.FAKE, e.HOOK, ts.SPILL)
    tmp = tempfile.mkdtemp(prefix="gshare-spillrestart-")
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write(config())
    ag = Agent(tmp, ["--config", conf, "--burst-max", "768Mi", "--spill-max", "512Mi"])
    ag.metrics_conf = conf
    ag.env["GSHARE_FAKECUDA_CTX_BYTES"] = str(32 * MiB)
    ag.start()
    try:
        A, B = ts.owner_and_borrower(ag)
        b = ts.Prog(ag, B, "borrow", 896, 32)
        got = b.line()
        check(got == ["ready", "832"], "owed: B fills 832 MiB (%s)" % got)
        check(gpu(ag)["chunks_owed"] == 8, "owed: A is owed its 8 chunks")

        # ---- owed: a restart keeps the debt
        restart(ag, "kill")
        # B's context (one chunk, charged outside the pool) is charged again
        # from the ledger: A is owed all 8, B is not over its quota.
        check(e.wait_for(lambda: gpu(ag)["chunks_owed"] == 8, LONG, step=0.1) is not None,
              "owed: after kill -9 and a restart A is still owed its chunks B holds (%d)" % gpu(ag)["chunks_owed"])
        check(host_of(b) == 0, "owed: B's data on the GPU")
        not_over(ag, "owed, after the restart")

        # ---- spilled: kill -9 while B's data is in host memory
        a = ts.Prog(ag, A, "own", 224, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "spilled: A's process gets 224 MiB after the restart (%s)" % got)
        spilled_matches(ag, b, "spilled, before the restart")
        not_over(ag, "spilled, the owner served after a restart")
        n = gpu(ag)["chunks_spilled"]
        restart(ag, "kill")
        spilled_matches(ag, b, "spilled, after kill -9 and a restart")
        g = gpu(ag)
        check(g["chunks_spilled"] == n and g["chunks_owed"] == 0,
              "spilled: %d chunks still spilled (%d before), %d owed" % (g["chunks_spilled"], n, g["chunks_owed"]))
        check(a.say("free") == ["freed"] and a.quit() == 0, "spilled: A's process frees and exits")
        back_on_gpu(ag, b, "spilled")

        # ---- mid-move: kill -9 while a batch waits in B's mover
        # chunks_moving counts moves both ways: the last move back must be
        # over, so that the move seen next is the one this step starts.
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0, LONG, step=0.05) is not None, "mid-move: no move in flight")
        check(b.say("hold") == ["held"], "mid-move: B's kernel held")
        a = ts.Prog(ag, A, "own", 224, 32)
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] > 0, LONG, step=0.05) is not None,
              "mid-move: a move of B's is in flight")
        ag.kill9()
        check(b.say("release") == ["released"], "mid-move: B's kernel released (its mover moves the batch)")
        ag.start()
        spilled_or_back(ag, b, "mid-move, after the restart")
        not_over(ag, "mid-move, after the restart")
        a.quit()  # its request met the agent's death: whatever it got goes
        a = ts.Prog(ag, A, "own", 224, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "mid-move: the owner gets its 224 MiB (%s)" % got)
        spilled_matches(ag, b, "mid-move, the owner served")
        check(gpu(ag)["chunks_owed"] == 0, "mid-move: nothing owed")

        # ---- upgrade while spilled
        n = gpu(ag)["chunks_spilled"]
        restart(ag, "upgrade")
        spilled_matches(ag, b, "upgrade")
        check(gpu(ag)["chunks_spilled"] == n, "upgrade: %d chunks spilled (%d before)" % (gpu(ag)["chunks_spilled"], n))
        check(a.say("free") == ["freed"] and a.quit() == 0, "upgrade: A's process frees and exits")
        back_on_gpu(ag, b, "upgrade")

        # ---- mid-back: kill -9 while a move back waits in B's mover
        a = ts.Prog(ag, A, "own", 224, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "mid-back: A's process gets 224 MiB (%s)" % got)
        spilled_matches(ag, b, "mid-back, spilled")
        # chunks_moving counts moves both ways: the last move back must be
        # over, so that the move seen next is the one this step starts.
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0, LONG, step=0.05) is not None, "mid-back: no move in flight")
        check(b.say("hold") == ["held"], "mid-back: B's kernel held")
        check(a.say("free") == ["freed"] and a.quit() == 0, "mid-back: A's process frees and exits")
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] > 0, LONG, step=0.05) is not None,
              "mid-back: a move back of B's is in flight")
        ag.kill9()
        check(b.say("release") == ["released"], "mid-back: B's kernel released (its mover moves the batch)")
        ag.start()
        back_on_gpu(ag, b, "mid-back, after the restart")
        not_over(ag, "mid-back, after the restart")
        check(b.p.poll() is None and host_of(b) == 0, "mid-back: B alive, its data on the GPU, checksums hold")
        a = ts.Prog(ag, A, "own", 224, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "mid-back: the owner gets its 224 MiB again (%s)" % got)
        spilled_matches(ag, b, "mid-back, the owner served")
        check(gpu(ag)["chunks_owed"] == 0, "mid-back: nothing owed")
        check(a.say("free") == ["freed"] and a.quit() == 0, "mid-back: A's process frees and exits")
        back_on_gpu(ag, b, "mid-back, A gone")

        # ---- balance
        b.quit()
        check(e.wait_idle(ag, B["id"]) is not None, "balance: B gone")
        g = gpu(ag)
        check(g["chunks_owed"] == 0 and g["chunks_spilled"] == 0 and g["chunks_moving"] == 0,
              "balance: nothing owed, spilled or moving (%d, %d, %d)" % (g["chunks_owed"], g["chunks_spilled"],
                                                                       g["chunks_moving"]))
        b2 = ts.Prog(ag, B, "borrow", 896, 32)
        got = b2.line()
        check(got == ["ready", "832"], "balance: a new borrower fills 832 MiB again (%s)" % got)
        b2.quit()
        check(ag.alive(), "the agent runs on")
    finally:
        ag.stop()
    e.report(ag, tmp)


if __name__ == "__main__":
    main()
