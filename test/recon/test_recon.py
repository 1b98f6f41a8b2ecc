#!/usr/bin/python3
"""End-to-end test of the agent's reconciler (agent/services/gs_recon.h).

Serves a stand-in for the kubelet's PodResourcesLister (Python grpcio, stubs
generated from proto/podresources_v1.proto at test time) whose answer the
test sets, runs the real gshare-agent on the fake driver with a 0.2 s
reconcile interval and a 1 s reclaim grace, and checks with gsharectl that:
allocations held by a container record it; one no container holds is
released after the grace and not before; held ones are kept; a PodResources
outage (error status, then no server at all) releases nothing; a reclaimed
allocation with a live process is deleted only when that process exits; an
allocation restored from the checkpoint is reclaimed; an upgrade from a v2
checkpoint and claims file keeps every allocation and claim (v3 lines), the
claim's never reclaimed; reconcileInterval 0
turns the reconciler off; bad config values are refused.

No check depends on how fast the machine is: "not before the grace" is timed
from before the event that starts the grace (so a slow test only makes it
weaker), and the waits for a release end on the event, up to e2e.HANG.
"""
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plugin"))
import gsproto  # noqa: E402
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import test_e2e as e2e  # noqa: E402

import grpc  # noqa: E402

B = os.environ.get("B", "build")
BD = os.path.join(gsproto.REPO, B)
AGENT = os.path.join(BD, "gshare-agent")
CTL = os.path.join(BD, "gsharectl")
WIRE = os.path.join(BD, "test/e2e/e2e_wire")
FAKE = os.path.join(BD, "test/fakecuda/libcuda.so.1")
RES = "gshare.io/gpumem"
MiB = 1 << 20
GRACE = 1.0
INTERVAL = 0.2

check = e2e.check
failures = e2e.failures


class PodResources:
    """The kubelet's PodResourcesLister: List answers self.pods, a list of
    (namespace, pod, container, [(resource, [ids]), ...]); with self.fail
    set it answers UNAVAILABLE."""

    def __init__(self, ns, path):
        self.ns = ns
        self.path = path
        self.pods = []
        self.fail = False
        self.calls = 0
        self.lock = threading.Lock()
        self.server = None

    def set(self, pods=None, fail=None):
        with self.lock:
            if pods is not None:
                self.pods = pods
            if fail is not None:
                self.fail = fail

    def start(self):
        pr = self.ns.pr
        outer = self

        def list_(request, context):
            with outer.lock:
                outer.calls += 1
                if outer.fail:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet stand-in: failing on purpose")
                pods = list(outer.pods)
            rep = pr.ListPodResourcesResponse()
            for nsname, pod, ctr, devs in pods:
                p = rep.pod_resources.add(name=pod, namespace=nsname)
                c = p.containers.add(name=ctr)
                for res, ids in devs:
                    c.devices.add(resource_name=res, device_ids=ids)
            return rep

        handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
            "List": grpc.unary_unary_rpc_method_handler(
                list_, request_deserializer=pr.ListPodResourcesRequest.FromString,
                response_serializer=pr.ListPodResourcesResponse.SerializeToString)})
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix:" + self.path)
        self.server.start()

    def stop(self):
        self.server.stop(0).wait()
        self.server = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    def ncalls(self):
        with self.lock:
            return self.calls


def kube_setup(prefix, api_port, extra):
    """For tests of the agent with a kubelet and an API server (Events,
    pod annotations): a temporary directory, the protos, a PodResources
    stand-in started, a service account token, and an agent config naming
    them and the API server on api_port, plus the YAML lines extra.
    Returns (tmp, ns, kubelet, conf)."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    ns = gsproto.load(tmp)
    kubelet = PodResources(ns, os.path.join(tmp, "podres.sock"))
    kubelet.start()
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("sekrit-token\n")
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write("podResourcesSocket: %s\nreconcileInterval: 200ms\nreclaimGrace: 60s\npodWatch: off\n"
                "apiServer: http://127.0.0.1:%d\napiTokenFile: %s\n%s" % (kubelet.path, api_port, token, extra))
    return tmp, ns, kubelet, conf


class Agent(e2e.Agent):
    """e2e.Agent whose ctl() answers gsharectl's output and create() the
    allocation itself."""

    def ctl(self, *args):
        return super().ctl(*args).stdout

    def create(self, ids):
        return super().create(ids)["allocation"]


def wait_for(pred, limit=e2e.HANG):
    """Seconds until pred() holds, or None after limit seconds (a hang)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if pred():
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def main():
    e2e.need(AGENT, CTL, WIRE, FAKE)
    tmp = tempfile.mkdtemp(prefix="gshare-recon-")
    ns = gsproto.load(tmp)
    kubelet = PodResources(ns, os.path.join(tmp, "podres.sock"))
    kubelet.start()
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write("podResourcesSocket: %s\nreconcileInterval: 200ms\nreclaimGrace: %gs\n"
                % (kubelet.path, GRACE))
    ag = Agent(tmp, ["--config", conf])
    ag.start()
    try:
        body(ag, kubelet, tmp)
    finally:
        ag.stop()
        if kubelet.server:
            kubelet.stop()
    off_and_config(tmp)
    e2e.report(ag, tmp)


def body(ag, kubelet, tmp):
    uuid = json.loads(ag.ctl("gpus"))["gpus"][0]["uuid"]

    def dev(u):
        return "%s-u%d" % (uuid, u)

    t_created = time.monotonic()  # before: the grace starts after it
    A = ag.create([dev(0), dev(1), dev(2)])["id"]
    Bid = ag.create([dev(3)])["id"]
    C = ag.create([dev(4)])["id"]
    D = ag.create([dev(5)])["id"]
    # A's IDs come in two ContainerDevices (the kubelet sends one per NUMA
    # node); D's IDs appear only under another resource name.
    pods = [("ns1", "pod-a", "main", [(RES, [dev(1)]), (RES, [dev(0), dev(2)])]),
            ("ns2", "pod-b", "worker", [(RES, [dev(3)]), ("example.com/other", ["x"])]),
            ("ns3", "pod-d", "c", [("example.com/other", [dev(5)])])]
    kubelet.set(pods=pods)

    t = wait_for(lambda: ag.allocs()[A]["pod_name"] == "pod-a")
    check(t is not None, "A records its pod after a List")
    al = ag.allocs()
    check(al[A]["pod_namespace"] == "ns1" and al[A]["container_name"] == "main",
          "A: namespace ns1, container main (IDs split over two ContainerDevices)")
    check(al[Bid]["pod_namespace"] == "ns2" and al[Bid]["pod_name"] == "pod-b" and
          al[Bid]["container_name"] == "worker", "B records ns2/pod-b/worker")
    check(al[C]["pod_name"] == "" and al[D]["pod_name"] == "", "C, D: no pod")
    check(time.monotonic() - t_created >= GRACE - 0.1 or (C in al and D in al),
          "C, D: not released before the grace")

    t = wait_for(lambda: C not in ag.allocs() and D not in ag.allocs())
    waited = time.monotonic() - t_created
    check(t is not None and waited >= GRACE,
          "C, D (no holder, other resource only) released after the grace (%.2f s)" % waited)
    log = ag.logtext()
    check("reclaiming allocation %s" % C in log, "log names the reclaimed allocation C")
    al = ag.allocs()
    check(A in al and Bid in al, "held allocations A, B kept")
    check(ag.units_allocated() == 4, "units of C, D free again")

    # B's pod goes away: B is released a grace later, naming its last pod.
    t_drop = time.monotonic()
    kubelet.set(pods=pods[:1])
    t = wait_for(lambda: Bid not in ag.allocs())
    waited = time.monotonic() - t_drop
    check(t is not None and waited >= GRACE, "B released %.2f s after its pod left" % waited)
    check("reclaiming allocation %s: pod ns2/pod-b (container worker)" % Bid in ag.logtext(),
          "log names B and the pod it belonged to")
    check(A in ag.allocs(), "A still held, kept")

    # Outage: first the kubelet answers UNAVAILABLE, then it is gone.  Even
    # with A reported by no one afterwards, nothing is released meanwhile.
    n0 = kubelet.ncalls()
    kubelet.set(fail=True)
    time.sleep(2 * GRACE + 0.5)
    # It went on asking (event, not a count in a time): at least 4 failed
    # Lists, which spans more than the grace at its 0.2 s interval.
    check(wait_for(lambda: kubelet.ncalls() >= n0 + 4) is not None,
          "the agent kept polling (%d Lists)" % (kubelet.ncalls() - n0))
    check(A in ag.allocs(), "PodResources failing: A kept")
    kubelet.stop()
    time.sleep(2 * GRACE + 0.5)
    check(A in ag.allocs(), "PodResources gone: A kept")
    log = ag.logtext()
    check(log.count("PodResources List on") == 1,
          "one log line for the failure streak (%d)" % log.count("PodResources List on"))
    kubelet.set(pods=pods[:1], fail=False)
    kubelet.start()
    check(wait_for(lambda: "answers again" in ag.logtext()) is not None,
          "recovery logged")
    time.sleep(2 * GRACE)
    check(A in ag.allocs(), "after the outage A, still held, is kept")

    # A live process: the reclaimed allocation is kept until it exits.
    E = ag.create([dev(8)])
    sock = os.path.join(E["socket_dir"], "agent.sock")
    holder = subprocess.Popen([WIRE, "hold", sock, str(MiB)], env=ag.env,
                              stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "E: a process holds memory")
    kubelet.set(pods=pods[:1] + [("ns5", "pod-e", "c", [(RES, [dev(8)])])])
    check(wait_for(lambda: ag.allocs()[E["id"]]["pod_name"] == "pod-e") is not None,
          "E records pod-e")
    kubelet.set(pods=pods[:1])
    t = wait_for(lambda: "reclaiming allocation %s" % E["id"] in ag.logtext())
    check(t is not None, "E reclaimed after its pod left")
    wait_for(lambda: not os.path.exists(sock))
    time.sleep(0.5)  # time to delete E if it wrongly did
    al = ag.allocs()
    check(E["id"] in al and len(al[E["id"]]["processes"]) == 1 and not os.path.exists(sock),
          "E with a live process: kept, socket closed")
    check(ag.units_allocated() == 4, "E's unit still taken while its process lives")
    holder.kill()
    holder.wait()
    t = wait_for(lambda: E["id"] not in ag.allocs())
    check(t is not None, "E deleted once its process exited")
    check(ag.units_allocated() == 3, "E's unit free again")

    # Restart: an allocation restored from the checkpoint that no pod holds
    # is reclaimed; the held one survives.
    F = ag.create([dev(9)])["id"]
    ag.stop()
    t_restart = time.monotonic()  # before the start: the grace starts after it
    ag.start()
    al = ag.allocs()
    check(A in al and F in al, "A and F restored from the checkpoint")
    t = wait_for(lambda: F not in ag.allocs())
    waited = time.monotonic() - t_restart
    check(t is not None and waited >= GRACE,
          "restored, unheld F reclaimed a grace after the restart (%.2f s)" % waited)
    check(A in ag.allocs() and ag.allocs()[A]["pod_name"] == "pod-a", "restored, held A kept")
    upgrade_from_v2(ag, tmp, dev, uuid)


def upgrade_from_v2(ag, tmp, dev, uuid):
    """An agent of checkpoint v2 (v1 lines too) and a claims file is
    replaced by this one: every allocation and every claim is kept, as v3
    lines, and the claims file goes once the checkpoint is written; the
    claim's allocation is never reclaimed, the device plugin's are."""
    state = os.path.join(tmp, "state")
    ckpt, claims = os.path.join(state, "allocations"), os.path.join(state, "claims")
    claim, gone = "5eed0000-0000-4000-8000-000000000001", "5eed0000-0000-4000-8000-000000000002"
    G, H, K = "1111111111111111", "2222222222222222", "3333333333333333"
    ag.stop()
    lines = [ln for ln in open(ckpt).read().splitlines() if ln and not ln.startswith("#")]
    check(len(lines) == 1 and " claim " not in lines[0], "A's line, a device plugin's, as v2 wrote it")
    with open(ckpt, "w") as f:
        f.write("# gshare-agent allocations v2\n" + lines[0] + "\n")
        f.write("%s 1700000000 1 %s dir=%s-0000abcd\n" % (G, dev(4), G))
        f.write("%s 1700000000 1 %s\n" % (H, dev(5)))  # v1: the directory is the id
        f.write("%s 1700000000 2 %s %s dir=%s-0000abce\n" % (K, dev(7), dev(6), K))
    with open(claims, "w") as f:
        f.write("# gshare-agent claims v1\n%s %s %s 2 team shared\n" % (claim, K, uuid))
        f.write("%s 4444444444444444 %s 1 team gone\n" % (gone, uuid))  # its allocation never made
    t_restart = time.monotonic()
    ag.start()
    al = ag.allocs()
    by_ids = {tuple(a["device_ids"]): a for a in al.values()}
    k = al.get(K, {})
    check(k.get("claim_uid") == claim and k.get("claim") == "shared" and k.get("claim_namespace") == "team"
          and k["parts"][0]["units"] == 2 and k["socket_dir"].endswith("/%s-0000abce" % K)
          and sorted(k["device_ids"]) == [dev(6), dev(7)],
          "v2 line + claims file: the claim's allocation, its id, units and socket dir kept")
    check((dev(4),) in by_ids and by_ids[(dev(4),)]["socket_dir"].endswith("/%s-0000abcd" % G)
          and (dev(5),) in by_ids and by_ids[(dev(5),)]["socket_dir"].endswith("/" + H)
          and not by_ids[(dev(4),)].get("claim_uid"),
          "v2 and v1 lines: the device plugin's allocations, their socket dirs kept")
    text = open(ckpt).read()
    check(not os.path.exists(claims) and text.startswith("# gshare-agent allocations v3\n")
          and ("%s 1700000000 claim %s team shared %s 6,7 dir=%s-0000abce\n" % (K, claim, uuid, K)) in text
          and text.count("\n") == 5,
          "the checkpoint is v3, one line per allocation, the claim in its line; the claims file is gone")
    check("claim %s (team/gone) has no allocation" % gone in ag.logtext(), "a claim without an allocation: dropped, logged")
    t = wait_for(lambda: (dev(4),) not in {tuple(a["device_ids"]) for a in ag.allocs().values()}
                 and (dev(5),) not in {tuple(a["device_ids"]) for a in ag.allocs().values()})
    check(t is not None and time.monotonic() - t_restart >= GRACE,
          "the migrated device plugin's allocations, unheld, reclaimed after the grace")
    check(K in ag.allocs(), "the migrated claim's allocation kept past the grace")
    ag.stop()
    ag.start()
    check(K in ag.allocs() and ag.allocs()[K]["claim_uid"] == claim and not os.path.exists(claims),
          "and after another restart, from the v3 line alone")


def off_and_config(tmp):
    # reconcileInterval 0: no reconciler, nothing released.
    t2 = os.path.join(tmp, "off")
    os.makedirs(t2)
    ag = Agent(t2, ["--pod-resources-socket", os.path.join(t2, "none.sock"),
                    "--reconcile-interval", "0", "--reclaim-grace", "0"])
    ag.start()
    try:
        uuid = json.loads(ag.ctl("gpus"))["gpus"][0]["uuid"]
        X = ag.create([uuid + "-u0"])["id"]
        time.sleep(1.0)
        check(X in ag.allocs(), "reconcileInterval 0: unheld allocation kept")
        check("reconciler off" in ag.logtext(), "reconciler off logged")
    finally:
        ag.stop()
    # Bad values are refused with the file, line and key.
    bad = os.path.join(t2, "bad.yaml")
    for text, want in (("reconcileInterval: 10x\n", "bad.yaml:1: reconcileInterval: not a duration"),
                       ("logLevel: info\nreclaimGrace: 25h\n", "bad.yaml:2: reclaimGrace: duration '25h' is too long"),
                       ("podResourcesSocket: relative.sock\n", "podResourcesSocket: must be an absolute path")):
        with open(bad, "w") as f:
            f.write(text)
        r = subprocess.run([AGENT, "--config", bad], capture_output=True, text=True, timeout=20)
        check(r.returncode == 2 and want in r.stderr, "bad config refused: " + r.stderr.strip())
    r = subprocess.run([AGENT, "--reconcile-interval", "-1"], capture_output=True, text=True, timeout=20)
    check(r.returncode == 2 and "--reconcile-interval: not a duration" in r.stderr,
          "bad flag refused: " + r.stderr.strip())


if __name__ == "__main__":
    main()
