#!/usr/bin/python3
"""Hostile tenants and faults (issue 10): the real gshare-agent on the fake
driver, driven through gsharectl, its checkpoint and e2e_wire.

  create_failures   every failure branch of CreateAllocation and of the
                    checkpoint restore leaves the agent serving
  checkpoint_keep   a line that cannot be restored stays in the checkpoint,
                    is retried, and its units are held meanwhile
  socket_access     only root and the pod (through its mount) reach an
                    allocation's socket; no chmod through a planted symlink
  fresh_dirs        every allocation gets a socket directory of its own
  scrub             memory granted to a process holds no other process's data
  workers           a bounded pool of worker threads, connection caps,
                    WELCOME only for a served connection, fairness

Each part starts its own agent in a temporary directory.  Run alone with a
part's name as argument to run only that part.  A part that cannot run here
(socket_access when not root) is skipped: the other parts run, and the test
exits 77 (test/run-tests.sh counts it as skipped).
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_e2e as e2e  # noqa: E402

check = e2e.check
failures = e2e.failures
MiB = e2e.MiB
CHUNK = e2e.CHUNK
UNIT = e2e.UNIT
WIRE = e2e.WIRE
CTL = e2e.CTL
wait_for = e2e.wait_for
# Parts that could not run here; e2e.skip() is not used, as e2e.report()
# (which each part calls) would end the test at the first skip.
skipped = []


def dev(ag, u):
    return "%s-u%d" % (ag.gpus()[0]["uuid"], u)


def ckpt_path(ag):
    return os.path.join(ag.tmp, "state", "allocations")


def ckpt_lines(ag):
    with open(ckpt_path(ag)) as f:
        return [ln for ln in f.read().splitlines() if ln and not ln.startswith("#")]


def serving(ag):
    """The agent is alive and answers the control API."""
    return ag.alive() and ag.ctl("gpus", ok=True).returncode == 0


# The reconciler is off: nothing here needs it, and its gRPC threads only
# add timing to these agents' many starts and stops.
QUIET = ["--reconcile-interval", "0"]


def fresh(name, extra=None):
    tmp = tempfile.mkdtemp(prefix="gshare-harden-%s-" % name)
    return e2e.Agent(tmp, QUIET + list(extra or []))


# ---------------------------------------------------------------- item 2

def create_failures():
    # No free chunks: the units are free, but their chunks are lent to an
    # allocation that borrowed them (balloonCap).
    ag = fresh("nochunks", ["--balloon-cap", "1Gi"])
    ag.start()
    try:
        g = ag.gpus()[0]
        A = ag.create([dev(ag, 0)])["allocation"]
        take = (g["chunks_free"] - 2 - 1) * CHUNK  # leaves one free chunk
        holder = subprocess.Popen([WIRE, "hold", e2e.sockpath(A), str(take)], env=ag.env,
                                  stdout=subprocess.PIPE, text=True)
        check(holder.stdout.readline().strip() == "held", "nochunks: a process borrows all but one free chunk")
        r = ag.ctl("create", dev(ag, 1), dev(ag, 2), ok=False)
        check(r.returncode == 1 and "free chunks" in r.stderr,
              "nochunks: create needing 4 chunks with 1 free fails with a message: " + r.stderr.strip())
        check(serving(ag), "nochunks: the agent still serves after the failed create")
        check(set(ag.allocs()) == {A["id"]} and ag.units_allocated() == 1,
              "nochunks: the failed create changed nothing")
        r = ag.ctl("create", dev(ag, 1), dev(ag, 2), ok=False)
        check(r.returncode == 1 and serving(ag), "nochunks: and again")
        holder.kill()
        holder.wait()
        wait_for(lambda: ag.gpus()[0]["chunks_free"] >= 4, step=0.01)
        B = ag.create([dev(ag, 1), dev(ag, 2)])
        check(B["created"], "nochunks: the same create succeeds once the chunks are back")
    finally:
        ag.stop()
    e2e.report(ag, ag.tmp if not failures else None)

    # Socket path too long for sun_path: every create fails, cleanly.
    tmp = tempfile.mkdtemp(prefix="gshare-harden-long-")
    ag = e2e.Agent(tmp)
    longroot = os.path.join(tmp, "r" * (100 - len(tmp)))
    ag.extra = QUIET + ["--socket-root", longroot]
    ag.start()
    try:
        r = ag.ctl("create", dev(ag, 0), ok=False)
        check(r.returncode == 1 and "too long" in r.stderr,
              "long socket root: create fails naming the problem: " + r.stderr.strip())
        check(serving(ag) and not ag.allocs() and ag.units_allocated() == 0,
              "long socket root: the agent serves on, nothing allocated")
        r = ag.ctl("create", dev(ag, 0), ok=False)
        check(r.returncode == 1 and serving(ag), "long socket root: and again")
    finally:
        ag.stop()
    e2e.report(ag, tmp if not failures else None)

    # Something that is not a socket at agent.sock of a restored allocation,
    # and a checkpoint line that cannot be restored: the agent starts and
    # serves, keeps the lines, and restores them once it can.
    ag = fresh("notsock")
    ag.start()
    try:
        A = ag.create([dev(ag, 0)])["allocation"]
        B = ag.create([dev(ag, 1)])["allocation"]
        ag.stop()
        os.mkdir(e2e.sockpath(A))  # a directory where the socket goes
        with open(ckpt_path(ag), "a") as f:
            f.write("0123456789abcdef 1700000000 1 GPU-00000000-0000-0000-0000-00000000dead-u0\n")
            f.write("this line is not a checkpoint line\n")
        ag.start()
        time.sleep(0.2)
        check(serving(ag), "not a socket at agent.sock, unknown GPU: the agent starts and serves")
        check(set(ag.allocs()) == {B["id"]}, "the allocation that can be restored is")
        log = ag.logtext()
        check("not restored" in log and A["id"] in log, "the one that cannot is logged")
        lines = ckpt_lines(ag)
        check(len(lines) == 4 and any(ln.split()[0] == A["id"] for ln in lines) and
              any(ln.startswith("0123456789abcdef ") for ln in lines) and
              "this line is not a checkpoint line" in lines,
              "the lines not restored stay in the checkpoint, a malformed one verbatim: %s" % lines)
        check(ag.gpus()[0]["units_restoring"] == [0],
              "its unit is reported for the plugin to mark Unhealthy: %s" % ag.gpus()[0]["units_restoring"])
        r = ag.ctl("create", dev(ag, 0), dev(ag, 5), ok=False)
        check(r.returncode == 1 and "part of allocation %s, not restored yet" % A["id"] in r.stderr,
              "the units of the allocation waiting to be restored stay taken: " + r.stderr.strip())
        r = ag.ctl("create", dev(ag, 0), ok=False)
        check(r.returncode == 1 and "Address already in use" in r.stderr and serving(ag),
              "asking for its exact set retries it at once: " + r.stderr.strip())
        os.rmdir(e2e.sockpath(A))
        wait_for(lambda: A["id"] in ag.allocs(), step=0.05)  # retried every second
        check(A["id"] in ag.allocs() and os.path.exists(e2e.sockpath(A)),
              "once the obstacle is gone the allocation is restored, same socket")
        r = ag.ctl("release", "0123456789abcdef", ok=False)
        check(r.returncode == 0, "a line waiting to be restored can be released: " + r.stderr.strip())
        check(not any(ln.startswith("0123456789abcdef ") for ln in ckpt_lines(ag)),
              "release drops it from the checkpoint")
        # The checkpoint cannot be written (a non-empty directory where it
        # goes: the rename over it fails): the create fails, nothing changes.
        os.rename(ckpt_path(ag), ckpt_path(ag) + ".away")
        os.mkdir(ckpt_path(ag))
        open(os.path.join(ckpt_path(ag), "x"), "w").close()
        before = set(ag.allocs())
        r = ag.ctl("create", dev(ag, 6), ok=False)
        check(r.returncode == 1 and "cannot write the checkpoint" in r.stderr and serving(ag) and
              set(ag.allocs()) == before, "checkpoint unwritable: create fails, the agent serves: " + r.stderr.strip())
        leftovers = [n for n in os.listdir(os.path.dirname(ckpt_path(ag))) if ".tmp" in n]
        check(not leftovers, "no temporary file left behind: %s" % leftovers)
        os.unlink(os.path.join(ckpt_path(ag), "x"))
        os.rmdir(ckpt_path(ag))
        os.rename(ckpt_path(ag) + ".away", ckpt_path(ag))
        check(ag.create([dev(ag, 6)])["created"], "and succeeds once it can be written")
    finally:
        ag.stop()
    e2e.report(ag, ag.tmp if not failures else None)


# ---------------------------------------------------------- items 6, 7, 8

NOBODY = 65534


def as_nobody(fn):
    """Runs fn() in a forked child with uid/gid nobody; returns its exit
    status (fn returns the status)."""
    pid = os.fork()
    if pid == 0:
        rc = 3
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            rc = fn()
        except BaseException as e:  # noqa: B902 — the child must not return
            print("child: %r" % e, flush=True)
        os._exit(rc)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def try_connect(path):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return 0
    except PermissionError:
        return 13
    except OSError as e:
        print("connect %s: %r" % (path, e), flush=True)
        return 1
    finally:
        s.close()


def socket_access():
    if os.geteuid() != 0:
        print("SKIP socket_access: needs root (to become nobody)", flush=True)
        skipped.append("socket_access (needs root)")
        return
    tmp = tempfile.mkdtemp(prefix="gshare-harden-access-")
    os.chmod(tmp, 0o755)  # nobody may traverse the test's own directory
    victim = os.path.join(tmp, "victim")
    with open(victim, "w") as f:
        f.write("secret\n")
    os.chmod(victim, 0o600)
    ag = e2e.Agent(tmp, QUIET)
    # The attacker who wins the race between bind and a chmod by path.
    ag.env["LD_PRELOAD"] = os.path.join(e2e.BD, "test/e2e/race_chmod.so")
    ag.env["GSHARE_TEST_VICTIM"] = victim
    ag.env["ASAN_OPTIONS"] = "verify_asan_link_order=0"
    ag.start()
    try:
        A = ag.create([dev(ag, 0)])["allocation"]
        root = os.path.join(tmp, "alloc")
        st = os.stat(root)
        check(st.st_mode & 0o777 == 0o700 and st.st_uid == 0,
              "socket root is 0700 root (%o)" % (st.st_mode & 0o777))
        check(os.stat(victim).st_mode & 0o777 == 0o600,
              "a symlink planted at agent.sock before a chmod is never followed (victim %o)"
              % (os.stat(victim).st_mode & 0o777))
        check(os.stat(e2e.sockpath(A)).st_mode & 0o777 == 0o666 and
              oct(os.lstat(e2e.sockpath(A)).st_mode)[:4] == "0o14",
              "the socket is a socket, 0666, in its 0755 directory")
        check(try_connect(e2e.sockpath(A)) == 0, "root connects")
        rc = as_nobody(lambda: try_connect(e2e.sockpath(A)))
        check(rc == 13, "an unprivileged host user cannot connect to the allocation's socket (rc %d)" % rc)
        # The pod reaches its socket through its mount of the directory: an
        # fd of the directory opened before dropping root stands for it.
        dfd = os.open(A["socket_dir"], os.O_PATH | os.O_DIRECTORY)

        def via_mount():
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: /proc/self/fd is ours again
            path = "/proc/self/fd/%d/agent.sock" % dfd
            if try_connect(path) != 0:
                return 1
            os.execve(WIRE, [WIRE, "quota", path], ag.env)
        os.set_inheritable(dfd, True)
        env_pre = ag.env.pop("LD_PRELOAD")
        rc = as_nobody(via_mount)
        ag.env["LD_PRELOAD"] = env_pre
        os.close(dfd)
        check(rc == 0, "an unprivileged process with the directory (the pod's mount) registers and gets its quota (rc %d)" % rc)
    finally:
        ag.stop()
    e2e.report(ag, tmp if not failures else None)


def fresh_dirs():
    ag = fresh("dirs")
    ag.start()
    try:
        A = ag.create([dev(ag, 0)])["allocation"]
        with open(os.path.join(A["socket_dir"], "left-by-the-pod"), "w") as f:
            f.write("x")
        ag.ctl("release", A["id"])
        check(os.path.isdir(A["socket_dir"]), "a released allocation's directory that is not empty stays")
        A2 = ag.create([dev(ag, 0)])["allocation"]
        check(A2["id"] == A["id"] and A2["socket_dir"] != A["socket_dir"],
              "the same device IDs again: same id, a fresh directory (%s, %s)" % (A["socket_dir"], A2["socket_dir"]))
        check(os.listdir(A2["socket_dir"]) == ["agent.sock"], "the fresh directory holds only its socket")
        B = ag.create([dev(ag, 1)])["allocation"]
        ag.ctl("release", B["id"])
        B2 = ag.create([dev(ag, 1)])["allocation"]
        check(B2["socket_dir"] != B["socket_dir"] and not os.path.exists(B["socket_dir"]),
              "an empty released directory is removed, and not reused either")
        ag.stop()
        ag.start()
        after = ag.allocs()
        check(after[A2["id"]]["socket_dir"] == A2["socket_dir"] and os.path.exists(e2e.sockpath(A2)),
              "after a restart the allocation keeps its directory (the checkpoint names it)")
        r = e2e.run([WIRE, "quota", e2e.sockpath(A2)], ag.env)
        check(r.returncode == 0, "and serves on it: " + r.stdout.strip() + r.stderr)
        # A v1 checkpoint (no dir=) still restores, into <socketRoot>/<id>.
        ag.stop()
        with open(ckpt_path(ag)) as f:
            text = f.read()
        with open(ckpt_path(ag), "w") as f:
            f.write(text.replace(" dir=%s" % os.path.basename(A2["socket_dir"]), ""))
        ag.start()
        check(ag.allocs()[A2["id"]]["socket_dir"] == os.path.join(ag.tmp, "alloc", A2["id"]),
              "a v1 checkpoint line restores into <socketRoot>/<id>")
    finally:
        ag.stop()
    e2e.report(ag, ag.tmp if not failures else None)


# ---------------------------------------------------------------- item 9

def scrub():
    ag = fresh("scrub")
    ag.start()
    try:
        A = ag.create([dev(ag, 0), dev(ag, 1)])["allocation"]
        env = e2e.hook_env(ag, A)
        q = 2 * UNIT // MiB
        r = e2e.run([e2e.CUDA, "mark", str(q)], env)
        check(r.returncode == 0 and ("marked %d MiB" % q) in r.stdout,
              "a process fills the whole quota with a marker and exits: " + r.stdout.strip() + r.stderr)
        check(e2e.wait_idle(ag, A["id"]) is not None, "its chunks are back in the allocation")
        r = e2e.run([e2e.CUDA, "marks", str(q)], env)
        check(r.returncode == 0 and ("0 marker words in %d MiB" % q) in r.stdout,
              "the next process of the same allocation gets the same chunks without a word of it: "
              + r.stdout.strip() + r.stderr)
        # And between allocations (chunks recycled through the system list).
        ag.ctl("release", A["id"])
        B = ag.create([dev(ag, 2), dev(ag, 3)])["allocation"]
        r = e2e.run([e2e.CUDA, "marks", str(q)], e2e.hook_env(ag, B))
        check(r.returncode == 0 and ("0 marker words in %d MiB" % q) in r.stdout,
              "nor does a process of another allocation: " + r.stdout.strip() + r.stderr)
    finally:
        ag.stop()
    e2e.report(ag, ag.tmp if not failures else None)


# ---------------------------------------------------------------- item 4

def threads_of(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def workers_of(pid):
    """The agent's pool threads (named gshare-worker)."""
    n = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                n += f.read().strip() == "gshare-worker"
        except OSError:
            pass
    return n


def hold_conns(ag, sock, n):
    """A process opening n connections on sock; returns (Popen, its line)."""
    p = subprocess.Popen([WIRE, "conns", sock, str(n)], env=ag.env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, p.stdout.readline().strip()


def let_go(p):
    p.stdin.close()
    rc = p.wait(timeout=30)
    err = p.stderr.read()
    return rc, err


def workers():
    tmp = tempfile.mkdtemp(prefix="gshare-harden-workers-")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("workerThreads: 2\nmaxConnections: 50\nmaxConnectionsPerAllocation: 40\n"
                "maxConnectionsPerProcess: 30\n")
    ag = e2e.Agent(tmp, QUIET + ["--config", cfg])
    ag.start()
    held = []
    try:
        A = ag.create([dev(ag, 0)])["allocation"]
        B = ag.create([dev(ag, 1)])["allocation"]
        C = ag.create([dev(ag, 2)])["allocation"]
        pid = ag.proc.pid
        base = threads_of(pid)
        p1, line = hold_conns(ag, e2e.sockpath(A), 35)
        held.append(p1)
        check(line == "registered 30 refused 5 err -24",
              "one process: 30 connections served, the next 5 refused with an ERROR, no WELCOME (%s)" % line)
        # gRPC may start a thread of its own now and then: count the pool's,
        # and bound the rest far below one per connection.
        check(workers_of(pid) == 2 and threads_of(pid) < base + 5,
              "30 more connections, no more agent threads (%d pool threads, %d in all, %d before)"
              % (workers_of(pid), threads_of(pid), base))
        p2, line = hold_conns(ag, e2e.sockpath(A), 15)
        held.append(p2)
        check(line == "registered 10 refused 5 err -24",
              "a second process: the allocation's cap of 40 (%s)" % line)
        p3, line = hold_conns(ag, e2e.sockpath(B), 15)
        held.append(p3)
        check(line == "registered 10 refused 5 err -24", "the agent's cap of 50 in all (%s)" % line)
        log = ag.logtext()
        check("maxConnectionsPerProcess" in log and "maxConnectionsPerAllocation" in log and
              "maxConnections)" in log, "each refusal is logged naming its cap")
        for p in held:
            rc, err = let_go(p)
            check(rc == 0, "refused connections got ERROR -EMFILE, never WELCOME: " + err.strip())
        held = []
        wait_for(lambda: not any(ag.allocs()[x["id"]]["processes"] for x in (A, B)), step=0.02)
        r = e2e.run([WIRE, "quota", e2e.sockpath(C)], ag.env)
        check(r.returncode == 0, "once they are gone, a process of C registers: " + r.stdout.strip() + r.stderr)
        # Fairness: 24 connections of A flood (above the per-process cap
        # of the default config; this agent allows 30), B is served.
        t0 = os.times()
        st0 = open("/proc/%d/stat" % pid).read().split()
        w0 = time.monotonic()
        r = e2e.run([WIRE, "floodx", e2e.sockpath(A), e2e.sockpath(B), "24"], ag.env, timeout=120)
        wall = time.monotonic() - w0
        st1 = open("/proc/%d/stat" % pid).read().split()
        cpu = (int(st1[13]) + int(st1[14]) - int(st0[13]) - int(st0[14])) / os.sysconf("SC_CLK_TCK")
        del t0
        check(r.returncode == 0, "A's 24 flooding connections do not starve B: " + r.stdout.strip() + r.stderr)
        print("info: agent CPU during the flood %.2f s in %.2f s (%.0f%%), %d threads" %
              (cpu, wall, 100 * cpu / wall, threads_of(pid)), flush=True)
        check(workers_of(pid) == 2 and threads_of(pid) < base + 5,
              "the flood added no agent thread (%d pool threads, %d in all)" % (workers_of(pid), threads_of(pid)))
        r = e2e.run([WIRE, "hostile", e2e.sockpath(A)], ag.env)
        check(r.returncode == 0, "hostile messages are still rejected with the pool: " + r.stderr)
        # Flooding processes killed mid-flood (queued in the pool), their
        # allocation released and deleted: the pool serves on.
        D = ag.create([dev(ag, 3)])["allocation"]
        fl = subprocess.Popen([WIRE, "floodx", e2e.sockpath(D), e2e.sockpath(B), "24"], env=ag.env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.4)
        fl.kill()
        fl.wait()
        ag.ctl("release", D["id"])
        wait_for(lambda: D["id"] not in ag.allocs(), step=0.02)
        check(D["id"] not in ag.allocs(), "an allocation whose flooders were killed is deleted")
        r = e2e.run([WIRE, "quota", e2e.sockpath(C)], ag.env)
        check(r.returncode == 0 and ag.alive(), "and the pool serves on: " + r.stdout.strip() + r.stderr)
    finally:
        for p in held:
            p.kill()
            p.wait()
        ag.stop()
    e2e.report(ag, tmp if not failures else None)


PARTS = {"create_failures": create_failures, "socket_access": socket_access,
         "fresh_dirs": fresh_dirs, "scrub": scrub, "workers": workers}


def main():
    names = sys.argv[1:] or list(PARTS)
    e2e.need(e2e.AGENT, CTL, WIRE, e2e.FAKE, *([e2e.HOOK] if "scrub" in names else []))
    for n in names:
        print("--- %s" % n, flush=True)
        PARTS[n]()
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    if skipped:
        print("all checks run passed; skipped: " + "; ".join(skipped))
        sys.exit(e2e.EXIT_SKIP)
    print("all checks passed")


if __name__ == "__main__":
    main()
