#!/usr/bin/python3
"""test_spill.py — lent memory taken back from live data (docs/burst.md
"Giving it back"; issue 22, items 2 and 3), on the fake driver, which
models host-located VMM memory (one GPU: 28 chunks of 32 MiB, units of
64 MiB; burstMax 768Mi, spillMax 512Mi).

  lend      A (4 units, 8 chunks) is idle; B (2 units, burst 864 MiB: the
            pool, contexts charged a chunk each as on a GPU) fills 832 MiB
            with checksummed blocks: the 15 free chunks and A's 8 idle ones
            (A is owed them); host memory for them is made ahead and
            prepared in B's mover (imported, mapped at its scratch)
  reclaim   A's process makes its context and allocates 224 MiB: it gets
            them (waiting while
            B's mover copies 8 chunks to host memory and remaps them at the
            same addresses) into the host memory prepared ahead; B's
            checksums hold, B maps 256 MiB of host memory under its data,
            gsharectl shows 8 chunks spilled and nothing owed; the
            take-back logged with its time by phase and counted
  back      A frees and exits: B's data comes back to the GPU (host memory
            0, nothing spilled), checksums intact
  during    B's fake kernel is queued and held when A asks again: B's
            mover waits in its synchronization (a move in flight); A waits
            too (GS_OTHERS_MOVING); released, the kernel's writes are in the
            moved data and A gets its memory
  killed    the same, but B is killed while its move waits: the batch is
            undone, A gets its memory from B's exit, no spare is left held,
            and the books balance (a fresh borrower fills again)
  events    the agent says when an allocation's data was spilled and when
            it is all back (the usage scan's log lines, which are also its
            GPUMemorySpilled / GPUMemoryUnspilled Events)
  last      a second agent with spillMax 64Mi (2 chunks of host memory):
            A's request gets 2 chunks moved and no more; without
            reclaimKillAfter it fails with out of memory after its
            patience (a catchable error), B untouched; spillMax reached
            while preparing too: 2 chunks prepared in B, the 2 moved; with
            reclaimKillAfter 1s B is killed and A gets its memory
  prep_unneeded
            host memory prepared ahead in B (as much as is owed), then
            B frees all it borrowed: it lets that memory go
            (charged to it until it exits), and once it exits nothing is
            held, prepared or made
  chain     chunks of 4 MiB: A's 224 MiB take two batches back or more;
            each batch moved whole is settled while B moves the next one
            (GS_MOVE_CHAIN: the agent's log says so)
  hostile_keep
            spillMax 64Mi again; the borrower is a raw-wire process
            (e2e_keptfd spill) whose mover keeps every host memory fd it
            is sent (maps it, writes it) and says it moved nothing: what it
            keeps stays charged, so host memory made for it never passes
            spillMax (2 chunks) however often A asks; the agent says
            spillMax reached; once it exits, the spares are free again and
            an honest borrower's 2 chunks are spilled for A
  off       without spillMax nothing of this happens: A's idle chunks are
            never lent (covered by test_burst.py's "lent" part)

Environment: B (build dir), SANITIZE (see test_e2e.py)."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_e2e as e  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

SPILL = os.path.join(e.BD, "test/e2e/e2e_spill")
NVML = os.path.join(e.BD, "test/fakenvml/libnvidia-ml.so.1")


class Prog:
    """An e2e_spill process driven line by line."""

    def __init__(self, ag, alloc, *args):
        self.p = subprocess.Popen([SPILL] + [str(a) for a in args], env=e.hook_env(ag, alloc),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def line(self):
        return self.p.stdout.readline().split()

    def say(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.line()

    def quit(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass
        try:
            self.p.wait(timeout=e.HANG)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        return self.p.returncode


def gpu(ag):
    return ag.gpus()[0]


def owner_and_borrower(ag):
    """A: 4 units, no burst; B: 2 units with a burst of 864 MiB (the whole pool
    with the fake's contexts charged)."""
    uuid = gpu(ag)["uuid"]
    ids = ["%s-u%d" % (uuid, u) for u in range(14)]
    return (ag.create(ids[0:4])["allocation"],
            ag.create_args(["--burst", "864Mi", ids[4], ids[5]])["allocation"])


def main():
    cases = {"moves": moves, "last_nokill": lambda tmp: last(tmp, False), "last_kill": lambda tmp: last(tmp, True),
             "hostile_keep": hostile_keep, "prep_unneeded": prep_unneeded, "chain": chain}
    chosen = e.chosen_cases(list(cases))
    e.need(e.AGENT, e.CTL, e.FAKE, e.HOOK, SPILL, NVML, e.KEPTFD)
    tmp = tempfile.mkdtemp(prefix="gshare-spill-")
    ag = None
    for name in chosen:
        ag = cases[name](tmp) or ag
    e.report(ag, tmp)


def metric(ag, name, label=""):
    """The sum of a metric's samples on the agent's /metrics (with label,
    e.g. 'phase="copy"', those that have it)."""
    port = open(ag.metrics_conf).read().split("127.0.0.1:")[1].split()[0]
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if (line.startswith(name + " ") or line.startswith(name + "{")) and label in line)


def prepared(ag, b, n, what):
    """n chunks of host memory prepared ahead in B's mover (the agent's
    gauge, and B maps that much host memory beside its data)."""
    def done():
        r = b.say("host")
        return (metric(ag, "gshare_gpu_chunks_spill_prepared") == n and len(r) == 4 and
                int(r[3]) - int(r[1]) == n * 32 * MiB)
    check(e.wait_for(done, 30, step=0.1) is not None, "%s: %d chunks of host memory prepared ahead in B (%d; "
          "B %s; host memory made %d MiB, %d chunks owed)" % (what, n, metric(ag, "gshare_gpu_chunks_spill_prepared"),
                                                            b.say("host"), metric(ag, "gshare_gpu_spill_host_bytes") / MiB,
                                                            gpu(ag)["chunks_owed"]))


def moved_out(ag):
    """Chunks moved to host memory (the batches' log lines)."""
    return sum(int(m.group(1)) for m in re.finditer(r"moved (\d+) of \d+ chunks to host memory", ag.logtext()))


def moved_prepared(ag):
    """Chunks moved to host memory that was prepared ahead (the batches'
    log lines)."""
    return sum(int(m.group(1)) for m in re.finditer(r"chunks to host memory \((\d+) prepared ahead\)", ag.logtext()))


def reclaim_phases(ag):
    """Where the take-back's time went: one line per take-back in the log, by
    phase, and the phases' counters; the mover's own (prepare, copy,
    remap) said, as the agent's (plan, settle)."""
    def line():
        return re.search(r"taken back: (\d+) chunks moved to host memory in (\d+) batches, ([\d.]+) ms .*"
                         r"\(ms\): plan [\d.]+, sync [\d.]+, prepare ([\d.]+), copy ([\d.]+), "
                         r"remap ([\d.]+), wire [\d.]+, settle [\d.]+", ag.logtext())
    e.wait_for(line, 30, step=0.1)
    m = line()
    check(m is not None and int(m.group(1)) >= 1, "phases: the take-back logged with its time by phase")
    # prepare may be 0 ms: the host memory was prepared ahead.
    for ph in ("copy", "remap", "settle"):
        v = metric(ag, "gshare_gpu_spill_phase_seconds_total", 'phase="%s"' % ph)
        check(v > 0, "phases: gshare_gpu_spill_phase_seconds_total{phase=\"%s\"} %s > 0" % (ph, v))


def moves(tmp):
    """Lend, reclaim, back, a move during a held kernel, a borrower killed
    mid-move."""
    # The fake NVML: the usage scan, which says what was spilled.
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write("nvmlLibrary: %s\nusageInterval: 200ms\nmetricsAddress: 127.0.0.1:%d\n" % (NVML, e.free_port()))
    ag = e.Agent(tmp, ["--config", conf, "--burst-max", "768Mi", "--spill-max", "512Mi"])
    ag.metrics_conf = conf
    # Contexts charged as on a GPU (one chunk each): the owner's charge is
    # taken back too, and its allocation keeps a set of chunks for it.
    ag.env["GSHARE_FAKECUDA_CTX_BYTES"] = str(32 * MiB)
    ag.start()
    try:
        A, B = owner_and_borrower(ag)
        check(gpu(ag)["chunks_total"] == 27, "the pool: 27 chunks, one for the agent's context (%d)"
              % gpu(ag)["chunks_total"])

        # ---- lend: B borrows the free chunks and A's idle ones
        b = Prog(ag, B, "borrow", 896, 32)
        got = b.line()
        check(got == ["ready", "832"], "lend: B fills 832 MiB (its context one chunk more): 15 free chunks and "
              "A's 8 idle ones (%s)" % got)
        g = gpu(ag)
        check(g["chunks_owed"] == 8, "lend: A is owed its 8 chunks (%d)" % g["chunks_owed"])
        check(g["units_lent"] == 8, "lend: 8 units lent out of free units (15 chunks), not A's (%d)"
              % g["units_lent"])
        check(b.say("check")[:2] == ["check", "ok"], "lend: B's checksums")
        # What is owed and a margin (GS_PREP_MARGIN, 64 chunks: more than
        # owed is taken back when A's context needs room), within spillMax
        # (512Mi: 16 chunks).
        prepared(ag, b, 16, "lend")

        # ---- reclaim: A's process wants its memory
        a = Prog(ag, A, "own", 224, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "reclaim: A's process gets its context and 224 MiB (%s)" % got)
        if len(got) == 5:
            print("info reclaim: 224 MiB (7 chunks, after the context's) in %s ms on the fake driver" % got[4])
        r = b.say("check")
        check(r[:2] == ["check", "ok"] and len(r) == 6 and int(r[3]) >= 256 * MiB,
              "reclaim: B's checksums hold, its data in %s bytes of host memory" % (r[3] if len(r) == 6 else r))
        g = gpu(ag)
        check(g["chunks_spilled"] >= 8 and g["chunks_owed"] == 0 and g["chunks_moving"] == 0,
              "reclaim: %d chunks spilled, %d owed, %d moving" % (g["chunks_spilled"], g["chunks_owed"],
                                                                 g["chunks_moving"]))
        check(b.p.poll() is None, "reclaim: B runs on")
        # A's 8 chunks at least (with its context's room, more), every one
        # prepared ahead.
        check(moved_prepared(ag) == moved_out(ag) >= 8, "reclaim: the chunks moved to host memory prepared ahead "
              "in B (%d of %d)" % (moved_prepared(ag), moved_out(ag)))
        reclaim_phases(ag)

        # ---- back: A frees and exits; B's data comes back to the GPU
        check(a.say("free") == ["freed"], "back: A frees")
        check(a.quit() == 0, "back: A exits")

        def host_back():
            r = b.say("check")
            return r[:2] == ["check", "ok"] and r[3] == "0" and gpu(ag)["chunks_spilled"] == 0
        check(e.wait_for(lambda: "were moved to host memory for their owner" in ag.logtext(), 30, step=0.2)
              is not None, "events: the spill said (GPUMemorySpilled)")
        check(e.wait_for(host_back, 60, step=0.2) is not None, "back: B's data on the GPU again, checksums intact")
        check(e.wait_for(lambda: "is all on the GPU again" in ag.logtext(), 30, step=0.2) is not None,
              "events: the return said (GPUMemoryUnspilled)")
        g = gpu(ag)
        check(g["chunks_moved_back"] >= 8, "back: %d chunks moved back" % g["chunks_moved_back"])

        # ---- during: A asks while B's move waits for B's queued kernel
        # chunks_moving counts moves both ways: the last move back must be
        # over, so that the move seen next is the one this step starts.
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0, 60, step=0.05) is not None, "during: no move in flight")
        check(b.say("hold") == ["held"], "during: B's kernel queued over block 0, held")
        a = Prog(ag, A, "own", 128, 32)
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] > 0, 60, step=0.05) is not None,
              "during: a move of B's is in flight (waiting for its kernel)")
        check(a.p.poll() is None, "during: A waits")
        check(b.say("release") == ["released"], "during: B's kernel released")
        got = a.line()
        check(got[:3] == ["own", "got", "128"], "during: A gets its 128 MiB (%s)" % got)
        r = b.say("check")
        check(r[:2] == ["check", "ok"], "during: the kernel's writes are in B's moved data, the rest intact (%s)" % r)
        a.say("free")
        a.quit()
        check(e.wait_for(host_back, 60, step=0.2) is not None, "during: B back on the GPU")

        # ---- killed: B dies while its move waits
        # chunks_moving counts moves both ways: the last move back must be
        # over, so that the move seen next is the one this step starts.
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0, 60, step=0.05) is not None, "killed: no move in flight")
        check(b.say("hold") == ["held"], "killed: B's kernel held")
        a = Prog(ag, A, "own", 224, 32)
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] > 0, 60, step=0.05) is not None,
              "killed: a move of B's is in flight")
        b.p.send_signal(signal.SIGKILL)
        b.p.wait()
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "killed: A gets its 224 MiB from B's exit (%s)" % got)
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0 and gpu(ag)["chunks_spilled"] == 0, 60) is not None,
              "killed: the batch undone, no spare held")
        a.say("free")
        a.quit()
        # B's context chunk comes back once the driver has freed the dead
        # process's memory (the next scan): both allocations idle first.
        check(e.wait_idle(ag, B["id"]) is not None and e.wait_idle(ag, A["id"]) is not None,
              "killed: both allocations idle")
        b2 = Prog(ag, B, "borrow", 896, 32)
        got = b2.line()
        check(got == ["ready", "832"], "killed: the books balance, a new borrower fills 832 MiB again (%s)" % got)
        check(b2.say("check")[:2] == ["check", "ok"], "killed: its checksums")
        b2.quit()
        check(e.wait_idle(ag, B["id"]) is not None and gpu(ag)["chunks_owed"] == 0,
              "all gone: nothing owed, nothing held")
        check(ag.alive(), "the agent runs on")
    finally:
        ag.stop()
    return ag


def last(tmp, kill):
    """spillMax too small for what A wants back: refused past it; killed
    only with reclaimKillAfter."""
    what = "last (kill)" if kill else "last (no kill)"
    sub = os.path.join(tmp, "kill" if kill else "nokill")
    os.makedirs(sub)
    conf = os.path.join(sub, "config.yaml")
    with open(conf, "w") as f:
        f.write("usageInterval: 200ms\nmetricsAddress: 127.0.0.1:%d\n" % e.free_port())
    ag = e.Agent(sub, ["--config", conf, "--burst-max", "768Mi", "--spill-max", "64Mi"] +
                 (["--reclaim-kill-after", "1s"] if kill else []))
    ag.metrics_conf = conf
    ag.start()
    try:
        A, B = owner_and_borrower(ag)
        b = Prog(ag, B, "borrow", 896, 32)
        check(b.line() == ["ready", "864"], what + ": B fills its burst, 864 MiB")
        # spillMax reached while preparing: 2 of the 8 owed chunks.
        prepared(ag, b, 2, what)
        a = Prog(ag, A, "own", 256, 32)
        got = a.line()
        if kill:
            check(got[:3] == ["own", "got", "256"], what + ": A gets its 256 MiB (%s)" % got)
            check(b.p.wait(timeout=e.HANG) == -signal.SIGKILL, what + ": B was killed")
            check("killed process %d" % b.p.pid in ag.logtext() and "reclaimKillAfter" in ag.logtext(),
                  what + ": the kill is logged (and its Warning Event GPUMemoryReclaimKill)")
        else:
            check(got[:2] == ["own", "short"], what + ": A's request fails, out of memory, catchable (%s)" % got)
            check(gpu(ag)["chunks_spilled"] == 2, what + ": 2 chunks spilled, as many as spillMax holds (%d)"
                  % gpu(ag)["chunks_spilled"])
            check(b.say("check")[:2] == ["check", "ok"] and b.p.poll() is None, what + ": B runs on, data intact")
            check("spillMax reached" in ag.logtext(), what + ": the agent says spillMax was reached")
            check(moved_prepared(ag) == 2, what + ": the 2 moved to the host memory prepared ahead (%d)"
                  % moved_prepared(ag))
        a.quit()
        b.quit()
        check(ag.alive(), what + ": the agent runs on")
    finally:
        ag.stop()
    return ag


def chain(tmp):
    """Chunks of 4 MiB: A's 224 MiB take more than one batch of 32 chunks
    back; each batch moved whole asks for the next in its answer, and is
    settled while B moves that one."""
    sub = os.path.join(tmp, "chain")
    os.makedirs(sub)
    conf = os.path.join(sub, "config.yaml")
    with open(conf, "w") as f:
        f.write("usageInterval: 200ms\nmetricsAddress: 127.0.0.1:%d\n" % e.free_port())
    ag = e.Agent(sub, ["--config", conf, "--burst-max", "768Mi", "--spill-max", "512Mi", "--chunk-size", "4Mi"])
    ag.metrics_conf = conf
    ag.env["GSHARE_HOOK_DEBUG"] = "1"  # the hooks' word on stderr, shown if A falls short
    ag.start()
    try:
        A, B = owner_and_borrower(ag)
        b = Prog(ag, B, "borrow", 896, 32)
        got = b.line()
        check(got[:1] == ["ready"] and gpu(ag)["chunks_owed"] >= 40,
              "chain: B fills %s MiB, A is owed more than a batch of chunks (%d)" % (got[1:], gpu(ag)["chunks_owed"]))
        # One block: one request, all of it wanted back at once.
        a = Prog(ag, A, "own", 224, 224)
        got = a.line()
        check(got[:3] == ["own", "got", "224"], "chain: A's process gets its 224 MiB (%s)" % got)
        if got[:3] != ["own", "got", "224"]:
            a.quit()
            print("A's stderr:\n" + a.p.stderr.read())
        check(b.say("check")[:2] == ["check", "ok"], "chain: B's checksums hold")
        n = len(re.findall(r"chunks to host memory .* to settle while the next batch moved", ag.logtext()))
        check(moved_out(ag) >= 56 and n >= 1, "chain: %d chunks moved, %d batches settled while the next one moved"
              % (moved_out(ag), n))
        # What A still does not use of its guarantee may stay lent to B.
        check(e.wait_for(lambda: gpu(ag)["chunks_moving"] == 0, 30, step=0.1) is not None,
              "chain: nothing moving once A has its memory")
        a.quit()
        b.quit()
        check(e.wait_for(lambda: gpu(ag)["chunks_spilled"] == 0 and gpu(ag)["chunks_owed"] == 0, 30, step=0.1)
              is not None, "chain: all gone, nothing spilled nor owed")
        check(ag.alive(), "chain: the agent runs on")
    finally:
        ag.stop()
    return ag


def prep_unneeded(tmp):
    """Host memory prepared ahead in a borrower that then borrows nothing
    any more: it lets it go (the agent charges it until it exits), and once
    it exits nothing of it is left."""
    what = "prep_unneeded"
    sub = os.path.join(tmp, "unneeded")
    os.makedirs(sub)
    conf = os.path.join(sub, "config.yaml")
    with open(conf, "w") as f:
        f.write("usageInterval: 200ms\nmetricsAddress: 127.0.0.1:%d\n" % e.free_port())
    ag = e.Agent(sub, ["--config", conf, "--burst-max", "768Mi", "--spill-max", "512Mi"])
    ag.metrics_conf = conf
    ag.start()
    try:
        A, B = owner_and_borrower(ag)
        b = Prog(ag, B, "borrow", 896, 32)
        check(b.line()[0] == "ready", what + ": B fills its burst")
        owed = gpu(ag)["chunks_owed"]
        check(owed > 0, what + ": A is owed chunks (%d)" % owed)
        # What is owed and the margin, within spillMax (16 chunks).
        owed = min(owed + 64, 16)
        prepared(ag, b, owed, what)
        # B frees everything: its hook gives its chunks back (borrowed
        # first), nothing is owed, B borrows nothing.
        check(b.say("free")[0] == "freed", what + ": B frees its blocks")
        check(e.wait_for(lambda: gpu(ag)["chunks_owed"] == 0, 30, step=0.1) is not None,
              what + ": nothing owed once B freed (%d)" % gpu(ag)["chunks_owed"])

        def released():
            r = b.say("host")
            return (len(r) == 4 and r[3] == "0" and metric(ag, "gshare_gpu_chunks_spill_prepared") == 0 and
                    metric(ag, "gshare_gpu_chunks_spill_held") == owed)
        check(e.wait_for(released, 30, step=0.1) is not None, what + ": B let its prepared chunks go, held "
              "(charged) until it exits (B %s, prepared %d, held %d)" % (b.say("host"), metric(
                  ag, "gshare_gpu_chunks_spill_prepared"), metric(ag, "gshare_gpu_chunks_spill_held")))
        check(b.quit() == 0, what + ": B exits")

        def nothing_left():
            return (metric(ag, "gshare_gpu_chunks_spill_held") == 0 and
                    metric(ag, "gshare_gpu_chunks_spill_prepared") == 0 and
                    metric(ag, "gshare_gpu_spill_host_bytes") == 0)
        check(e.wait_for(nothing_left, 30, step=0.1) is not None, what + ": nothing held, prepared or made once B "
              "exited (host bytes %d)" % metric(ag, "gshare_gpu_spill_host_bytes"))
        check(ag.alive(), what + ": the agent runs on")
    finally:
        ag.stop()
    return ag


def hostile_keep(tmp):
    """A borrower that keeps the host memory it is sent and moves nothing
    cannot make the agent pin more than spillMax."""
    what = "hostile_keep"
    sub = os.path.join(tmp, "hostile")
    os.makedirs(sub)
    ag = e.Agent(sub, ["--burst-max", "768Mi", "--spill-max", "64Mi"])
    ag.start()
    try:
        A, B = owner_and_borrower(ag)
        h = subprocess.Popen([e.KEPTFD, "spill", e.sockpath(B), str(864 * MiB)], env=ag.env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(h.stdout.readline().split() == ["ready", str(864 * MiB)], what + ": the hostile borrower fills B's "
              "burst, 864 MiB")
        # A asks again and again (each request waits its patience, each
        # wait asks the borrower's mover again and again).
        for i in range(2):
            a = Prog(ag, A, "own", 256, 32)
            got = a.line()
            check(got[:2] == ["own", "short"], what + ": A's request %d fails, out of memory (%s)" % (i, got))
            a.quit()
        check("spillMax reached" in ag.logtext(), what + ": the agent says spillMax was reached")
        check("did not move 2 chunks" in ag.logtext() or "did not move 1 chunks" in ag.logtext(),
              what + ": the agent says the borrower kept host memory it did not move")
        h.stdin.write("report\n")
        h.stdin.flush()
        rounds = h.stdout.readline().split()
        kept = h.stdout.readline().split()
        check(len(rounds) == 5 and int(rounds[2]) >= 1, what + ": the agent asked the mover to move (%s)" % rounds)
        check(len(kept) == 9 and int(kept[3]) <= 64 * MiB, what + ": the borrower holds %s bytes of host memory "
              "from %s fds, at most spillMax (64 MiB)" % (kept[3] if len(kept) == 9 else kept,
                                                         rounds[4] if len(rounds) == 5 else "?"))
        check(gpu(ag)["chunks_spilled"] == 0, what + ": nothing spilled (%d)" % gpu(ag)["chunks_spilled"])
        h.stdin.write("x\n")
        h.stdin.flush()
        got = h.stdout.readline().split()
        check(got[:1] == ["verified"] and got[3:4] == ["0"], what + ": the host memory it kept held its pattern (%s)"
              % got)
        check(h.wait(timeout=e.HANG) == 0, what + ": the hostile borrower exits")
        check(e.wait_for(lambda: "is gone with the host memory of" in ag.logtext(), e.HANG, step=0.05) is not None,
              what + ": the spares it held are free again")
        # An honest borrower is spilled as far as spillMax goes again.
        b = Prog(ag, B, "borrow", 896, 32)
        check(b.line() == ["ready", "864"], what + ": an honest B fills its burst")
        a = Prog(ag, A, "own", 64, 32)
        got = a.line()
        check(got[:3] == ["own", "got", "64"], what + ": A gets 64 MiB, B's 2 chunks spilled (%s)" % got)
        check(gpu(ag)["chunks_spilled"] == 2, what + ": 2 chunks spilled (%d)" % gpu(ag)["chunks_spilled"])
        check(b.say("check")[:2] == ["check", "ok"], what + ": B's data intact")
        a.quit()
        b.quit()
        check(ag.alive(), what + ": the agent runs on")
    finally:
        ag.stop()
    return ag


if __name__ == "__main__":
    main()
