#!/usr/bin/python3
"""End-to-end test of gshare-dra-plugin (dra/, docs/dra.md).

A DRA kubelet stand-in (Python grpcio: another gRPC and protobuf
implementation than the plugin's C core and protobuf-c; stubs generated at
test time from proto/dra_v1.proto and proto/pluginregistration_v1.proto),
a fake API server (ResourceClaims the test sets; ResourceSlices applied by
PATCH, kept as sent), a PodResources stand-in that shows no pod (the
reconciler must leave claims' allocations alone), and the real gshare-agent
on the fake driver (one 1 GiB GPU, 64 MiB units: 14 units after the
reserve).  Checks: registration (GetInfo, the endpoint, v1.DRAPlugin); the
ResourceSlice as published (JSON: device, attributes, capacity memory and
compute and their request policies, pool, server-side apply with the
token); a claim's compute (consumed capacity, computeCap, computeWeight)
on its allocation (docs/compute.md); prepare of two
claims (2 and 3 units): CDI IDs, the CDI specs, the agent's allocations
named by the claims, a hooked process held to each claim's amount; a
repeated prepare returns the same; the reconciler keeps them past its
grace; bad requests (unknown claim, another UID, more memory than the GPU
has, more than is free, a GPU that is gone, not allocated, another pool, a
malformed claim) each get a clear error and leave nothing made; unprepare
(and again: idempotent) removes the spec and the allocation; a plugin
restart (registration again, the same allocation for the same claim, the
slice published again with a newer generation); an agent restart (claims
refused meanwhile with a clear error; afterwards the same allocation, still
kept past the grace).  With the stand-in agent (two GPUs): a GPU going
unhealthy leaves the slice, and comes back when healthy.
"""
import http.server
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "plugin"))
sys.path.insert(0, os.path.join(HERE, "..", "recon"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import gsproto  # noqa: E402
import standin_agent  # noqa: E402
import test_e2e as e2e  # noqa: E402
import test_recon as recon  # noqa: E402

import grpc  # noqa: E402

check = e2e.check
wait_for = recon.wait_for
B = os.environ.get("B", "build")
BD = os.path.join(gsproto.REPO, B)
PLUGIN = os.path.join(BD, "gshare-dra-plugin")
DRIVER = "gpumem.gshare.io"
NODE = "node-a"
MiB = 1 << 20
UNIT = 64 * MiB
GRACE = 1.0
TOKEN = "dra-test-token-1"
HOSTHOOK = "/usr/local/lib/gshare-test/libgshare.so"     # hookPath, only written into CDI specs
HOSTPRELOAD = "/usr/local/lib/gshare-test/ld.so.preload"


def load_stubs(tmp):
    """The dra/v1 and pluginregistration/v1 stubs (grpc_tools, at test time)."""
    import importlib
    gsproto.generate(tmp, ["dra_v1.proto", "pluginregistration_v1.proto"])

    class NS:
        dra = importlib.import_module("dra_v1_pb2")
        dra_grpc = importlib.import_module("dra_v1_pb2_grpc")
        reg = importlib.import_module("pluginregistration_v1_pb2")
        reg_grpc = importlib.import_module("pluginregistration_v1_pb2_grpc")
    return NS


class FakeApi:
    """ResourceClaims (self.claims[(ns, name)] = object) and ResourceSlices
    (PATCH stores the body in self.slices[name], with the request in
    self.patches)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.claims = {}
        self.slices = {}
        self.patches = []   # (name, query, content type, authorization, body)
        self.gets = []      # (path, authorization)
        api = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                u = urllib.parse.urlparse(self.path)
                parts = u.path.strip("/").split("/")
                with api.lock:
                    api.gets.append((u.path, self.headers.get("Authorization")))
                    if (len(parts) == 7 and parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"]
                            and parts[5] == "resourceclaims" and (parts[4], parts[6]) in api.claims):
                        obj = api.claims[(parts[4], parts[6])]
                    elif len(parts) == 5 and parts[:4] == ["apis", "resource.k8s.io", "v1", "resourceslices"]:
                        obj = api.slices.get(parts[4])
                    else:
                        obj = None
                if obj is None:
                    self.reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                else:
                    self.reply(200, obj)

            def do_PATCH(self):
                u = urllib.parse.urlparse(self.path)
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                parts = u.path.strip("/").split("/")
                if len(parts) != 5 or parts[:4] != ["apis", "resource.k8s.io", "v1", "resourceslices"]:
                    self.reply(404, {"kind": "Status", "code": 404})
                    return
                try:
                    obj = json.loads(body)
                except ValueError:
                    self.reply(400, {"kind": "Status", "code": 400, "message": "not JSON"})
                    return
                with api.lock:
                    api.patches.append((parts[4], urllib.parse.parse_qs(u.query), self.headers.get("Content-Type"),
                                        self.headers.get("Authorization"), obj))
                    api.slices[parts[4]] = obj
                self.reply(200, obj)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def slice(self):
        with self.lock:
            return self.slices.get("%s-%s" % (NODE, DRIVER))

    def delete_slice(self):
        """What the kubelet does to the node's slices when it starts."""
        with self.lock:
            self.slices.clear()

    def npatches(self):
        with self.lock:
            return len(self.patches)

    def set_claim(self, ns, name, uid, device="gpu-0", memory=None, pool=NODE, allocated=True, share="s-1",
                  driver=DRIVER, params=None, compute=None):
        reqs = {"memory": memory}
        if compute is not None:  # compute as a consumable capacity (docs/compute.md)
            reqs["compute"] = compute
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": name, "namespace": ns, "uid": uid},
               "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                   "deviceClassName": "gpumem.gshare.io", "capacity": {"requests": reqs}}}]}}}
        if allocated:
            res = {"request": "gpu", "driver": driver, "pool": pool, "device": device, "shareID": share}
            if memory is not None:
                res["consumedCapacity"] = {k: v for k, v in reqs.items() if v is not None}
            obj["status"] = {"allocation": {"devices": {"results": [res]}, "nodeSelector": {}}}
            if params is not None:  # the claim's opaque configuration of our driver (docs/burst.md)
                obj["status"]["allocation"]["devices"]["config"] = [
                    {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": params}}]
        with self.lock:
            self.claims[(ns, name)] = obj


class Plugin:
    def __init__(self, tmp, conf, agent_sock):
        self.tmp = tmp
        self.args = [PLUGIN, "--config", conf, "--kubelet-root", os.path.join(tmp, "kubelet"),
                     "--cdi-dir", os.path.join(tmp, "cdi"), "--node", NODE, "--agent-socket", agent_sock,
                     "--nvidia-proc", os.path.join(tmp, "nvproc")]
        self.reg = os.path.join(tmp, "kubelet", "plugins_registry", DRIVER + "-reg.sock")
        self.endpoint = os.path.join(tmp, "kubelet", "plugins", DRIVER, "dra.sock")
        self.log = open(os.path.join(tmp, "plugin.log"), "a")
        self.proc = None

    def start(self):
        if os.path.exists(self.reg):
            os.unlink(self.reg)
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)
        if wait_for(lambda: os.path.exists(self.reg) or self.proc.poll() is not None) is None or \
                self.proc.poll() is not None:
            raise SystemExit("plugin did not start:\n" + self.logtext())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.proc.wait(timeout=20)
            check(rc == 0, "plugin exits 0 on SIGTERM (rc %s)" % rc)
        self.proc = None

    def logtext(self):
        return open(self.log.name).read()


def claim_msg(ns, c_ns, name, uid):
    return ns.dra.Claim(namespace=c_ns, name=name, uid=uid)


def prepare(ns, plugin, *claims, timeout=20):
    with grpc.insecure_channel("unix:" + plugin.endpoint) as ch:
        stub = ns.dra_grpc.DRAPluginStub(ch)
        return stub.NodePrepareResources(ns.dra.NodePrepareResourcesRequest(
            claims=[claim_msg(ns, *c) for c in claims]), timeout=timeout)


def unprepare(ns, plugin, *claims):
    with grpc.insecure_channel("unix:" + plugin.endpoint) as ch:
        stub = ns.dra_grpc.DRAPluginStub(ch)
        return stub.NodeUnprepareResources(ns.dra.NodeUnprepareResourcesRequest(
            claims=[claim_msg(ns, *c) for c in claims]), timeout=20)


def register(ns, plugin):
    with grpc.insecure_channel("unix:" + plugin.reg) as ch:
        stub = ns.reg_grpc.RegistrationStub(ch)
        # wait_for_ready: the socket's file exists from bind, a moment
        # before the plugin listens (a connect then is refused).
        info = stub.GetInfo(ns.reg.InfoRequest(), timeout=e2e.HANG, wait_for_ready=True)
        stub.NotifyRegistrationStatus(ns.reg.RegistrationStatus(plugin_registered=True), timeout=e2e.HANG,
                                      wait_for_ready=True)
        return info


def claim_allocs(ag):
    return {a["claim_uid"]: a for a in ag.allocs().values() if a.get("claim_uid")}


def cdi_files(tmp):
    d = os.path.join(tmp, "cdi")
    return sorted(f for f in os.listdir(d) if not f.startswith(".")) if os.path.isdir(d) else []


def cdi_spec(tmp, uid):
    with open(os.path.join(tmp, "cdi", "gshare.io-gpumem_%s.json" % uid)) as f:
        return json.load(f)


UID_A = "aaaaaaaa-0000-4000-8000-000000000001"
UID_B = "bbbbbbbb-0000-4000-8000-000000000002"


def main():
    e2e.need(recon.AGENT, recon.CTL, recon.FAKE, PLUGIN, e2e.CUDA, e2e.HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-dra-")
    gns = gsproto.load(tmp)
    ns = load_stubs(tmp)
    api = FakeApi()
    podres = recon.PodResources(gns, os.path.join(tmp, "podres.sock"))
    podres.start()
    os.makedirs(os.path.join(tmp, "nvproc"))
    with open(os.path.join(tmp, "nvproc", "version"), "w") as f:
        f.write("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
                "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    with open(os.path.join(tmp, "token"), "w") as f:
        f.write(TOKEN + "\n")
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write("podResourcesSocket: %s\nreconcileInterval: 200ms\nreclaimGrace: %gs\npodWatch: off\n"
                "apiServer: http://127.0.0.1:%d\napiTokenFile: %s\napiCaFile: \"\"\n"
                "hookPath: %s\npreloadPath: %s\nburstMax: 192Mi\n"
                % (podres.path, GRACE, api.port, os.path.join(tmp, "token"), HOSTHOOK, HOSTPRELOAD))
    ag = e2e.Agent(tmp, ["--config", conf])
    ag.start()
    plugin = Plugin(tmp, conf, ag.sock)
    plugin.start()
    try:
        body(ns, api, ag, plugin, tmp)
    finally:
        plugin.stop()
        ag.stop()
        podres.stop()
    health(ns, tmp, conf, api)
    if e2e.failures:
        print("log of the plugin:\n" + plugin.logtext())
    e2e.report(ag, tmp)


def body(ns, api, ag, plugin, tmp):
    gpu = ag.gpus()[0]
    # ---- registration
    info = register(ns, plugin)
    check(info.type == "DRAPlugin" and info.name == DRIVER and info.endpoint == plugin.endpoint
          and list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
          "GetInfo: DRAPlugin %s at %s, v1.DRAPlugin and v1beta1.DRAPlugin (%s)" % (DRIVER, plugin.endpoint, str(info).replace("\n", " ")))
    check(wait_for(lambda: "registered %s with the kubelet" % DRIVER in plugin.logtext()) is not None,
          "NotifyRegistrationStatus logged")

    # ---- the ResourceSlice
    check(wait_for(lambda: api.slice() is not None) is not None, "a ResourceSlice is applied")
    s = api.slice() or {}
    name, query, ctype, auth, _ = api.patches[0]
    check(ctype == "application/apply-patch+yaml" and query.get("fieldManager") == ["gshare-dra-plugin"]
          and query.get("force") == ["true"] and auth == "Bearer " + TOKEN,
          "slice by server-side apply with the token (%s %s %s)" % (ctype, query, auth))
    spec = s.get("spec", {})
    check(s.get("apiVersion") == "resource.k8s.io/v1" and s.get("kind") == "ResourceSlice"
          and s.get("metadata", {}).get("name") == "%s-%s" % (NODE, DRIVER),
          "slice resource.k8s.io/v1 named %s-%s" % (NODE, DRIVER))
    check(spec.get("driver") == DRIVER and spec.get("nodeName") == NODE and spec.get("pool", {}).get("name") == NODE
          and spec["pool"].get("resourceSliceCount") == 1 and spec["pool"].get("generation", 0) > 0,
          "slice: driver, node, pool (%s)" % spec.get("pool"))
    devs = spec.get("devices", [])
    check(len(devs) == 1, "slice: one device per GPU (%d)" % len(devs))
    d = devs[0] if devs else {}
    attrs = d.get("attributes", {})
    cap = d.get("capacity", {}).get("memory", {})
    units = gpu["units_total"]
    check(d.get("name") == "gpu-0" and d.get("allowMultipleAllocations") is True,
          "device gpu-0 with allowMultipleAllocations")
    check(attrs.get("uuid") == {"string": gpu["uuid"]} and attrs.get("productName") == {"string": gpu["name"]}
          and attrs.get("memory") == {"int": gpu["total_bytes"]} and attrs.get("index") == {"int": 0}
          and attrs.get("driverVersion") == {"version": "535.104.5"},
          "attributes uuid, productName, memory, index, driverVersion as semver (%s)" % attrs)
    check(int(cap.get("value", 0)) == units * UNIT and units == 14,
          "capacity.memory = %d units x 64Mi (%s)" % (units, cap.get("value")))
    pol = cap.get("requestPolicy", {})
    check(int(pol.get("default", 0)) == UNIT and int(pol.get("validRange", {}).get("min", 0)) == UNIT
          and int(pol["validRange"].get("step", 0)) == UNIT,
          "requestPolicy: default, min and step = the unit (%s)" % pol)
    comp = d.get("capacity", {}).get("compute", {})
    check(comp == {"value": "100", "requestPolicy": {"default": "0",
                                                     "validRange": {"min": "0", "max": "100", "step": "1"}}},
          "capacity.compute: 100 %% of the GPU's time, none by default, whole percents (%s)" % comp)

    # ---- the kubelet deletes the node's slices when it starts: published again
    gen = api.slice()["spec"]["pool"]["generation"]
    api.delete_slice()
    register(ns, plugin)
    t = wait_for(lambda: api.slice() is not None, 3)
    check(t is not None and api.slice()["spec"]["pool"]["generation"] > gen,
          "slice deleted, then a registration: applied again at once (%s s)" % (t and round(t, 2)))
    api.delete_slice()
    t = wait_for(lambda: api.slice() is not None)
    check(t is not None, "slice deleted: applied again by the periodic check (%s s)" % (t and round(t, 2)))

    # ---- prepare two claims in one call
    api.set_claim("team", "claim-a", UID_A, memory="128Mi", share="share-a")
    api.set_claim("team", "claim-b", UID_B, memory=str(192 * MiB), share="share-b")
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A), ("team", "claim-b", UID_B))
    ra, rb = rep.claims[UID_A], rep.claims[UID_B]
    check(ra.error == "" and rb.error == "", "prepare of 2 claims: no error (%r %r)" % (ra.error, rb.error))
    if ra.error or rb.error:
        return
    da = ra.devices[0]
    check(list(da.cdi_device_ids) == ["gshare.io/gpumem=" + UID_A] and da.pool_name == NODE
          and da.device_name == "gpu-0" and list(da.request_names) == ["gpu"] and da.share_id == "share-a",
          "prepare: CDI ID, pool, device, request, share ID (%s)" % str(da).replace("\n", " "))
    ca = claim_allocs(ag)
    check(set(ca) == {UID_A, UID_B}, "the agent holds one allocation per claim, named by its UID")
    A, Bc = ca.get(UID_A, {}), ca.get(UID_B, {})
    check(A.get("parts", [{}])[0].get("units") == 2 and Bc.get("parts", [{}])[0].get("units") == 3
          and A.get("claim") == "claim-a" and A.get("claim_namespace") == "team",
          "claim-a 2 units, claim-b 3 units, on the claims' names")
    table = subprocess.run([recon.CTL, "--socket", ag.sock, "allocations"], capture_output=True, text=True).stdout
    check("claim team/claim-a" in table and "claim team/claim-b" in table, "gsharectl allocations names the claims")
    sa = cdi_spec(tmp, UID_A)
    dev = sa["devices"][0]
    env = dict(e.split("=", 1) for e in dev["containerEdits"]["env"])
    mounts = {m["containerPath"]: m for m in dev["containerEdits"]["mounts"]}
    check(sa["kind"] == "gshare.io/gpumem" and dev["name"] == UID_A and env.get("GSHARE_MEM_LIMIT") == str(128 * MiB)
          and env.get("GSHARE_GPU") == gpu["uuid"] and env.get("GSHARE_SOCKET") == "/var/run/gshare/agent.sock",
          "CDI spec: kind, device, env (%s)" % env)
    check(mounts.get("/var/run/gshare", {}).get("hostPath") == A.get("socket_dir")
          and mounts.get("/usr/lib/gshare/libgshare.so", {}).get("hostPath") == HOSTHOOK
          and mounts.get("/etc/ld.so.preload", {}).get("hostPath") == HOSTPRELOAD
          and all("ro" in m["options"] and "bind" in m["options"] for m in mounts.values()),
          "CDI spec mounts: the allocation's socket dir, the hook, ld.so.preload, read-only")
    check(cdi_files(tmp) == sorted("gshare.io-gpumem_%s.json" % u for u in (UID_A, UID_B)),
          "one CDI spec per claim (%s)" % cdi_files(tmp))

    # ---- enforcement: a hooked process gets each claim's amount, no more
    for uid, mib in ((UID_A, 128), (UID_B, 192)):
        r = e2e.run([e2e.CUDA, "fill"], e2e.hook_env(ag, claim_allocs(ag)[uid]))
        check(r.returncode == 0 and ("obtained %d MiB" % mib) in r.stdout,
              "a process of claim %s is held to %d MiB: %s" % (uid[:8], mib, r.stdout.strip()))

    # ---- one claim shared by two pods (or two containers of one pod): the
    # kubelet prepares it for each; it is one allocation with one quota, so
    # the second gets only what the first leaves of the claim's 128 MiB.
    holder = subprocess.Popen([e2e.CUDA, "hold", "96"], env=e2e.hook_env(ag, claim_allocs(ag)[UID_A]),
                              stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "pod 1 of claim-a holds 96 MiB of its 128")
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A))
    check(rep.claims[UID_A].error == "" and claim_allocs(ag)[UID_A]["id"] == A["id"] and len(ag.allocs()) == 2
          and cdi_spec(tmp, UID_A)["devices"][0]["containerEdits"]["mounts"] == dev["containerEdits"]["mounts"],
          "prepared for pod 2: the same allocation, the same socket dir")
    r = e2e.run([e2e.CUDA, "fill"], e2e.hook_env(ag, claim_allocs(ag)[UID_A]))
    check(r.returncode == 0 and "obtained 32 MiB" in r.stdout,
          "pod 2 of claim-a gets the 32 MiB pod 1 leaves, not a quota of its own: " + r.stdout.strip())
    check(claim_allocs(ag)[UID_A]["parts"][0]["quota_bytes"] == 128 * MiB and ag.gpus()[0]["units_allocated"] == 5,
          "one quota of 128 MiB, the claim's 2 units once")
    holder.kill()
    holder.wait()
    check(e2e.wait_idle(ag, A["id"]) is not None, "pod 1 gone: claim-a's memory free again")

    # ---- idempotence
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A))
    check(rep.claims[UID_A].error == "" and list(rep.claims[UID_A].devices[0].cdi_device_ids) ==
          ["gshare.io/gpumem=" + UID_A] and claim_allocs(ag)[UID_A]["id"] == A["id"]
          and len(ag.allocs()) == 2, "prepare again: the same allocation, nothing new")

    # v1beta1: the same messages (less share_id) on the v1beta1 service
    with grpc.insecure_channel("unix:" + plugin.endpoint) as ch:
        call = ch.unary_unary("/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
                              request_serializer=ns.dra.NodePrepareResourcesRequest.SerializeToString,
                              response_deserializer=ns.dra.NodePrepareResourcesResponse.FromString)
        rep = call(ns.dra.NodePrepareResourcesRequest(claims=[claim_msg(ns, "team", "claim-a", UID_A)]), timeout=20)
    check(rep.claims[UID_A].error == "" and list(rep.claims[UID_A].devices[0].cdi_device_ids) ==
          ["gshare.io/gpumem=" + UID_A] and len(ag.allocs()) == 2, "v1beta1 prepare: the same claim, the same answer")

    # the same claim UID now asking for another amount: refused, nothing changed
    api.set_claim("team", "claim-a", UID_A, memory="192Mi", share="share-a")
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A))
    check("already has allocation %s of 2 units" % A["id"] in rep.claims[UID_A].error
          and claim_allocs(ag)[UID_A]["parts"][0]["units"] == 2,
          "same claim, another amount: refused (%r)" % rep.claims[UID_A].error)
    api.set_claim("team", "claim-a", UID_A, memory="128Mi", share="share-a")

    # ---- the reconciler (PodResources shows no pod) keeps claims' allocations
    time.sleep(GRACE + 1.0)
    check(set(claim_allocs(ag)) == {UID_A, UID_B}, "claims' allocations kept past reclaimGrace")

    # ---- bad requests: a clear error, nothing made
    n_allocs, files = len(ag.allocs()), cdi_files(tmp)
    api.set_claim("team", "wrong-uid", "cccccccc-0000-4000-8000-00000000000c", memory="64Mi")
    api.set_claim("team", "too-big", "dddddddd-0000-4000-8000-00000000000d", memory="2Gi")
    api.set_claim("team", "no-room", "eeeeeeee-0000-4000-8000-00000000000e", memory=str(10 * UNIT))
    api.set_claim("team", "gone-gpu", "ffffffff-0000-4000-8000-00000000000f", device="gpu-7", memory="64Mi")
    api.set_claim("team", "pending", "12345678-0000-4000-8000-000000000010", memory="64Mi", allocated=False)
    api.set_claim("team", "other-pool", "12345678-0000-4000-8000-000000000011", memory="64Mi", pool="node-b")
    api.set_claim("team", "bad-qty", "12345678-0000-4000-8000-000000000012", memory="1.5Gi")
    api.set_claim("team", "other-driver", "12345678-0000-4000-8000-000000000013", memory="64Mi",
                  driver="gpu.nvidia.com")
    bad = [(("team", "unknown", "12345678-0000-4000-8000-0000000000ff"), "ResourceClaim team/unknown not found"),
           (("team", "wrong-uid", "12345678-0000-4000-8000-0000000000fe"), "has UID cccccccc"),
           (("team", "too-big", "dddddddd-0000-4000-8000-00000000000d"), "asks for 32 units"),
           (("team", "no-room", "eeeeeeee-0000-4000-8000-00000000000e"), "units (67108864 bytes each) free"),
           (("team", "gone-gpu", "ffffffff-0000-4000-8000-00000000000f"), "gpu-7 is not a GPU of this node"),
           (("team", "pending", "12345678-0000-4000-8000-000000000010"), "has no device of gpumem.gshare.io allocated"),
           (("team", "other-pool", "12345678-0000-4000-8000-000000000011"), "is of pool node-b"),
           (("team", "bad-qty", "12345678-0000-4000-8000-000000000012"), "'1.5Gi'"),
           (("team", "other-driver", "12345678-0000-4000-8000-000000000013"), "has no device of gpumem.gshare.io"),
           (("team", "../x", "12345678-0000-4000-8000-000000000014"), "not a claim namespace, name and UID"),
           (("team", "x", "../../etc/passwd"), "not a claim namespace, name and UID")]
    rep = prepare(ns, plugin, *[c for c, _ in bad])
    for c, want in bad:
        got = rep.claims[c[2]].error
        check(want in got and not rep.claims[c[2]].devices, "bad claim %s: %r" % (c[1], got))
    check(len(ag.allocs()) == n_allocs and cdi_files(tmp) == files, "bad claims left nothing made")
    # a good claim among bad ones still succeeds
    UID_C = "0c0c0c0c-0000-4000-8000-00000000000c"
    api.set_claim("team", "claim-c", UID_C, memory="64Mi")
    rep = prepare(ns, plugin, ("team", "unknown", "12345678-0000-4000-8000-0000000000ff"), ("team", "claim-c", UID_C))
    check(rep.claims[UID_C].error == "" and rep.claims["12345678-0000-4000-8000-0000000000ff"].error,
          "one bad claim does not fail the good one in the same call")

    # ---- unprepare, twice; a claim whose process lives is released when it exits
    holder = subprocess.Popen([e2e.CUDA, "hold", "64"], env=e2e.hook_env(ag, claim_allocs(ag)[UID_B]),
                              stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "a process of claim-b holds memory")
    for i in range(2):
        rep = unprepare(ns, plugin, ("team", "claim-b", UID_B), ("team", "claim-c", UID_C))
        check(rep.claims[UID_B].error == "" and rep.claims[UID_C].error == "",
              "unprepare%s: no error" % (" again" if i else ""))
    check(set(claim_allocs(ag)) == {UID_A} and cdi_files(tmp) == ["gshare.io-gpumem_%s.json" % UID_A],
          "unprepare removed the claims and the CDI specs")
    check(ag.gpus()[0]["units_allocated"] == 5, "claim-b's 3 units stay taken while its process lives")
    UID_D = "0d0d0d0d-0000-4000-8000-00000000000d"
    api.set_claim("team", "claim-d", UID_D, memory=str(10 * UNIT))
    rep = prepare(ns, plugin, ("team", "claim-d", UID_D))
    check("has 9 of its 14 units" in rep.claims[UID_D].error and UID_D not in claim_allocs(ag),
          "a claim needing them meanwhile: refused, naming what is free (%r)" % rep.claims[UID_D].error)
    holder.kill()
    holder.wait()
    check(wait_for(lambda: ag.gpus()[0]["units_allocated"] == 2) is not None,
          "the process exits: claim-b's units are free")
    rep = prepare(ns, plugin, ("team", "claim-d", UID_D))
    check(rep.claims[UID_D].error == "" and claim_allocs(ag)[UID_D]["parts"][0]["units"] == 10,
          "and the kubelet's retry of that claim succeeds")
    rep = unprepare(ns, plugin, ("team", "claim-d", UID_D))
    check(rep.claims[UID_D].error == "" and ag.gpus()[0]["units_allocated"] == 2, "claim-d unprepared")

    # ---- a burst limit from the claim's configuration (docs/burst.md)
    UID_E = "0e0e0e0e-0000-4000-8000-00000000000e"
    api.set_claim("team", "claim-e", UID_E, memory="64Mi", params={"burst": "256Mi"})
    rep = prepare(ns, plugin, ("team", "claim-e", UID_E))
    E = claim_allocs(ag).get(UID_E, {"parts": [{}]})
    check(rep.claims[UID_E].error == "" and E["parts"][0].get("quota_bytes") == 64 * MiB
          and E["parts"][0].get("burst_bytes") == 256 * MiB,
          "claim with burst 256Mi: quota 64 MiB, burst 256 MiB (%r)" % rep.claims[UID_E].error)
    r = e2e.run([e2e.CUDA, "fill"], e2e.hook_env(ag, claim_allocs(ag)[UID_E]))
    check(r.returncode == 0 and "obtained 256 MiB" in r.stdout,
          "its process borrows up to the burst: " + r.stdout.strip())
    check(unprepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error == "" and
          wait_for(lambda: ag.gpus()[0]["units_allocated"] == 2) is not None, "claim-e unprepared")
    n_allocs = len(ag.allocs())
    for params, want in (({"burst": "lots"}, "burst 'lots' is not a quantity of bytes"),
                         ({"brust": "1Gi"}, "parameter 'brust'; known: burst"),
                         ({"burst": "32Mi"}, "burst 32Mi is below the quota"),
                         ({"burst": "512Mi"}, "this node allows 192Mi (burstMax)")):
        api.set_claim("team", "claim-e", UID_E, memory="64Mi", params=params)
        got = prepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error
        check(want in got and len(ag.allocs()) == n_allocs, "bad burst configuration %s: %r" % (params, got))

    # ---- compute QoS from the claim's configuration (docs/compute.md)
    api.set_claim("team", "claim-e", UID_E, memory="64Mi", params={"computeClass": "best-effort", "computeCap": "40"})
    rep = prepare(ns, plugin, ("team", "claim-e", UID_E))
    E = claim_allocs(ag).get(UID_E, {})
    check(rep.claims[UID_E].error == "" and (E.get("compute_class"), E.get("compute_cap")) == ("best-effort", 40),
          "claim with computeClass best-effort, computeCap 40: on its allocation (%r, %r)"
          % (rep.claims[UID_E].error, E.get("compute_class")))
    check(unprepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error == "" and
          wait_for(lambda: ag.gpus()[0]["units_allocated"] == 2) is not None, "claim-e unprepared")
    for params, want in (({"computeClass": "latency-critical"}, "latency-critical comes only from the DeviceClass"),
                         ({"computeClass": "urgent"}, "computeClass 'urgent' is not"),
                         ({"computeCap": "0"}, "computeCap '0' is not a percent"),
                         ({"computeWeight": "0"}, "computeWeight '0' is not a weight (1 to 100)")):
        api.set_claim("team", "claim-e", UID_E, memory="64Mi", params=params)
        got = prepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error
        check(want in got and len(ag.allocs()) == n_allocs, "claim's compute %s refused: %r" % (params, got))

    # ---- compute as a consumable capacity: what the claim consumed is its
    # cap; computeCap may lower it; computeWeight its weight
    for compute, params, want in (("30", None, (30, 10)),
                                  ("30", {"computeCap": "20", "computeWeight": "40"}, (20, 40)),
                                  ("30", {"computeCap": "50"}, (30, 10)),
                                  ("100", None, (0, 10))):
        api.set_claim("team", "claim-e", UID_E, memory="64Mi", params=params, compute=compute)
        rep = prepare(ns, plugin, ("team", "claim-e", UID_E))
        E = claim_allocs(ag).get(UID_E, {})
        check(rep.claims[UID_E].error == "" and (E.get("compute_cap"), E.get("compute_weight")) == want,
              "claim consuming compute %s with %s: cap and weight %s on its allocation (%r, %r)"
              % (compute, params, want, rep.claims[UID_E].error, (E.get("compute_cap"), E.get("compute_weight"))))
        check(unprepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error == "" and
              wait_for(lambda: ag.gpus()[0]["units_allocated"] == 2) is not None, "claim-e unprepared")
    api.set_claim("team", "claim-e", UID_E, memory="64Mi", compute="101")
    got = prepare(ns, plugin, ("team", "claim-e", UID_E)).claims[UID_E].error
    check("consumedCapacity.compute '101' of device gpu-0 is not a percent (0 to 100)" in got and
          len(ag.allocs()) == n_allocs, "a consumed compute past 100 refused: %r" % got)

    # ---- the CDI spec cannot be written: the allocation made for it goes again
    cdi = os.path.join(tmp, "cdi")
    os.rename(cdi, cdi + ".away")
    with open(cdi, "w") as f:
        f.write("not a directory\n")
    rep = prepare(ns, plugin, ("team", "claim-d", UID_D))
    os.unlink(cdi)
    os.rename(cdi + ".away", cdi)
    check("cannot write the CDI spec" in rep.claims[UID_D].error and UID_D not in claim_allocs(ag)
          and ag.gpus()[0]["units_allocated"] == 2 and len(ag.allocs()) == 1,
          "CDI spec not writable: an error and the new allocation released (%r)" % rep.claims[UID_D].error)

    # ---- the agent's own checks (a client other than the plugin), nothing made
    gns = gsproto.load(tmp)
    ckpt = os.path.join(tmp, "state", "allocations")
    check(not os.path.exists(os.path.join(tmp, "state", "claims")) and
          ("claim %s team claim-a %s " % (UID_A, gpu["uuid"])) in open(ckpt).read(),
          "the claim is in its allocation's checkpoint line; no claims file")

    def ctl_create(**kw):
        """CreateAllocation, owner claim, or its old form (old=True)."""
        old = kw.pop("old", False)
        if old:
            req = gns.ctl.Request(create_claim_allocation=gns.ctl.CreateClaimAllocationRequest(
                claim_uid=kw["uid"], claim_namespace=kw["namespace"], claim_name=kw["name"],
                gpu_uuid=kw["gpu_uuid"], units=kw["units"]))
        else:
            req = gns.ctl.Request(create_allocation=gns.ctl.CreateAllocationRequest(claim=gns.ctl.ClaimOwner(**kw)))
        body = req.SerializeToString()
        data = e2e.ctl_raw(ag.sock, struct.pack("<I", len(body)) + body)
        return gns.ctl.Reply.FromString(data[4:]) if len(data) >= 4 else gns.ctl.Reply()

    for old in (False, True):
        rep = ctl_create(uid=UID_A, namespace="team", name="claim-a", gpu_uuid=gpu["uuid"], units=2, old=old)
        check(rep.error == 0 and rep.create_allocation.allocation.id == A["id"] and not rep.create_allocation.created,
              "CreateAllocation%s of claim-a: its allocation, nothing new" % (" (old form)" if old else ""))
    req = gns.ctl.Request(create_allocation=gns.ctl.CreateAllocationRequest(
        device_ids=[gpu["uuid"] + "-u13"], claim=gns.ctl.ClaimOwner(uid=UID_A, namespace="team", name="claim-a",
                                                                   gpu_uuid=gpu["uuid"], units=2)))
    body = req.SerializeToString()
    data = e2e.ctl_raw(ag.sock, struct.pack("<I", len(body)) + body)
    rep = gns.ctl.Reply.FromString(data[4:])
    check(rep.error < 0 and "takes no device IDs" in rep.message, "device IDs and a claim: refused (%r)" % rep.message)
    before = (len(ag.allocs()), open(ckpt).read())
    for uid, cns, name, gpu_uuid, units, want in (
            ("x y", "team", "c", gpu["uuid"], 1, "not a claim UID"),
            ("aaaa\n", "team", "c", gpu["uuid"], 1, "not a claim UID"),
            ("abcd", "te am", "c", gpu["uuid"], 1, "not a claim UID"),
            ("abcd", "team", "", gpu["uuid"], 1, "not a claim UID"),
            ("abcd", "team", "c", "GPU-00000000-0000-0000-0000-000000000000", 1, "not a GPU gshare manages"),
            ("abcd", "team", "c", gpu["uuid"], 0, "asks for 0 units"),
            ("abcd", "team", "c", gpu["uuid"], 1 << 31, "asks for 2147483648 units")):
        for old in (False, True):
            rep = ctl_create(uid=uid, namespace=cns, name=name, gpu_uuid=gpu_uuid, units=units, old=old)
            check(rep.error < 0 and want in rep.message, "agent refuses %r/%r/%r %d units%s: %r"
                  % (uid, cns, name, units, " (old form)" if old else "", rep.message))
    check((len(ag.allocs()), open(ckpt).read()) == before,
          "the agent made nothing and wrote no claim")

    # ---- plugin restart
    gen = api.slice()["spec"]["pool"]["generation"]
    npatch = api.npatches()
    plugin.stop()
    plugin.start()
    info = register(ns, plugin)
    check(info.endpoint == plugin.endpoint, "after a plugin restart: registration again")
    check(wait_for(lambda: api.npatches() > npatch) is not None
          and api.slice()["spec"]["pool"]["generation"] > gen, "slice applied again with a newer generation")
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A))
    check(rep.claims[UID_A].error == "" and claim_allocs(ag)[UID_A]["id"] == A["id"],
          "after a plugin restart: prepare gives the same allocation")

    # ---- agent restart
    ag.stop()
    # A deadline shorter than the plugin's agent timeout (5 s) leaves no
    # time to wait for the agent: the prepare fails at once, clearly.
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A), timeout=4)
    check("not reachable" in rep.claims[UID_A].error or "cannot reach the gshare agent" in rep.claims[UID_A].error,
          "agent down, a short deadline: prepare fails clearly (%r)" % rep.claims[UID_A].error)
    # With the kubelet's deadline, a prepare waits for an agent that is away
    # (a restart, an upgrade) and succeeds once it is back.
    got = {}
    t = threading.Thread(target=lambda: got.update(rep=prepare(ns, plugin, ("team", "claim-a", UID_A), timeout=60)))
    t.start()
    # It waits in the mirror (the plugin saw the agent go) or in the call.
    check(wait_for(lambda: "claim team/claim-a: the gshare agent is away: waiting" in plugin.logtext() or
                   "the gshare agent at %s is away" % ag.sock in plugin.logtext()) is not None,
          "agent down: the prepare waits for it")
    ag.start()
    t.join(e2e.HANG)
    check(not t.is_alive() and "rep" in got and got["rep"].claims[UID_A].error == "",
          "agent back: the waiting prepare succeeds (%r)" % (got["rep"].claims[UID_A].error if "rep" in got else None))
    check(wait_for(lambda: "gshare agent at %s is back" % ag.sock in plugin.logtext()) is not None,
          "the plugin follows the agent again")
    A2 = claim_allocs(ag).get(UID_A, {})
    check(A2.get("id") == A["id"] and A2.get("socket_dir") == A["socket_dir"],
          "after an agent restart: claim-a's allocation restored, same socket dir")
    rep = prepare(ns, plugin, ("team", "claim-a", UID_A))
    check(rep.claims[UID_A].error == "" and claim_allocs(ag)[UID_A]["id"] == A["id"] and len(ag.allocs()) == 1,
          "after an agent restart: prepare gives the same allocation")
    time.sleep(GRACE + 1.0)
    check(UID_A in claim_allocs(ag), "after an agent restart: kept past reclaimGrace")
    r = e2e.run([e2e.CUDA, "fill"], e2e.hook_env(ag, claim_allocs(ag)[UID_A]))
    check("obtained 128 MiB" in r.stdout, "after an agent restart: still held to 128 MiB: " + r.stdout.strip())
    rep = unprepare(ns, plugin, ("team", "claim-a", UID_A))
    check(rep.claims[UID_A].error == "" and not claim_allocs(ag) and cdi_files(tmp) == [],
          "unprepare of the last claim: nothing left")


def health(ns, tmp, conf, api):
    """The stand-in agent (two GPUs): the slice follows GPU health."""
    gns = gsproto.load(tmp)
    sock = os.path.join(tmp, "standin.sock")
    st = standin_agent.Agent(gns.ctl, sock, ngpus=2, units=8, unit_bytes=UNIT)
    st.start()
    plugin = Plugin(tmp, conf, sock)
    plugin.log = open(os.path.join(tmp, "plugin2.log"), "a")
    plugin.start()

    def names():
        s = api.slice()
        return [d["name"] for d in s["spec"]["devices"]] if s else None
    try:
        check(wait_for(lambda: names() == ["gpu-0", "gpu-1"]) is not None, "stand-in: slice has gpu-0, gpu-1")
        st.set_healthy(1, False)
        check(wait_for(lambda: names() == ["gpu-0"]) is not None, "GPU 1 unhealthy: gone from the slice")
        st.set_healthy(1, True)
        check(wait_for(lambda: names() == ["gpu-0", "gpu-1"]) is not None, "GPU 1 healthy: back in the slice")
    finally:
        plugin.stop()
        st.stop()
    if e2e.failures:
        print("log of the plugin (stand-in agent):\n" + plugin.logtext())


if __name__ == "__main__":
    main()
