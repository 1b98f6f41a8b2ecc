#!/usr/bin/python3
"""A manual install: gshare-agent creates the missing directories above its
socket paths (agentSocket, socketRoot, stateDir) with mode 0755 whatever the
umask, serves, and refuses a path through a file with a message naming it."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import test_e2e as e2e  # noqa: E402

check = e2e.check


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.FAKE)
    tmp = tempfile.mkdtemp(prefix="gshare-dirs-")
    sock = os.path.join(tmp, "run", "gshare", "agent.sock")
    root = os.path.join(tmp, "run2", "a", "alloc")
    state = os.path.join(tmp, "var", "lib", "gshare")
    env = dict(os.environ, GSHARE_FAKECUDA_STATE=os.path.join(tmp, "fakecuda.state"),
               GSHARE_FAKECUDA_MEM="1Gi", GSHARE_FAKECUDA_DEVICES="1")
    args = [e2e.AGENT, "--cuda-library", e2e.FAKE, "--socket", sock, "--socket-root", root,
            "--state-dir", state, "--chunk-size", "32Mi", "--unit-size", "64Mi", "--reserve", "128Mi"]
    log = open(os.path.join(tmp, "agent.log"), "w+")
    old = os.umask(0o077)
    p = subprocess.Popen(args, env=env, stdout=log, stderr=log)
    os.umask(old)
    try:
        ok = False
        for _ in range(500):
            if os.path.exists(sock) or p.poll() is not None:
                break
            e2e.time.sleep(0.02)
        ok = os.path.exists(sock) and p.poll() is None
        check(ok, "agent serves with the directories of its socket paths missing")
        for d in ("run", "run/gshare", "run2", "run2/a", "var", "var/lib"):
            m = stat.S_IMODE(os.stat(os.path.join(tmp, d)).st_mode) if os.path.isdir(os.path.join(tmp, d)) else None
            check(m == 0o755, "created %s with mode 0755 under umask 077 (%s)" % (d, oct(m) if m is not None else "missing"))
        if ok:
            gpus = subprocess.run([e2e.CTL, "--socket", sock, "--json", "gpus"], capture_output=True,
                                  text=True, timeout=20).stdout
            uuid = json.loads(gpus)["gpus"][0]["uuid"]
            r = subprocess.run([e2e.CTL, "--socket", sock, "--json", "create", uuid + "-u0"],
                               capture_output=True, text=True, timeout=20)
            check(r.returncode == 0 and os.path.isdir(root), "an allocation (its directory under socketRoot) is created")
    finally:
        if p.poll() is None:
            p.terminate()
            p.wait(20)
    # A component that is a file: a clear error naming it, exit 1.
    with open(os.path.join(tmp, "afile"), "w") as f:
        f.write("x")
    bad = list(args)
    bad[bad.index("--socket") + 1] = os.path.join(tmp, "afile", "gshare", "agent.sock")
    r = subprocess.run(bad, env=env, capture_output=True, text=True, timeout=30)
    want = "%s exists and is not a directory (for agentSocket" % os.path.join(tmp, "afile")
    if not check(r.returncode == 1 and want in r.stderr, "a file in the way: refused, naming it"):
        print(r.returncode, r.stderr[-500:])
    log.seek(0)
    if e2e.failures:
        print(log.read())
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed")


if __name__ == "__main__":
    main()
