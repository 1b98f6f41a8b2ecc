#!/usr/bin/python3
"""End-to-end test of the agent's API-server pod watch (agent/services/gs_watch.h).

A fake API server (http.server; HTTPS with a CA made by openssl at test
time) answers the pod list and streams watch events the test writes; the
PodResources stand-in and the agent runner come from test/recon/test_recon.py.
The real gshare-agent runs on the fake driver with reconcileInterval 60s and
reclaimGrace 1s, and the test checks that: the watch lists, then watches from
the list's resourceVersion with the node's field selector and the token as a
Bearer header; malformed, deep and oversized lines kick nothing and release
nothing; a DELETED pod, or one that Failed, makes the agent reclaim within
about the grace, far sooner than the interval; a broken stream reconnects
from the last resourceVersion with the token read afresh; a 410 lists
again; the agent stops promptly while watching; podWatch auto finds the
cluster from KUBERNETES_SERVICE_HOST/PORT and NODE_NAME (over HTTPS); podWatch
off and auto outside a cluster do nothing; bad values are refused.
"""
import http.server
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "recon"))
import test_recon as recon  # noqa: E402

check = recon.check
wait_for = recon.wait_for
# The reconcile interval here is 60 s: an event the watch kicked comes far
# sooner on any machine; what comes later came from the interval.
WATCH_KICKED_S = 30
GRACE = recon.GRACE
CLUSTER_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "NODE_NAME")


class FakeApi:
    """GET /api/v1/pods: a list (resourceVersion self.rv), or with watch=1 a
    stream of the lines given to send(); close() ends the current stream."""

    def __init__(self, tls=None):
        self.cv = threading.Condition()
        self.reqs = []           # (kind, query, authorization)
        self.paths = []          # each request's path, in order
        self.rv = "100"
        self.lines = []
        self.gen = 0             # the current watch; older ones end
        api = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                u = urllib.parse.urlparse(self.path)
                q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}
                kind = "watch" if q.get("watch") == "1" else "list"
                with api.cv:
                    api.reqs.append((kind, q, self.headers.get("Authorization")))
                    api.paths.append(u.path)
                    if kind == "watch":
                        api.gen += 1
                        api.lines = []
                        gen = api.gen
                    rv = api.rv
                    api.cv.notify_all()
                if u.path != "/api/v1/pods":
                    self.send_error(404)
                    return
                if kind == "list":
                    body = json.dumps({"kind": "PodList", "apiVersion": "v1",
                                       "metadata": {"resourceVersion": rv},
                                       "items": []}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.flush()
                try:
                    while True:
                        with api.cv:
                            while not api.lines and api.gen == gen:
                                api.cv.wait(0.2)
                            if api.gen != gen:
                                return
                            item = api.lines.pop(0)
                        if item is None:
                            return
                        self.wfile.write(item)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        if tls:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def send(self, *items):
        with self.cv:
            for it in items:
                self.lines.append(it if isinstance(it, (bytes, type(None))) else
                                  (json.dumps(it) + "\n").encode())
            self.cv.notify_all()

    def close(self):
        self.send(None)

    def count(self, kind):
        with self.cv:
            return sum(1 for r in self.reqs if r[0] == kind)

    def last(self, kind):
        with self.cv:
            return [r for r in self.reqs if r[0] == kind][-1]

    def wait_count(self, kind, n, limit=recon.e2e.HANG):
        return wait_for(lambda: self.count(kind) >= n, limit)

    def stop(self):
        self.httpd.shutdown()
        with self.cv:
            self.gen += 1
            self.cv.notify_all()


def pod(kind, name, rv, phase="Running"):
    return {"type": kind, "object": {"kind": "Pod", "metadata": {"name": name, "namespace": "ns",
            "resourceVersion": rv, "labels": {"a": "b"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c"}]},
            "status": {"phase": phase, "conditions": [{"type": "Ready"}]}}}


def agent(tmp, conf_text, env=None):
    os.makedirs(tmp, exist_ok=True)
    conf = os.path.join(tmp, "config.yaml")
    with open(conf, "w") as f:
        f.write(conf_text)
    ag = recon.Agent(tmp, ["--config", conf])
    for k in CLUSTER_ENV:
        ag.env.pop(k, None)
    ag.env.update(env or {})
    return ag


def main():
    recon.e2e.need(recon.AGENT, recon.CTL, recon.FAKE)
    tmp = tempfile.mkdtemp(prefix="gshare-watch-")
    ns = recon.gsproto.load(tmp)
    kubelet = recon.PodResources(ns, os.path.join(tmp, "podres.sock"))
    kubelet.start()
    api = FakeApi()
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("tok-1\n")
    base = ("podResourcesSocket: %s\nreconcileInterval: 60s\nreclaimGrace: %gs\n"
            "apiTokenFile: %s\n" % (kubelet.path, GRACE, token))
    ag = agent(os.path.join(tmp, "main"), base + "podWatch: on\napiServer: http://127.0.0.1:%d/\n"
               "nodeName: node-a\napiCaFile: \"\"\n" % api.port)
    logs = [ag]
    ag.start()
    ag.t_start = time.monotonic()
    try:
        body(ag, api, kubelet, token)
    finally:
        ag.stop()
        api.stop()
    try:
        logs += https(tmp, kubelet, base)
        logs += off_and_config(tmp, kubelet, base)
    finally:
        kubelet.stop()
    if recon.failures:
        for a in logs:
            print("log of an agent:\n" + a.logtext())
        print("%d checks failed" % len(recon.failures))
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    if recon.e2e.skipped:
        print("all checks run passed; skipped: " + "; ".join(recon.e2e.skipped))
        sys.exit(recon.e2e.EXIT_SKIP)
    print("all checks passed")


def body(ag, api, kubelet, token):
    uuid = json.loads(ag.ctl("gpus"))["gpus"][0]["uuid"]

    def dev(u):
        return "%s-u%d" % (uuid, u)

    check(api.wait_count("watch", 1) is not None, "the agent lists, then watches")
    kind, q, auth = api.last("watch")
    check(api.count("list") == 1, "one list before the watch")
    check(auth == "Bearer tok-1", "the token is sent as a Bearer header (%r)" % auth)
    check(q.get("fieldSelector") == "spec.nodeName=node-a", "field selector of the node (%r)" % q)
    check(q.get("resourceVersion") == "100", "watch from the list's resourceVersion")
    check(api.last("list")[2] == "Bearer tok-1", "the list carries the token too")

    A = ag.create([dev(0)])["id"]
    Bid = ag.create([dev(1)])["id"]
    C = ag.create([dev(2)])["id"]
    kubelet.set(pods=[("ns", "pod-a", "c", [(recon.RES, [dev(0)])]),
                      ("ns", "pod-b", "c", [(recon.RES, [dev(1)])]),
                      ("ns", "pod-c", "c", [(recon.RES, [dev(2)])])])
    # The Lists of the start: the reconciler's first, the list's own kick
    # and its follow-up a grace + 1 s later.  Waited for (a busy machine
    # delays the follow-up), so that none comes after n0 is taken.
    time.sleep(max(0.5, ag.t_start + GRACE + 2 - time.monotonic()))
    wait_for(lambda: kubelet.ncalls() >= 3)
    n0 = kubelet.ncalls()

    # Bad lines: nothing kicked, nothing released, the stream goes on.
    api.send(b"garbage\n", b'{"type":\n', b"[1,2]\n", b"{}\n",
             b'{"type":"DELETED","object":' + b"[" * 5000 + b"\n",
             b'{"type":"DELETED","object":{"metadata":{"name":"' + b"x" * (2 << 20) + b'"}}}\n',
             b'{"type":"WEIRD","object":{}}\n',
             b'{"type":"DELETED","object":{}} trailing\n',
             b'{"type":"DELETED\x01","object":{}}\n')
    # A good event in two pieces, then one of a running pod: no kick.
    line = (json.dumps(pod("MODIFIED", "pod-a", "105")) + "\n").encode()
    api.send(line[:30])
    time.sleep(0.2)
    api.send(line[30:], pod("ADDED", "pod-z", "106"))
    time.sleep(1.5)
    check(ag.proc.poll() is None, "bad lines: the agent lives")
    check(kubelet.ncalls() == n0, "bad lines, running pods: no extra List (%d -> %d)"
          % (n0, kubelet.ncalls()))
    al = ag.allocs()
    check(A in al and Bid in al and C in al, "bad lines: nothing released")
    log = ag.logtext()
    check("ignoring a line longer than" in log, "the oversized line is logged")
    check("not a watch event" in log and "unknown type" in log, "bad lines logged")
    check(api.count("watch") == 1, "bad lines: the same stream goes on")

    # pod-b deleted: reclaimed a grace later, not an interval later.
    kubelet.set(pods=[("ns", "pod-a", "c", [(recon.RES, [dev(0)])]),
                      ("ns", "pod-c", "c", [(recon.RES, [dev(2)])])])
    t0 = time.monotonic()
    api.send(pod("DELETED", "pod-b", "107", "Running"))
    # Reclaimed by the watch's kick, not the next reconcile: well before
    # the 60 s interval (WATCH_KICKED_S), and not before the grace.
    t = wait_for(lambda: Bid not in ag.allocs(), WATCH_KICKED_S)
    check(t is not None and t >= GRACE - 0.1,
          "DELETED pod-b: B reclaimed %s s after (grace %g s, interval 60 s)"
          % ("%.2f" % t if t is not None else "never", GRACE))
    check(kubelet.ncalls() > n0, "the watch kicked the reconciler")
    check("pod watch: pod pod-b deleted" in ag.logtext(), "the deletion is logged")
    check(A in ag.allocs() and C in ag.allocs(), "held A and C kept")

    # pod-c fails.
    kubelet.set(pods=[("ns", "pod-a", "c", [(recon.RES, [dev(0)])])])
    api.send(pod("MODIFIED", "pod-c", "108", "Failed"))
    t = wait_for(lambda: C not in ag.allocs(), WATCH_KICKED_S)
    check(t is not None, "pod-c Failed: C reclaimed (%s s)"
          % ("%.2f" % t if t is not None else "never"))
    check(A in ag.allocs(), "A kept")
    wait_for(lambda: False, 0.5)

    # A broken stream reconnects, from the last resourceVersion, with the
    # token read afresh; no list.
    with open(token, "w") as f:
        f.write("tok-2")
    nlist = api.count("list")
    api.close()
    check(api.wait_count("watch", 2) is not None, "a broken stream reconnects")
    kind, q, auth = api.last("watch")
    check(q.get("resourceVersion") == "108", "re-watch from the last event's resourceVersion (%r)"
          % q.get("resourceVersion"))
    check(auth == "Bearer tok-2", "the token is read afresh at a reconnect (%r)" % auth)
    check(api.count("list") == nlist, "a reconnect does not list again")

    # 410 Gone: list again, watch from the new resourceVersion.
    api.rv = "500"
    api.send(pod("BOOKMARK", "", "109"),
             {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}})
    check(api.wait_count("list", nlist + 1) is not None, "410: the agent lists again")
    check(api.wait_count("watch", 3) is not None and
          api.last("watch")[1].get("resourceVersion") == "500",
          "410: watch from the new list's resourceVersion")
    check(A in ag.allocs(), "410: A (held) kept")

    # Stop while watching: prompt, not at the watch's 330 s timeout (the
    # 15 s bound only catches that; Agent.stop gives up at 20 s).
    t0 = time.monotonic()
    ag.stop()
    check(time.monotonic() - t0 < 15, "the agent stops promptly while watching (%.2f s)"
          % (time.monotonic() - t0))


def https(tmp, kubelet, base):
    if not shutil.which("openssl"):
        recon.e2e.skip("HTTPS check: openssl is not installed")
        return []
    d = os.path.join(tmp, "tls")
    os.makedirs(d)
    crt, key = os.path.join(d, "ca.crt"), os.path.join(d, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", key, "-out", crt, "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        recon.e2e.skip("HTTPS check: openssl req failed: " + r.stderr.strip())
        return []
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    api = FakeApi(ctx)
    # podWatch auto: the cluster from the environment, as in a pod.
    ag = agent(os.path.join(tmp, "https"), base + "apiCaFile: %s\n" % crt,
               {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
                "NODE_NAME": "node-b"})
    ag.start()
    try:
        check(api.wait_count("watch", 1) is not None,
              "HTTPS, podWatch auto in a cluster: the agent watches")
        if api.count("watch"):
            kind, q, auth = api.last("watch")
            check(q.get("fieldSelector") == "spec.nodeName=node-b" and auth == "Bearer tok-2",
                  "HTTPS: node from NODE_NAME, the token sent (%r, %r)" % (q, auth))
        time.sleep(0.3)
        n = kubelet.ncalls()
        api.send(pod("DELETED", "pod-q", "120"))
        check(wait_for(lambda: kubelet.ncalls() > n, WATCH_KICKED_S) is not None,
              "HTTPS: DELETED kicks a List")
    finally:
        ag.stop()
        api.stop()
    return [ag]


def off_and_config(tmp, kubelet, base):
    api = FakeApi()
    out = []
    try:
        for name, text, env, want in (
                ("off", "podWatch: off\napiServer: http://127.0.0.1:%d\nnodeName: n\n" % api.port,
                 {"NODE_NAME": "n"}, "pod watch off (podWatch off)"),
                ("auto", "", {}, "pod watch off (podWatch auto): no API server")):
            ag = agent(os.path.join(tmp, name), base + text, env)
            out.append(ag)
            ag.start()
            time.sleep(1.5)
            ag.stop()
            # No list or watch of the node's pods; the reconciler may still
            # read one pod it serves (its annotations: burst, compute policy).
            check(api.paths.count("/api/v1/pods") == 0, "podWatch %s: no list or watch of pods (%s)" % (name, api.paths[:4]))
            check(want in ag.logtext(), "podWatch %s: logged '%s'" % (name, want))
    finally:
        api.stop()
    # podWatch on outside a cluster: the agent refuses to start.
    ag = agent(os.path.join(tmp, "on"), base + "podWatch: on\n")
    out.append(ag)
    try:
        ag.start()
    except SystemExit:
        pass
    rc = ag.proc.wait(timeout=20)
    check(rc != 0 and "pod watch: no API server" in ag.logtext(),
          "podWatch on without an API server: refused (rc %s)" % rc)
    ag.proc = None
    bad = os.path.join(tmp, "bad.yaml")
    for text, want in (("podWatch: maybe\n", "bad.yaml:1: podWatch: expected auto, on or off"),
                       ("apiServer: ftp://x\n", "apiServer: expected an http:// or https:// URL"),
                       ("nodeName: Bad_Node\n", "nodeName: not a node name"),
                       ("apiTokenFile: rel/token\n", "apiTokenFile: must be an absolute path")):
        with open(bad, "w") as f:
            f.write(text)
        r = subprocess.run([recon.AGENT, "--config", bad], capture_output=True, text=True,
                           timeout=20)
        check(r.returncode == 2 and want in r.stderr, "bad config refused: " + r.stderr.strip())
    return out


if __name__ == "__main__":
    main()
