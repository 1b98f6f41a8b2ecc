#!/usr/bin/python3
"""End-to-end tests of gshare-agent on the fake driver.

Starts the real agent on one fake GPU (test/fakecuda), creates allocations
with gsharectl, and drives them with e2e_wire (the process protocol spoken
directly, including hostile clients) and e2e_cuda (an ordinary CUDA program,
under the hook when $B/libgshare.so exists).  Checks the agent's accounting
with `gsharectl --json` around every step.

Environment: B (build dir, default build), SANITIZE (asan: LD_PRELOAD of an
ASan-built hook needs libasan first).

The helpers here are shared by the other Python tests.  No check depends on
how fast the machine is: a test waits for the event it expects, for up to
HANG seconds (a deadline that only catches a hang), and prints the time it
measured as "info".  A missing build product fails the test (need()); a part
that cannot run in this environment (not root, a tool not installed) is
skipped with skip(), and the test then exits EXIT_SKIP, which
test/run-tests.sh counts as skipped.
"""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

B = os.environ.get("B", "build")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BD = os.path.join(ROOT, B)
AGENT = os.path.join(BD, "gshare-agent")
CTL = os.path.join(BD, "gsharectl")
WIRE = os.path.join(BD, "test/e2e/e2e_wire")
KEPTFD = os.path.join(BD, "test/e2e/e2e_keptfd")
CUDA = os.path.join(BD, "test/e2e/e2e_cuda")
FAKE = os.path.join(BD, "test/fakecuda/libcuda.so.1")
HOOK = os.path.join(BD, "libgshare.so")
MiB = 1 << 20
CHUNK = 32 * MiB
UNIT = 64 * MiB

failures = []
skipped = []
# test/run-tests.sh counts this exit status as a skip (Automake's convention).
EXIT_SKIP = 77
# Seconds to wait for an event before calling it a hang: far beyond what a
# busy machine, ASan or TSan stretches an event to.  Waits end as soon as
# the event comes, so this costs nothing when the test passes.
HANG = 20.0


def check(cond, what):
    if cond:
        print("ok   " + what, flush=True)
    else:
        print("FAIL " + what, flush=True)
        failures.append(what)
    return cond


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def need(*files):
    """Build products the test needs: a missing one fails the test (make
    test builds them all), it is never a skip."""
    for f in files:
        if not os.path.exists(f):
            raise SystemExit("missing %s: run make first" % f)


def skip(what):
    """A part that cannot run in this environment: said, and the test exits
    EXIT_SKIP at report() instead of 0."""
    print("SKIP " + what, flush=True)
    skipped.append(what)


def wait_for(cond, limit=HANG, step=0.005):
    """Polls cond() until it is true; returns the seconds it took, or None
    after limit seconds."""
    t0 = time.monotonic()
    while True:
        if cond():
            return time.monotonic() - t0
        if time.monotonic() - t0 >= limit:
            return None
        time.sleep(step)


def report(ag, tmp=None):
    """Ends a test program: the agent's log and exit 1 if a check failed,
    else removes tmp (if given) and says so; exit EXIT_SKIP if a part was
    skipped."""
    if failures:
        print("log of the agent:\n" + ag.logtext())
        print("%d checks failed" % len(failures))
        sys.exit(1)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    if skipped:
        print("all checks run passed; skipped: " + "; ".join(skipped))
        sys.exit(EXIT_SKIP)
    print("all checks passed")


class Agent:
    """The real agent on one fake GPU of 1 GiB (32 MiB chunks, 64 MiB units),
    started with the extra arguments given."""

    def __init__(self, tmp, extra=None):
        self.tmp = tmp
        self.extra = list(extra or [])
        self.sock = os.path.join(tmp, "agent.sock")
        self.env = dict(os.environ)
        self.env.update(GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"),
                        GSHARE_FAKECUDA_MEM="1Gi", GSHARE_FAKECUDA_DEVICES="1",
                        LD_LIBRARY_PATH=os.path.dirname(FAKE))
        self.proc = None
        self.logpath = os.path.join(tmp, "agent.log")
        self.log = open(self.logpath, "a")

    def start(self):
        args = [AGENT, "--cuda-library", FAKE, "--socket", self.sock,
                "--socket-root", os.path.join(self.tmp, "alloc"),
                "--state-dir", os.path.join(self.tmp, "state"),
                "--chunk-size", "32Mi", "--unit-size", "64Mi", "--reserve", "128Mi"] + self.extra
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=self.log)
        # Until the control socket accepts a connection: its file exists
        # from bind, a moment before listen (a connect then is refused).
        if wait_for(lambda: self.listening() or self.proc.poll() is not None,
                    step=0.02) is not None and self.proc.poll() is None:
            return
        raise SystemExit("agent did not start; log:\n" + open(self.log.name).read())

    def listening(self):
        """Whether the control socket accepts a connection."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.sock)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=20)
            check(rc == 0, "agent exits 0 on SIGTERM (rc %s)" % rc)
        self.proc = None

    def alive(self):
        return self.proc.poll() is None

    def _ctl(self, args, ok=True):
        # gsharectl's own limit is 10 s: a test's only catches a hang (an
        # agent restarting under ASan on two busy cores took longer).
        r = subprocess.run([CTL, "--socket", self.sock, "--json", "--timeout-ms", "60000"] + list(args),
                           capture_output=True, text=True, timeout=90)
        if ok and r.returncode != 0:
            raise SystemExit("gsharectl %s failed: %s" % (args, r.stderr))
        return r

    def ctl(self, *args, ok=True):
        return self._ctl(args, ok)

    def gpus(self):
        return json.loads(self._ctl(["gpus"]).stdout)["gpus"]

    def allocs(self):
        return {a["id"]: a for a in json.loads(self._ctl(["allocations"]).stdout)}

    def create(self, ids):
        return json.loads(self._ctl(["create"] + list(ids)).stdout)

    def create_args(self, args):
        """create with options before the IDs (e.g. --burst SIZE)."""
        return json.loads(self._ctl(["create"] + list(args)).stdout)

    def units_allocated(self):
        return self.gpus()[0]["units_allocated"]

    def logtext(self):
        return open(self.logpath).read()


def run(cmd, env, timeout=60):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def sockpath(alloc):
    return os.path.join(alloc["socket_dir"], "agent.sock")


def idle(ag, aid):
    """The allocation's accounting when no process holds anything."""
    a = ag.allocs()[aid]
    p = a["parts"][0]
    return (p["bytes_requested"] == 0 and p["chunks_free"] == p["chunks_quota"]
            and not a["processes"])


def wait_idle(ag, aid, limit=HANG):
    """Seconds until the allocation is idle, or None after limit."""
    return wait_for(lambda: idle(ag, aid), limit)


def hook_env(ag, alloc):
    env = dict(ag.env)
    pre = HOOK
    if os.environ.get("SANITIZE") == "asan":
        asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True,
                              text=True).stdout.strip()
        pre = asan + ":" + HOOK
        env["ASAN_OPTIONS"] = "detect_leaks=0:verify_asan_link_order=0"
    env.update(LD_PRELOAD=pre, GSHARE_SOCKET=sockpath(alloc))
    return env


def chosen_cases(names):
    """The cases of a script to run, from its command line (test/tests.list
    runs each as its own entry, SCRIPT:CASE): none, all of names in order;
    --list prints names and exits; else the ones named, and a name the
    script does not have fails the run."""
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(names))
        sys.exit(0)
    for a in args:
        if a not in names:
            print("FAIL no case %r (cases: %s)" % (a, ", ".join(names)))
            sys.exit(1)
    return args or list(names)


def ctl_raw(path, payload, expect_reply=True):
    """Sends raw bytes on the control socket; returns the one frame that
    came back (its 4-byte length and its body), or what came before EOF
    (the agent closes the connection on a bad frame).  The agent keeps a
    good connection open for the next request: reading to EOF would wait
    out the timeout."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(path)
    s.sendall(payload)
    data = b""
    try:
        while expect_reply:
            want = 4 + struct.unpack("<I", data[:4])[0] if len(data) >= 4 else 4
            if len(data) >= want:
                break
            d = s.recv(want - len(data))
            if not d:
                break
            data += d
    except socket.timeout:
        pass
    s.close()
    return data


def main():
    need(AGENT, CTL, WIRE, CUDA, FAKE, HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-e2e-")
    ag = Agent(tmp)
    ag.start()
    try:
        body(ag, tmp)
    finally:
        if ag.proc:
            ag.stop()
    report(ag)


def body(ag, tmp):
    gpus = ag.gpus()
    check(len(gpus) == 1, "one fake GPU listed")
    g = gpus[0]
    uuid = g["uuid"]
    check(g["healthy"] and g["chunk_bytes"] == CHUNK and g["unit_bytes"] == UNIT,
          "GPU healthy with the configured chunk and unit sizes")
    check(g["units_total"] == g["chunks_total"] * CHUNK // UNIT and g["units_total"] >= 8,
          "units_total = pool / unit (%d units, %d chunks)" % (g["units_total"], g["chunks_total"]))
    pool_free = g["chunks_free"]

    # A process that bypasses the hook finds only the reserve.
    r = run([CUDA, "bypass", "256"], ag.env)
    check(r.returncode == 0, "bypass: direct cuMemAlloc of 256 MiB fails with OOM: " + r.stdout.strip())

    def dev(u):
        return "%s-u%d" % (uuid, u)

    # Control API validation.
    r = ag.ctl("create", "nonsense", ok=False)
    check(r.returncode == 1 and "not a gshare device ID" in r.stderr, "bad ID refused: " + r.stderr.strip())
    r = ag.ctl("create", dev(0), dev(0), ok=False)
    check(r.returncode == 1 and "more than once" in r.stderr, "duplicate ID refused")
    r = ag.ctl("create", dev(g["units_total"]), ok=False)
    check(r.returncode == 1 and "not a" in r.stderr, "unit past units_total refused")
    check(not ag.allocs(), "failed creates changed nothing")

    A = ag.create([dev(1), dev(0)])
    check(A["created"], "allocation A (2 units) created")
    A = A["allocation"]
    again = ag.create([dev(0), dev(1)])
    check(not again["created"] and again["allocation"]["id"] == A["id"], "create is idempotent")
    r = ag.ctl("create", dev(1), dev(2), ok=False)
    check(r.returncode == 1 and A["id"] in r.stderr, "ID of another allocation refused")
    B = ag.create([dev(2), dev(3), dev(4)])["allocation"]
    check(len(A["device_ids"]) == 2 and B["parts"][0]["quota_bytes"] == 3 * UNIT,
          "allocation B (3 units) created")
    check(oct(os.stat(A["socket_dir"]).st_mode & 0o777) == "0o755" and
          oct(os.stat(sockpath(A)).st_mode & 0o777) == "0o666", "socket dir 0755, socket 0666")
    check(ag.gpus()[0]["units_allocated"] == 5, "5 units allocated")

    # Quotas, and one allocation full does not touch the other.
    r = run([WIRE, "quota", sockpath(A)], ag.env)
    check(r.returncode == 0, "A: a process obtains exactly its quota, then -ENOMEM: " + r.stdout.strip() + r.stderr)
    check(wait_idle(ag, A["id"]) is not None, "A: memory back after the process exited")
    holder = subprocess.Popen([WIRE, "hold", sockpath(A), str(2 * UNIT)], env=ag.env,
                              stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "A: a process holds the whole quota")
    r = run([WIRE, "quota", sockpath(A)], ag.env)
    check("obtained 0 " in r.stdout, "A: a second process gets nothing: " + r.stdout.strip())
    r = run([WIRE, "quota", sockpath(B)], ag.env)
    check(r.returncode == 0, "B unaffected by A being full: " + r.stdout.strip() + r.stderr)

    # kill -9 returns the memory.
    a = ag.allocs()[A["id"]]
    check(a["parts"][0]["bytes_requested"] == 2 * UNIT and len(a["processes"]) == 1 and
          a["processes"][0]["pid"] == holder.pid, "A's usage and process listed")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    t = wait_idle(ag, A["id"])
    check(t is not None, "kill -9: memory back")
    if t is not None:
        print("info: kill -9: memory back after %d ms" % int(t * 1000), flush=True)

    r = run([WIRE, "big", sockpath(B)], ag.env)
    check(r.returncode == 0, "B: 2.5-chunk request is one block of 3 consecutive chunks" + r.stderr)
    r = run([WIRE, "concurrent", sockpath(B), "4"], ag.env)
    check(r.returncode == 0, "B: 4 processes allocating at once share exactly the quota: " +
          r.stdout.strip() + r.stderr)

    r = run([WIRE, "hostile", sockpath(A)], ag.env)
    check(r.returncode == 0, "A: hostile messages rejected" + ("" if r.returncode == 0 else ": " + r.stderr))
    r = run([WIRE, "ipccross", sockpath(A), sockpath(B)], ag.env)
    check(r.returncode == 0, "IPC tokens: not valid in another allocation, nor after the exporter left"
          + ("" if r.returncode == 0 else ": " + r.stderr))
    r = run([WIRE, "ipcforge", sockpath(A)], ag.env)
    check(r.returncode == 0, "IPC tokens: a reclaim resolves only its own live blocks"
          + ("" if r.returncode == 0 else ": " + r.stderr))
    r = run([WIRE, "flood", sockpath(A)], ag.env)
    check(r.returncode == 0, "A: a flood does not starve another process: " + r.stdout.strip() + r.stderr)

    # Control socket: garbage frames.
    ctl_raw(ag.sock, struct.pack("<I", 0xFFFFFFFF) + b"x" * 16)
    ctl_raw(ag.sock, struct.pack("<I", 0))
    ctl_raw(ag.sock, struct.pack("<I", 8) + b"\xff" * 8)
    ctl_raw(ag.sock, struct.pack("<I", 1000), expect_reply=False)
    check(ag.alive() and len(ag.gpus()) == 1, "control socket survives garbage frames")

    for x in (A, B):
        check(wait_idle(ag, x["id"]) is not None, "%s: accounting unchanged after all that" % x["id"])
    check(ag.gpus()[0]["chunks_free"] == pool_free - 5 * UNIT // CHUNK, "pool: only the quotas are out")

    hooked(ag, A, B)

    # Release with a live process: kept until it exits.
    holder = subprocess.Popen([WIRE, "hold", sockpath(A), str(MiB)], env=ag.env,
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    ag.ctl("release", A["id"])
    check(not os.path.exists(sockpath(A)), "released: socket gone")
    r = ag.ctl("create", dev(0), dev(1), ok=False)
    check(r.returncode == 1 and "released" in r.stderr, "released but busy: IDs not yet free")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    wait_for(lambda: A["id"] not in ag.allocs(), step=0.01)
    check(A["id"] not in ag.allocs() and not os.path.exists(A["socket_dir"]),
          "released allocation deleted when its last process exited")
    check(ag.gpus()[0]["units_allocated"] == 3, "its units are free again")

    # Watch sees a change.
    w = subprocess.Popen([CTL, "--socket", ag.sock, "--json", "watch"], stdout=subprocess.PIPE, text=True)
    first = json.loads(w.stdout.readline())
    C = ag.create([dev(7)])["allocation"]
    second = json.loads(w.stdout.readline())
    w.kill()
    w.wait()
    check(second["generation"] > first["generation"] and second["gpus"][0]["units_allocated"] == 4,
          "watch: a new GPU list on a change")

    # Restart: allocations come back from the checkpoint with the same sockets.
    ag.stop()
    check(not os.path.exists(sockpath(B)) and os.path.isdir(B["socket_dir"]),
          "shutdown: socket unlinked, directory kept (it is mounted into containers)")
    ag.start()
    after = ag.allocs()
    check(set(after) == {B["id"], C["id"]} and after[B["id"]]["device_ids"] == B["device_ids"]
          and after[B["id"]]["created_unix"] == B["created_unix"], "restart: allocations restored")
    r = run([WIRE, "quota", sockpath(B)], ag.env)
    check(r.returncode == 0, "restart: a process registers again and gets its quota")


def hooked(ag, A, B):
    ea, eb = hook_env(ag, A), hook_env(ag, B)
    r = run([CUDA, "meminfo"], ea)
    parts = r.stdout.split()
    check(r.returncode == 0 and len(parts) >= 6 and int(parts[3]) == 2 * UNIT and
          int(parts[1]) == 2 * UNIT, "hook: cuMemGetInfo reports A's numbers: " + r.stdout.strip() + r.stderr)
    r = run([CUDA, "fill"], ea)
    check(r.returncode == 0 and ("obtained %d MiB" % (2 * UNIT // MiB)) in r.stdout,
          "hook: A fills its quota then OOM: " + r.stdout.strip() + r.stderr)
    r = run([CUDA, "fill"], eb)
    check(r.returncode == 0 and ("obtained %d MiB" % (3 * UNIT // MiB)) in r.stdout,
          "hook: B fills its own quota: " + r.stdout.strip() + r.stderr)
    r = run([CUDA, "data", str(3 * CHUNK // MiB - 8)], eb)
    check(r.returncode == 0, "hook: a block over two chunks is contiguous, written and read whole: "
          + r.stdout.strip() + r.stderr)
    r = run([CUDA, "data", "8"], ea)
    check(r.returncode == 0, "hook: A sees none of B's data" + r.stderr)
    r = run([CUDA, "threads", "8"], eb)
    check(r.returncode == 0, "hook: 8 threads at once stay within the quota: " + r.stdout.strip() + r.stderr)
    # The application's own VMM allocations (cuMemCreate), made by the agent.
    q = 2 * UNIT // MiB
    pool0 = [(g["chunks_total"], g["chunks_free"]) for g in ag.gpus()]
    r = run([CUDA, "vmm", str(q), "2"], ea)
    check(r.returncode == 0 and ("vmm obtained %d MiB" % q) in r.stdout,
          "hook: 2 MiB cuMemCreate pieces fill the quota exactly, then OOM, mapped, written, read, released: "
          + r.stdout.strip() + r.stderr)
    check(wait_idle(ag, A["id"]) is not None, "hook: VMM allocations' chunks back after exit")
    r = run([CUDA, "vmm", str(q), "20"], ea)
    got = int(r.stdout.split()[2]) if r.returncode == 0 and r.stdout.startswith("vmm obtained") else 0
    check(r.returncode == 0 and q - 2 * CHUNK // MiB <= got <= q,
          "hook: 2 and 20 MiB cuMemCreate pieces up to the quota, then OOM: " + r.stdout.strip() + r.stderr)
    check(wait_idle(ag, A["id"]) is not None, "hook: mixed VMM pieces' chunks back after exit")
    r = run([CUDA, "capture"], ea)
    check(r.returncode == 0, "hook: cuMemAllocAsync/cuMemFreeAsync inside a stream capture keep it valid: "
          + r.stdout.strip() + r.stderr)
    r = run([CUDA, "vmm-export"], ea)
    check(r.returncode == 0, "hook: a cuMemCreate allocation exports as a POSIX fd that imports to the same memory: "
          + r.stdout.strip() + r.stderr)
    check(wait_idle(ag, A["id"]) is not None, "hook: exported VMM allocation's chunks back after exit")
    check([(g["chunks_total"], g["chunks_free"]) for g in ag.gpus()] == pool0,
          "hook: every chunk is back in the pool after the VMM runs")
    ipc(ag, A, ea, eb)
    holder = subprocess.Popen([CUDA, "hold", "16"], env=ea, stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "hook: a hooked process holds memory")
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    t = wait_idle(ag, A["id"])
    check(t is not None, "hook: kill -9 returns the memory")
    if t is not None:
        print("info: hook: kill -9: memory back after %d ms" % int(t * 1000), flush=True)
    for x in (A, B):
        check(wait_idle(ag, x["id"]) is not None, "hook: %s idle after the hooked runs" % x["id"])


def ipc(ag, A, ea, eb):
    """CUDA IPC between two processes of allocation A, brokered by the agent."""
    mib = CHUNK // MiB + 8  # over two chunks
    exp = subprocess.Popen([CUDA, "ipc-export", str(mib)], env=ea, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        line = exp.stdout.readline().split()
        check(len(line) == 2 and line[0] == "handle", "ipc: exporter gets a handle: %s" % line)
        if len(line) != 2:
            return
        hx = line[1]

        def say(cmd):
            exp.stdin.write(cmd + "\n")
            exp.stdin.flush()
            return exp.stdout.readline().strip()
        r = run([CUDA, "ipc-import", hx, str(mib)], ea)
        check(r.returncode == 0, "ipc: a sibling opens the handle, reads, writes, closes: "
              + r.stdout.strip() + r.stderr)
        check(say("check") == "seen-ok", "ipc: the exporter sees the sibling's writes, its other block untouched")
        r = run([CUDA, "ipc-open", hx], eb)
        check(r.returncode == 0, "ipc: the handle is refused in another allocation: " + r.stdout.strip() + r.stderr)
        forged = hx[:20] + ("0" if hx[20] != "0" else "1") + hx[21:]
        r = run([CUDA, "ipc-open", forged], ea)
        check(r.returncode == 0, "ipc: a forged token is refused: " + r.stdout.strip() + r.stderr)
        check(say("free") == "freed", "ipc: the exporter frees the block")
        r = run([CUDA, "ipc-open", hx], ea)
        check(r.returncode == 0, "ipc: the handle of a freed block is refused: " + r.stdout.strip() + r.stderr)
        exp.stdin.write("exit\n")
        exp.stdin.flush()
        check(exp.wait(timeout=30) == 0, "ipc: exporter exits 0")
    finally:
        if exp.poll() is None:
            exp.kill()
            exp.wait()
    # A handle dies with its process.
    exp = subprocess.Popen([CUDA, "ipc-export", "4"], env=ea, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    line = exp.stdout.readline().split()
    exp.stdin.write("exit\n")
    exp.stdin.flush()
    exp.wait(timeout=30)
    if len(line) == 2:
        res = []

        def refused():  # the agent sees the exit a moment later
            res[:] = [run([CUDA, "ipc-open", line[1]], ea)]
            return res[0].returncode == 0
        wait_for(refused, step=0.05)
        r = res[0]
        check(r.returncode == 0, "ipc: the handle of an exited process is refused: " + r.stdout.strip())
    check(wait_idle(ag, A["id"]) is not None, "ipc: A idle after the IPC runs")


if __name__ == "__main__":
    main()
