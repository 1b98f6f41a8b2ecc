#!/usr/bin/python3
"""The agent's Prometheus endpoint (metricsAddress, agent/services/gs_metrics.c).

Starts the real agent on the fake driver as test/e2e/test_e2e.py does (its
helpers are reused) with metricsAddress on 127.0.0.1 and a free port,
creates allocations with gsharectl, runs a process holding memory under the
hook, and checks the scraped figures against `gsharectl --json`.  Then
hostile clients: an oversized request, garbage, a slow client holding a
connection while others are served, more connections than the cap; the
agent must keep serving with its accounting unchanged.

Environment: B (build dir), SANITIZE (asan: see test_e2e.py).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import test_e2e as e2e  # noqa: E402

from test_e2e import MiB, UNIT, check, free_port  # noqa: E402

MAX_CLIENTS = 64       # GS_METRICS_MAX_CLIENTS
DEADLINE = 5.0         # GS_METRICS_DEADLINE_MS
SAMPLE = re.compile(r'^([a-z_]+)(\{(.*)\})? (\d+(?:\.\d+)?)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)",?')


class MetricsAgent(e2e.Agent):
    """e2e.Agent started with a config file that sets metricsAddress."""

    def __init__(self, tmp, addr):
        config = os.path.join(tmp, "config.yaml")
        with open(config, "w") as f:
            f.write('metricsAddress: "%s"\n' % addr)
        super().__init__(tmp, ["--config", config])
        self.addr = addr
        self.config = config


def http(port, raw, timeout=5.0):
    """Sends raw bytes, returns (status, headers dict, body bytes) or
    (None, {}, data) if no HTTP response came."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    data = b""
    try:
        s.sendall(raw)
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.1 (\d{3}) ", lines[0])
    if not m:
        return None, {}, data
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(m.group(1)), hdrs, body


def complete(data):
    """Whether data holds a whole response (headers and Content-Length)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return bool(sep) and m is not None and len(body) >= int(m.group(1))


def scrape(port):
    """{(name, frozenset(labels)): value}, and the raw text."""
    status, hdrs, body = http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    if status != 200:
        raise SystemExit("scrape failed: %s %r" % (status, body[:200]))
    text = body.decode()
    out, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise SystemExit("unparsable metrics line: %r" % line)
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        v = m.group(4)
        out[(m.group(1), labels)] = float(v) if "." in v else int(v)
        # A histogram's samples are its name's _bucket, _sum and _count.
        if m.group(1) not in typed and re.sub(r"_(bucket|sum|count)$", "", m.group(1)) not in typed:
            raise SystemExit("sample before its # TYPE line: %r" % line)
    check(int(hdrs.get("content-length", -1)) == len(body) and
          hdrs.get("content-type", "").startswith("text/plain; version=0.0.4"),
          "scrape: Content-Length matches, Content-Type text/plain version 0.0.4")
    return out, text


def get(m, name, **labels):
    return m.get((name, frozenset(labels.items())))


def compare(ag, port, what):
    """Every figure of the scrape against gsharectl --json."""
    m, _ = scrape(port)
    gpus, allocs = ag.gpus(), ag.allocs()
    ok = get(m, "gshare_allocations") == len(allocs)
    nprocs = 0
    for g in gpus:
        u = g["uuid"]
        ok &= get(m, "gshare_gpu_healthy", gpu=u) == int(g["healthy"])
        ok &= get(m, "gshare_gpu_chunk_bytes", gpu=u) == g["chunk_bytes"]
        ok &= get(m, "gshare_gpu_chunks", gpu=u) == g["chunks_total"]
        ok &= get(m, "gshare_gpu_chunks_free", gpu=u) == g.get("chunks_free", 0)
        ok &= get(m, "gshare_gpu_units", gpu=u) == g["units_total"]
        ok &= get(m, "gshare_gpu_units_allocated", gpu=u) == g.get("units_allocated", 0)
        ok &= get(m, "gshare_gpu_chunks_retired", gpu=u) == 0
    for aid, a in allocs.items():
        nprocs += len({p["id"] for p in a["processes"]})
        ok &= get(m, "gshare_allocation_processes", allocation=aid) == len(a["processes"])
        for p in a["parts"]:
            lab = dict(allocation=aid, gpu=p["gpu_uuid"])
            held = sum(q["chunks_held"] for q in a["processes"] if q["gpu_index"] == p["gpu_index"])
            ok &= get(m, "gshare_allocation_quota_bytes", **lab) == p["quota_bytes"]
            ok &= get(m, "gshare_allocation_requested_bytes", **lab) == p.get("bytes_requested", 0)
            ok &= get(m, "gshare_allocation_held_bytes", **lab) == held * gpus[0]["chunk_bytes"]
            ok &= get(m, "gshare_allocation_units", **lab) == p["units"]
    ok &= get(m, "gshare_processes") == nprocs
    check(bool(ok), "%s: the scrape agrees with gsharectl --json" % what)
    if not ok:
        print(m, gpus, allocs)
    return m


def main():
    e2e.need(e2e.AGENT, e2e.CTL, e2e.CUDA, e2e.FAKE, e2e.HOOK)
    tmp = tempfile.mkdtemp(prefix="gshare-metrics-")
    port = free_port()
    ag = MetricsAgent(tmp, "127.0.0.1:%d" % port)
    ag.start()
    try:
        body(ag, port)
    finally:
        if ag.proc:
            ag.stop()
    bad_config(tmp)
    e2e.report(ag)


def bad_config(tmp):
    for addr, why in (("localhost:9400", "host must be an IPv4 address"),
                      ("1.2.3.4:0", "bad port"), ("[::1:9400", "host must be"),
                      ("9400", "expected host:port")):
        cfg = os.path.join(tmp, "bad.yaml")
        with open(cfg, "w") as f:
            f.write('metricsAddress: "%s"\n' % addr)
        r = subprocess.run([e2e.AGENT, "--config", cfg], capture_output=True, text=True, timeout=20)
        check(r.returncode == 2 and "metricsAddress" in r.stderr and why in r.stderr,
              "metricsAddress %r refused naming the key: %s" % (addr, r.stderr.strip()))


def body(ag, port):
    uuid = ag.gpus()[0]["uuid"]
    m, text = scrape(port)
    check("# HELP gshare_gpu_chunks_free " in text and "# TYPE gshare_gpu_chunks_free gauge" in text,
          "HELP and TYPE lines")
    compare(ag, port, "no allocations")

    A = ag.create(["%s-u0" % uuid, "%s-u1" % uuid])["allocation"]
    B = ag.create(["%s-u2" % uuid])["allocation"]
    ea = e2e.hook_env(ag, A)
    holder = subprocess.Popen([e2e.CUDA, "hold", "40"], env=ea, stdout=subprocess.PIPE, text=True)
    check(holder.stdout.readline().strip() == "held", "a hooked process holds 40 MiB in A")
    try:
        m = compare(ag, port, "A held by a process, B idle")
        la = dict(allocation=A["id"], gpu=uuid)
        check(get(m, "gshare_allocation_requested_bytes", **la) == 40 * MiB and
              get(m, "gshare_allocation_held_bytes", **la) >= 40 * MiB and
              get(m, "gshare_allocation_quota_bytes", **la) == 2 * UNIT and
              get(m, "gshare_allocation_processes", allocation=A["id"]) == 1 and
              get(m, "gshare_allocation_held_bytes", allocation=B["id"], gpu=uuid) == 0,
              "A: 40 MiB requested, held >= 40 MiB, quota 2 units, 1 process; B holds nothing")
        before = ag.allocs()
        hostile(ag, port)
        check(ag.alive(), "agent alive after the hostile clients")
        check(ag.allocs() == before, "accounting unchanged by the hostile clients")
        compare(ag, port, "after the hostile clients")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    check(e2e.wait_idle(ag, A["id"]) is not None, "A idle after the holder is killed")
    m = compare(ag, port, "holder gone")
    check(get(m, "gshare_processes") == 0, "no process left")


def hostile(ag, port):
    st, _, _ = http(port, b"GET /nope HTTP/1.1\r\n\r\n")
    check(st == 404, "other path: 404 (%s)" % st)
    st, hdrs, _ = http(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    check(st == 405 and "GET" in hdrs.get("allow", ""), "other method: 405 with Allow (%s)" % st)
    st, hdrs, body = http(port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    check(st == 200 and body == b"" and int(hdrs["content-length"]) > 0, "HEAD: headers only")
    st, _, _ = http(port, b"\x00\x01garbage\xff\r\n\r\n")
    check(st == 400, "garbage: 400 (%s)" % st)
    st, _, _ = http(port, b"GET /metrics\r\n\r\n")
    check(st == 400, "request line without a version: 400 (%s)" % st)
    st, _, _ = http(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n")
    check(st in (431, None), "oversized request: 431 or closed (%s)" % st)
    st, _, _ = http(port, b"x" * 9000)
    check(st in (431, 400, None), "8 KiB without a newline: refused (%s)" % st)

    # A slow client: half a request, then silence.  Others are served
    # meanwhile; the slow one is cut at the deadline.  No bound depends on
    # how busy the machine is: a server that waited for the slow client
    # would serve the scrape only once the slow one is cut, so the scrape
    # must come back while the slow connection is still open; "at the
    # deadline" is: not before it (timed from before the connect), and
    # within a bound that only catches a connection never cut.
    t0 = time.monotonic()
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET /metr")
    scrape(port)
    served = time.monotonic() - t0
    slow.setblocking(False)
    try:
        early = slow.recv(4096)  # b"" or a 408: already cut
    except BlockingIOError:
        early = None  # still open: nothing to read yet
    except ConnectionResetError:
        early = b""
    check(early is None, "a scrape is served while a slow client holds a connection (%.2f s, slow %r)"
          % (served, early))
    slow.setblocking(True)
    slow.settimeout(DEADLINE + e2e.HANG)
    try:
        got = slow.recv(4096) if early is None else early
    except (socket.timeout, ConnectionResetError):
        got = None
    dt = time.monotonic() - t0
    check(got is not None and (got == b"" or got.startswith(b"HTTP/1.1 408")) and dt >= DEADLINE - 0.1,
          "the slow client is cut at the deadline (%.1f s, %r)" % (dt, got[:20] if got else got))
    print("info: the slow client was cut after %.2f s (deadline %g s)" % (dt, DEADLINE), flush=True)
    slow.close()

    # A client that never reads its response: output is kept, not blocking.
    # A server blocked on it would serve the scrape only once the lazy
    # client is cut at its deadline: the scrape must come before that.
    lazy = socket.socket()
    lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    t0 = time.monotonic()
    lazy.connect(("127.0.0.1", port))
    for _ in range(50):
        lazy.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    scrape(port)
    served = time.monotonic() - t0
    check(served < DEADLINE, "a scrape is served while a client does not read (%.2f s, before its %g s deadline)"
          % (served, DEADLINE))

    # More connections than the cap: the extra ones are refused at once,
    # the held ones are served, and after they go scrapes work again.
    conns = []
    for _ in range(MAX_CLIENTS + 20):
        s = socket.create_connection(("127.0.0.1", port))
        conns.append(s)
    time.sleep(0.2)
    refused = 0
    end = time.monotonic() + e2e.HANG  # refused at once: this only ends a hang
    for s in conns[MAX_CLIENTS - 1:]:
        s.settimeout(max(0.1, end - time.monotonic()))
        try:
            d = s.recv(4096)
            refused += d == b"" or d.startswith(b"HTTP/1.1 503")
        except socket.timeout:
            pass
        except ConnectionResetError:
            refused += 1
    check(refused >= 20, "connections past %d refused at once (%d of %d)" % (MAX_CLIENTS, refused, 21))
    s = conns[0]
    s.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
    d = b""
    end = time.monotonic() + e2e.HANG
    try:
        while not complete(d):
            s.settimeout(max(0.1, end - time.monotonic()))
            x = s.recv(65536)
            if not x:
                break
            d += x
    except socket.timeout:
        pass
    check(d.startswith(b"HTTP/1.1 200") and b"gshare_allocations " in d,
          "a held connection under the cap is still served")
    for s in conns:
        s.close()
    lazy.close()
    time.sleep(0.2)
    compare(ag, port, "after the connection flood")


if __name__ == "__main__":
    main()
