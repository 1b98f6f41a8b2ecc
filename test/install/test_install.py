#!/usr/bin/python3
"""The DaemonSet as shipped, run on a stand-in node (needs root).

Reads manifests/gshare.yaml (test_chart.py checks it is the chart rendered
with its defaults) and runs its containers the way a kubelet and container
runtime would: each in a private mount namespace (unshare -m), chrooted into
an overlay over the image's root filesystem ($B/image/rootfs: the Debian base
of `make image` plus `make install`), with exactly the manifest's command,
env and volume mounts; hostPath volumes come from a stand-in host directory
H, the configMap volume from the ConfigMap's data.  The only additions are
what the NVIDIA container runtime and the GPU would provide: the fake driver
(test/fakecuda) mounted as libcuda.so.1 and its state directory.

Checks: the init container on a fresh node installs the hook and the preload
file; run again it changes nothing; the agent and the plugin start from the
mounted config, the readiness probe passes and the plugin registers with a
kubelet stand-in; a workload container built from the plugin's Allocate
response (mounts, env) loads the hook through /etc/ld.so.preload and is held
to its units; an upgrade of the hook (the init container of a newer image)
while that workload runs replaces the files by rename, leaving the running
workload's hook intact, and a new workload gets the new hook; the broken
layout of old (the host directory mounted over the image's hook directory)
fails with a message that says so.
"""
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plugin"))
import gsproto  # noqa: E402
import kubelet_standin  # noqa: E402

import grpc  # noqa: E402

B = os.environ.get("B", "build")
REPO = gsproto.REPO
BD = os.path.join(REPO, B)
IMAGE = os.path.join(BD, "image", "rootfs")
FAKE = os.path.join(BD, "test", "fakecuda", "libcuda.so.1")
CUDA = os.path.join(BD, "test", "e2e", "e2e_cuda")
MANIFEST = os.path.join(REPO, "manifests", "gshare.yaml")
IMAGE_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GiB = 1 << 30
MiB = 1 << 20

failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not detail else "  [%s]" % (detail,)), flush=True)
    if not cond:
        failures.append(what)
    return cond


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def in_image(path):
    """path inside the container with the image's symlinks resolved inside
    the image (as runtimes do: /var/run -> /run must not lead to the host's
    /run)."""
    parts = [p for p in path.split("/") if p]
    out = []
    hops = 0
    while parts:
        c = parts.pop(0)
        if c == "..":
            out = out[:-1]
            continue
        if c == ".":
            continue
        full = os.path.join(IMAGE, *(out + [c]))
        if os.path.islink(full):
            hops += 1
            if hops > 40:
                raise SystemExit("%s: too many symlinks in the image" % path)
            target = os.readlink(full)
            if target.startswith("/"):
                out = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        out.append(c)
    return "/" + "/".join(out)


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


class Node:
    """The stand-in node: host directory H, the containers started on it."""

    def __init__(self, tmp, daemonset, configmap):
        self.tmp = tmp
        self.H = os.path.join(tmp, "host")
        self.ds = daemonset
        self.spec = daemonset["spec"]["template"]["spec"]
        self.cm = configmap
        self.procs = []
        self.n = 0
        os.makedirs(self.H)
        # The kubelet's own directory exists on every node (type: Directory).
        os.makedirs(self.host("/var/lib/kubelet/device-plugins"))
        os.makedirs(self.host("/fakegpu"))
        # configMap volume: the kubelet writes the keys as files.
        self.cmdir = os.path.join(tmp, "configmap")
        os.makedirs(self.cmdir)
        for k, v in configmap["data"].items():
            with open(os.path.join(self.cmdir, k), "w") as f:
                f.write(v)

    def host(self, path):
        return os.path.join(self.H, path.lstrip("/"))

    def volume_source(self, name):
        for v in self.spec["volumes"]:
            if v["name"] != name:
                continue
            if "configMap" in v:
                if not check(v["configMap"]["name"] == self.cm["metadata"]["name"],
                             "volume %s names the ConfigMap %s" % (name, self.cm["metadata"]["name"])):
                    raise SystemExit(1)
                return self.cmdir
            hp = v["hostPath"]
            src = self.host(hp["path"])
            if hp.get("type") == "DirectoryOrCreate":
                os.makedirs(src, mode=0o755, exist_ok=True)
            elif hp.get("type") == "Directory" and not os.path.isdir(src):
                raise SystemExit("hostPath %s (type Directory) is missing on the node" % hp["path"])
            return src
        raise SystemExit("volume %s is not declared" % name)

    def container(self, name):
        for c in self.spec.get("initContainers", []) + self.spec["containers"]:
            if c["name"] == name:
                return c
        raise SystemExit("no container %s in the DaemonSet" % name)

    def env_of(self, c):
        env = [IMAGE_PATH]
        for e in c.get("env", []):
            if "value" in e:
                env.append("%s=%s" % (e["name"], e["value"]))
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                env.append("%s=%s" % (e["name"], "testnode"))
            else:
                raise SystemExit("env %s: unsupported source %s" % (e["name"], e))
        return env

    def script(self, mounts, env, argv, root_over=()):
        """The shell script that sets up one container's mount namespace and
        execs its command: an overlay root, the mounts [(src, dst, ro)],
        /proc (hostPID), /dev, a /tmp."""
        self.n += 1
        base = os.path.join(self.tmp, "ctr%d" % self.n)
        R = os.path.join(base, "root")
        lines = ["set -e", "mkdir -p %s %s/upper %s/work" % (q(R), q(base), q(base)),
                 "mount -t overlay overlay -o lowerdir=%s,upperdir=%s/upper,workdir=%s/work %s"
                 % (IMAGE, base, base, q(R)),
                 "mount --rbind /proc %s/proc" % q(R), "mount --rbind /dev %s/dev" % q(R),
                 "mount -t tmpfs tmpfs %s/tmp" % q(R)]
        for src, dst, ro in list(root_over) + list(mounts):
            t = R + in_image(dst)
            if os.path.isdir(src):
                lines.append("mkdir -p %s" % q(t))
            else:
                lines.append("mkdir -p %s && touch %s" % (q(os.path.dirname(t)), q(t)))
            lines.append("mount --bind %s %s" % (q(src), q(t)))
            if ro:
                lines.append("mount -o remount,bind,ro %s" % q(t))
        lines.append("exec chroot %s /usr/bin/env -i %s %s" % (q(R), " ".join(q(e) for e in env),
                                                               " ".join(q(a) for a in argv)))
        return "\n".join(lines) + "\n"

    def gpu_extras(self):
        """What the NVIDIA runtime and the GPU would add: the driver library
        and (fake driver only) its shared state."""
        mounts = [(FAKE, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", True),
                  (self.host("/fakegpu"), "/run/fakegpu", False)]
        env = ["GSHARE_FAKECUDA_STATE=/run/fakegpu/state", "GSHARE_FAKECUDA_MEM=4Gi",
               "GSHARE_FAKECUDA_DEVICES=1"]
        return mounts, env

    def run_container(self, name, gpu=False, wait=True, root_over=(), log=None):
        c = self.container(name)
        mounts = [(self.volume_source(m["name"]), m["mountPath"], bool(m.get("readOnly")))
                  for m in c.get("volumeMounts", [])]
        env = self.env_of(c)
        if gpu:
            gm, ge = self.gpu_extras()
            mounts += gm
            env += ge
        argv = list(c["command"]) + list(c.get("args", []))
        return self.start(self.script(mounts, env, argv, root_over), name, wait, log)

    def start(self, script, name, wait, log=None):
        cmd = ["unshare", "-m", "--propagation", "private", "bash", "-c", script]
        if wait:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        out = log or open(os.path.join(self.tmp, "%s.log" % name), "w+")
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        p.logfile = out
        self.procs.append(p)
        return p

    def exec_in(self, p, argv, env=(IMAGE_PATH,)):
        """kubectl exec: argv in the container of process p."""
        return subprocess.run(["nsenter", "-t", str(p.pid), "-m", "-r", "-w", "/usr/bin/env", "-i"]
                              + list(env) + list(argv), capture_output=True, text=True, timeout=30)

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def logtext(p):
    p.logfile.flush()
    with open(p.logfile.name) as f:
        return f.read()


def wait_for(pred, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def load_manifest():
    with open(MANIFEST) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    ds = [d for d in docs if d["kind"] == "DaemonSet"][0]
    cm = [d for d in docs if d["kind"] == "ConfigMap"][0]
    return ds, cm


def main():
    if os.geteuid() != 0:
        raise SystemExit("test_install.py needs root (mount namespaces, overlay, chroot)")
    for f in (IMAGE + "/usr/local/bin/gshare-install-hook", FAKE, CUDA):
        if not os.path.exists(f):
            raise SystemExit("missing %s: run make test (it builds the image tree)" % f)
    tmp = tempfile.mkdtemp(prefix="gshare-install-")
    ns = gsproto.load(tmp)
    ds, cm = load_manifest()
    node = Node(tmp, ds, cm)
    kubelet = None
    try:
        kubelet = kubelet_standin.Kubelet(ns, node.host("/var/lib/kubelet/device-plugins"))
        kubelet.start()
        body(node, ns, kubelet)
    finally:
        node.stop_all()
        if kubelet and kubelet.server:
            kubelet.stop()
        if failures:
            for p in node.procs:
                print("---- %s ----\n%s" % (p.logfile.name, logtext(p)[-4000:]))
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed")


def body(node, ns, kubelet):
    cfg = yaml.safe_load(node.cm["data"]["config.yaml"])
    hook_host = node.host(cfg["hookPath"])
    preload_host = node.host(cfg["preloadPath"])
    image_hook = IMAGE + "/usr/local/lib/gshare/libgshare.so"
    libdir = os.path.dirname(hook_host)

    # ---- init container, fresh node
    check(not os.path.exists(libdir), "fresh node: no hook directory yet")
    r = node.run_container("install-hook")
    check(r.returncode == 0, "init container on a fresh node exits 0", r.stdout + r.stderr)
    check(os.path.isfile(hook_host) and sha(hook_host) == sha(image_hook),
          "fresh node: the image's hook is at hookPath %s" % cfg["hookPath"])
    check(os.path.isfile(preload_host) and open(preload_host).read() == "/usr/lib/gshare/libgshare.so\n",
          "fresh node: preloadPath names the hook's path inside containers")
    check(all(os.stat(p).st_mode & 0o777 == 0o644 for p in (hook_host, preload_host) if os.path.exists(p)),
          "hook and preload file are mode 0644")
    check(sorted(os.listdir(libdir)) == ["ld.so.preload", "libgshare.so"], "no temporary files left",
          os.listdir(libdir))
    ino = os.stat(hook_host).st_ino
    with open(os.path.join(libdir, ".libgshare.so.Ab12Cd"), "w") as f:
        f.write("left by an install that was killed")
    r = node.run_container("install-hook")
    check(r.returncode == 0 and "is current" in r.stdout and os.stat(hook_host).st_ino == ino,
          "init container again: files current, left alone", r.stdout + r.stderr)
    check(sorted(os.listdir(libdir)) == ["ld.so.preload", "libgshare.so"],
          "init container again: a killed run's temporary file removed", os.listdir(libdir))

    # ---- agent and plugin from the mounted config
    agent = node.run_container("agent", gpu=True, wait=False)
    agent_sock = node.host(cfg["agentSocket"])
    check(wait_for(lambda: os.path.exists(agent_sock) or agent.poll() is not None, 20) and agent.poll() is None,
          "agent starts from /etc/gshare/config.yaml and serves %s" % cfg["agentSocket"], logtext(agent)[-2000:])
    # The probe asks this container's own agent (its ready file), not the
    # node's shared socket path, which an upgrade's other pod may serve.
    probe = node.container("agent")["readinessProbe"]["exec"]["command"]
    r = node.exec_in(agent, probe)
    check(r.returncode == 0, "agent readiness probe passes: %s" % " ".join(probe), r.stdout + r.stderr)
    r = node.exec_in(agent, probe[:-1] + [probe[-1] + ".missing"])
    check(r.returncode != 0 and "not ready" in r.stderr, "the probe fails without the ready file", r.stderr)
    plugin = node.run_container("device-plugin", wait=False)
    t, reg = kubelet.wait_register(10)
    check(reg is not None and reg.resource_name == cfg["resourceName"] and reg.endpoint == "gshare.sock",
          "device plugin registers %s with the kubelet" % cfg["resourceName"], logtext(plugin)[-2000:])
    ch = grpc.insecure_channel("unix:" + node.host(cfg["kubeletDir"] + "/gshare.sock"))
    stub = ns.dp_grpc.DevicePluginStub(ch)
    st = kubelet_standin.Stream(stub, ns)
    m = st.next(10)
    ids = [d.ID for d in m.devices] if m is not None and not isinstance(m, Exception) else []
    check(len(ids) == 3 and all(d.health == "Healthy" for d in m.devices),
          "ListAndWatch: 3 healthy units (4 GiB fake GPU, 1 GiB reserve, 1 GiB units)", m)
    if len(ids) < 3:
        return
    resp = stub.Allocate(ns.dp.AllocateRequest(container_requests=[
        ns.dp.ContainerAllocateRequest(devices_ids=ids[:1])]), timeout=10).container_responses[0]
    mounts = [(node.host(mm.host_path), mm.container_path, mm.read_only) for mm in resp.mounts]
    by_ctr = {c: h for h, c, _ in mounts}
    check(by_ctr.get("/usr/lib/gshare/libgshare.so") == hook_host and
          by_ctr.get("/etc/ld.so.preload") == preload_host,
          "Allocate mounts the installed hook and preload file", by_ctr)
    check(all(os.path.exists(h) for h, _, _ in mounts), "every host path of the Allocate mounts exists on the node",
          [h for h, _, _ in mounts if not os.path.exists(h)])

    # ---- a workload container as the kubelet would make it from Allocate
    gm, ge = node.gpu_extras()
    wenv = [IMAGE_PATH] + ["%s=%s" % kv for kv in resp.envs.items()] + ge
    wmounts = mounts + gm + [(CUDA, "/usr/local/bin/e2e_cuda", True)]

    def workload(argv, wait=True):
        return node.start(node.script(wmounts, wenv, ["/usr/local/bin/e2e_cuda"] + argv), "workload", wait)

    r = workload(["meminfo"])
    total = int(r.stdout.split()[-1]) if r.returncode == 0 and r.stdout.split() else -1
    check(total == GiB, "workload: the hook loaded from /etc/ld.so.preload reports its 1 GiB limit",
          r.stdout + r.stderr)
    r = workload(["fill", "64"])
    check(r.returncode == 0 and "limit 1024 MiB" in r.stdout, "workload: held to its 1 GiB", r.stdout + r.stderr)
    holder = workload(["hold", "64"], wait=False)
    check(wait_for(lambda: "held" in logtext(holder), 20), "workload holding 64 MiB runs", logtext(holder))

    # ---- upgrade while it runs: a newer image's init container
    old_sha = sha(hook_host)
    old_fd = os.open(hook_host, os.O_RDONLY | os.O_CLOEXEC)
    newer = os.path.join(node.tmp, "libgshare-newer.so")
    shutil.copyfile(image_hook, newer)
    with open(newer, "ab") as f:
        f.write(b"\0" * 4096 + b"gshare test: a newer hook")  # still a loadable ELF
    r = node.run_container("install-hook", root_over=[(newer, "/usr/local/lib/gshare/libgshare.so", True)])
    check(r.returncode == 0 and "installed" in r.stdout, "upgrade: init container of the newer image exits 0",
          r.stdout + r.stderr)
    check(sha(hook_host) == sha(newer), "upgrade: hookPath now holds the newer hook")
    check(os.stat(hook_host).st_ino != ino, "upgrade: replaced by rename (a new inode)")
    old_now = hashlib.sha256(os.pread(old_fd, 64 << 20, 0)).hexdigest()
    os.close(old_fd)
    check(old_now == old_sha, "upgrade: the old hook file is untouched (not rewritten in place)")
    check(holder.poll() is None, "upgrade: the running workload keeps running")
    seen = os.path.join("/proc", str(holder.pid), "root", "usr/lib/gshare/libgshare.so")
    check(os.path.exists(seen) and sha(seen) == old_sha, "upgrade: the running workload still sees its old hook")
    check(sorted(os.listdir(libdir)) == ["ld.so.preload", "libgshare.so"], "upgrade: no temporary files left",
          os.listdir(libdir))
    holder.send_signal(signal.SIGTERM)
    holder.wait(10)
    r = workload(["meminfo"])
    check(r.returncode == 0 and r.stdout.split()[-1:] == [str(GiB)],
          "after the upgrade a new workload runs with the newer hook", r.stdout + r.stderr)

    # ---- the layout of old: host directory mounted over the image's
    lib = node.volume_source("lib")
    script = node.script([(lib, "/usr/local/lib/gshare", False)], [IMAGE_PATH],
                         ["/usr/local/bin/gshare-install-hook", "/usr/local/lib/gshare"])
    r = node.start(script, "old-layout", True)
    check(r.returncode != 0 and "mount the host directory elsewhere" in r.stderr,
          "host dir mounted over the image's hook dir: refused, saying why",
          r.stdout + r.stderr)
    check(sha(hook_host) == sha(newer), "refused install changed nothing")

    st.cancel()
    for name, p in (("device-plugin", plugin), ("agent", agent)):
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        check(rc == 0, "%s container stops with exit 0 on SIGTERM" % name, rc)


if __name__ == "__main__":
    main()
