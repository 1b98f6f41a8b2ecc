#!/usr/bin/python3
"""Over-quota Events on the pod, or on the ResourceClaim of a DRA claim's
allocation (agent/services/gs_event.h), on the fake driver.

A PodResources stand-in (test/recon) tells the agent which pod holds the
allocation; a fake API server records what the agent POSTs.  A process of
the pod loads modules past its quota with overQuota: report: the agent
posts one Warning Event GPUMemoryOverQuota on that pod, with the service
account's token, and the process lives on.

Environment: B (build dir), SANITIZE.
"""
import http.server
import json
import os
import struct
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "test", "recon"))
sys.path.insert(0, os.path.join(ROOT, "test", "plugin"))
import test_e2e as e2e  # noqa: E402
from test_recon import kube_setup  # noqa: E402
from test_density import CTX, NVML, Proc, part, wait_for  # noqa: E402
from test_e2e import MiB, check  # noqa: E402

RES = "gshare.io/gpumem"


class ApiServer(http.server.ThreadingHTTPServer):
    def __init__(self):
        self.posts = []
        self.lock = threading.Lock()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                with outer.lock:
                    outer.posts.append((self.path, self.headers.get("Authorization"), body))
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a):
                pass

        super().__init__(("127.0.0.1", 0), H)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK, NVML)
    api = ApiServer()
    tmp, ns, kubelet, conf = kube_setup("gshare-events-", api.server_address[1],
                                        "nvmlLibrary: %s\nusageInterval: 100ms\noverQuota: report\n"
                                        "nodeName: node-1\nburstMax: 256Mi\n" % NVML)
    ag = e2e.Agent(tmp, ["--config", conf])
    ag.env["GSHARE_FAKECUDA_CTX_BYTES"] = str(CTX)
    ag.start()
    try:
        uuid = ag.gpus()[0]["uuid"]
        ids = ["%s-u%d" % (uuid, u) for u in (0, 1)]
        a = ag.create(ids)["allocation"]
        kubelet.set(pods=[("team-a", "trainer-0", "main", [(RES, ids)])])
        named = wait_for(lambda: ag.allocs()[a["id"]].get("pod_name") == "trainer-0")
        check(bool(named), "the reconciler names the allocation's pod")
        p = Proc(ag, a, 0)
        check(p.ok, "a process of the pod runs")
        r = p.module(100)  # 40 + 100 > 128 MiB: over
        check(len(r) == 4 and r[1] == "ok", "it loads modules past its quota (%s)" % r)
        got = wait_for(lambda: len(api.posts) >= 1)
        check(bool(got), "an Event is posted")
        path, auth, body = api.posts[0] if api.posts else ("", "", b"{}")
        ev = json.loads(body)
        check(path == "/api/v1/namespaces/team-a/events", "POSTed to the pod's namespace (%s)" % path)
        check(auth == "Bearer sekrit-token", "with the service account's token")
        check(ev.get("involvedObject", {}).get("name") == "trainer-0" and
              ev["involvedObject"].get("kind") == "Pod" and ev.get("type") == "Warning" and
              ev.get("reason") == "GPUMemoryOverQuota" and a["id"] in ev.get("message", "") and
              ev.get("source", {}).get("host") == "node-1",
              "the Event names the pod, the reason and the allocation: %s" % ev.get("message"))
        check(p.p.poll() is None, "overQuota report: the process lives on")
        check(part(ag, a["id"])["outside_bytes"] == CTX + 100 * MiB, "its outside memory is charged")
        p.end()
        check(len(api.posts) == 1, "one Event, not one per scan (%d)" % len(api.posts))

        # A DRA claim's allocation: the agent knows the claim, not its pod,
        # so the Event goes on the ResourceClaim.
        uid = "aaaaaaaa-0000-4000-8000-0000000000e1"
        req = ns.ctl.Request(create_claim_allocation=ns.ctl.CreateClaimAllocationRequest(
            claim_uid=uid, claim_namespace="team-b", claim_name="gpu-claim", gpu_uuid=uuid, units=2))
        body = req.SerializeToString()
        data = e2e.ctl_raw(ag.sock, struct.pack("<I", len(body)) + body)
        rep = ns.ctl.Reply.FromString(data[4:]) if len(data) >= 4 else ns.ctl.Reply()
        check(rep.error == 0, "a claim's allocation is made (%r)" % rep.message)
        c = ag.allocs()[rep.create_allocation.allocation.id]
        q = Proc(ag, c, 0)
        check(q.ok, "a process of the claim runs")
        r = q.module(100)
        check(len(r) == 4 and r[1] == "ok", "it loads modules past its quota (%s)" % r)
        got = wait_for(lambda: len(api.posts) >= 2)
        check(bool(got), "an Event is posted for the claim")
        path, _, body = api.posts[1] if len(api.posts) > 1 else ("", "", b"{}")
        ev = json.loads(body)
        io = ev.get("involvedObject", {})
        check(path == "/api/v1/namespaces/team-b/events" and io.get("kind") == "ResourceClaim" and
              io.get("apiVersion") == "resource.k8s.io/v1" and io.get("name") == "gpu-claim" and
              io.get("uid") == uid and c["id"] in ev.get("message", ""),
              "on the ResourceClaim, in its namespace: %s %s" % (path, io))
        q.end()

        # Borrowing (docs/burst.md): a pod of 1 unit (64 MiB) with burst
        # 256 MiB holds 160 MiB: a Normal Event GPUMemoryBorrowed on it;
        # when its process exits, GPUMemoryReturned.
        bid = "%s-u%d" % (uuid, 4)
        b = ag.create_args(["--burst", "256Mi", bid])["allocation"]
        kubelet.set(pods=[("team-a", "trainer-0", "main", [(RES, ids)]),
                          ("team-c", "burster-0", "main", [(RES, [bid])])])
        check(bool(wait_for(lambda: ag.allocs()[b["id"]].get("pod_name") == "burster-0")),
              "the reconciler names the bursting allocation's pod")
        n0 = len(api.posts)
        s = Proc(ag, b, 160)
        check(s.ok, "a process of the bursting pod holds 160 MiB of its 64 MiB quota + burst")

        def reasons():
            return [(json.loads(x[2]).get("reason"), json.loads(x[2]).get("type"),
                     json.loads(x[2]).get("involvedObject", {}).get("name")) for x in api.posts[n0:]]
        check(bool(wait_for(lambda: ("GPUMemoryBorrowed", "Normal", "burster-0") in reasons())),
              "a Normal Event GPUMemoryBorrowed on the pod (%s)" % reasons())
        msg = next((json.loads(x[2])["message"] for x in api.posts[n0:]
                    if json.loads(x[2]).get("reason") == "GPUMemoryBorrowed"), "")
        check(b["id"] in msg and "past its quota of 64 MiB (burst 256 MiB)" in msg, "its message: " + msg)
        s.end()
        check(bool(wait_for(lambda: ("GPUMemoryReturned", "Normal", "burster-0") in reasons())),
              "its process gone: GPUMemoryReturned (%s)" % reasons())
        check(reasons().count(("GPUMemoryBorrowed", "Normal", "burster-0")) == 1, "one Borrowed Event, not one per scan")
    finally:
        ag.stop()
        kubelet.stop()
        api.shutdown()
    e2e.report(ag, tmp)


if __name__ == "__main__":
    main()
