"""A minimal stand-in for gshare-agent's control socket (proto/gshare.proto).

Serves the ctl protocol with the gs_ctl framing (4-byte little-endian length
+ one serialized Request / Reply) on a unix socket, with N fake GPUs of U
units each.  Tests drive it in-process: set_healthy(), set_lent(),
set_delay(), stop()/start(); counts() says how many connections, ListAllocations
and Watch lists it saw.  Also runnable as a script for the benchmark
and manual checks:

    standin_agent.py --socket /tmp/agent.sock --gpus 8 --units 140
"""
import argparse
import errno
import hashlib
import os
import socket
import struct
import sys
import tempfile
import threading
import time

MAX_MSG = 4 << 20


def uuid_of(i):
    return "GPU-%08x-1111-2222-3333-%012x" % (0x5eed0000 + i, i)


class Agent:
    def __init__(self, ctl, path, ngpus=2, units=8, unit_bytes=1 << 30, numa=None, sockroot=None):
        self.ctl = ctl
        self.path = path
        self.unit_bytes = unit_bytes
        self.sockroot = sockroot or tempfile.mkdtemp(prefix="gshare-alloc-")
        self.lock = threading.Condition()
        self.gpus = []
        for i in range(ngpus):
            self.gpus.append(dict(index=i, uuid=uuid_of(i), units=units, healthy=True, lent=0, restoring=[],
                                  numa=(numa[i] if numa else -1), pci="0000:%02x:00.0" % (0x10 + i)))
        self.allocs = {}     # id -> dict(ids=[sorted], parts=[...], dir=...)
        self.units_allocated = {}  # GPU index -> units held by allocations
        self.generation = 1
        self.delay = 0.0
        self.meet = 0        # set_meet(): CreateAllocations wait for this many
        self.arrived = 0
        self.requests = 0
        self.accepted = 0    # connections accepted
        self.ops = {}        # requests served, by op
        self.watch_sent = 0  # GPU lists sent on Watch streams
        self.srv = None
        self.stopping = False
        self.conns = set()

    # ---- test controls ----
    def set_healthy(self, i, ok):
        with self.lock:
            self.gpus[i]["healthy"] = ok
            self._bump()

    def set_lent(self, i, n):
        with self.lock:
            self.gpus[i]["lent"] = n
            self._bump()

    def set_restoring(self, i, units):
        """Units of GPU i held by allocations the agent has yet to restore."""
        with self.lock:
            self.gpus[i]["restoring"] = list(units)
            self._bump()

    def set_delay(self, s):
        self.delay = s

    def set_meet(self, n, limit=20.0):
        """The next n CreateAllocations each wait until all n have arrived
        (limit seconds at most, to end a hang): they are answered only if
        the caller sends them in parallel.  0 turns it off."""
        with self.lock:
            self.meet, self.arrived, self.meet_limit = n, 0, limit

    def met(self):
        """How many CreateAllocations arrived since set_meet()."""
        with self.lock:
            return self.arrived

    def clear(self):
        with self.lock:
            self.allocs.clear()
            self.units_allocated.clear()
            self._bump()

    def counts(self):
        """(connections accepted, ListAllocations served, Watch lists sent)."""
        with self.lock:
            return self.accepted, self.ops.get("list_allocations", 0), self.watch_sent

    def allocations(self):
        with self.lock:
            return {k: list(v["ids"]) for k, v in self.allocs.items()}

    def _bump(self):
        self.generation += 1
        self.lock.notify_all()

    # ---- serving ----
    def start(self):
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.path)
        self.srv.listen(64)
        self.stopping = False
        threading.Thread(target=self._accept, args=(self.srv,), daemon=True).start()

    def stop(self):
        """Goes away: closes the listener and every connection (Watch streams
        see EOF), removes the socket file."""
        self.stopping = True
        if self.srv:
            try:
                self.srv.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.srv.close()
            self.srv = None
        with self.lock:
            for c in list(self.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.lock.notify_all()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _accept(self, srv):
        while not self.stopping:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with self.lock:
                self.conns.add(c)
                self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _recv_exact(c, n):
        buf = b""
        while len(buf) < n:
            d = c.recv(n - len(buf))
            if not d:
                return None
            buf += d
        return buf

    def _send(self, c, rep):
        data = rep.SerializeToString()
        c.sendall(struct.pack("<I", len(data)) + data)

    def _serve(self, c):
        try:
            while True:
                hdr = self._recv_exact(c, 4)
                if hdr is None:
                    return
                (n,) = struct.unpack("<I", hdr)
                if n == 0 or n > MAX_MSG:
                    return
                body = self._recv_exact(c, n)
                if body is None:
                    return
                req = self.ctl.Request()
                req.ParseFromString(body)
                self.requests += 1
                if self.delay:
                    time.sleep(self.delay)
                op = req.WhichOneof("op")
                with self.lock:
                    self.ops[op] = self.ops.get(op, 0) + 1
                if op == "create_allocation" and self.meet:
                    with self.lock:
                        self.arrived += 1
                        self.lock.notify_all()
                        self.lock.wait_for(lambda: self.arrived >= self.meet, self.meet_limit)
                if op == "watch":
                    self._watch(c)
                    return
                self._send(c, self._handle(req, op))
        except OSError:
            pass
        finally:
            with self.lock:
                self.conns.discard(c)
            c.close()

    def _list(self):
        rep = self.ctl.Reply()
        lg = rep.list_gpus
        for g in self.gpus:
            alloc = self.units_allocated.get(g["index"], 0)
            lg.gpus.add(index=g["index"], uuid=g["uuid"], name="Fake GPU", numa_node=g["numa"],
                        total_bytes=(g["units"] + 1) * self.unit_bytes, reserve_bytes=self.unit_bytes,
                        chunk_bytes=256 << 20, unit_bytes=self.unit_bytes, units_total=g["units"],
                        units_allocated=alloc, units_lent=g["lent"], healthy=g["healthy"],
                        pci_bus_id=g["pci"], health_reason="" if g["healthy"] else "fake: marked unhealthy",
                        units_restoring=g["restoring"])
        lg.generation = self.generation
        return rep

    def _watch(self, c):
        seen = None
        while not self.stopping:
            with self.lock:
                if seen == self.generation:
                    self.lock.wait(0.2)
                if self.stopping:
                    return
                if seen == self.generation:
                    continue
                seen = self.generation
                rep = self._list()
                self.watch_sent += 1
            self._send(c, rep)

    def _err(self, e, msg):
        rep = self.ctl.Reply()
        rep.error = -e
        rep.message = msg
        return rep

    def _handle(self, req, op):
        with self.lock:
            if op == "list_gpus":
                return self._list()
            if op == "list_allocations":
                rep = self.ctl.Reply()
                rep.list_allocations.SetInParent()
                for aid, a in self.allocs.items():
                    self._fill(rep.list_allocations.allocations.add(), aid, a)
                return rep
            if op == "create_allocation":
                return self._create(list(req.create_allocation.device_ids))
            if op == "release_allocation":
                r = req.release_allocation
                aid = r.id
                if not aid and r.device_ids:
                    ids = sorted(r.device_ids)
                    aid = next((k for k, a in self.allocs.items() if a["ids"] == ids), "")
                if aid not in self.allocs:
                    return self._err(errno.ENOENT, "no allocation '%s'" % (r.id or ",".join(r.device_ids)))
                for p in self.allocs.pop(aid)["parts"]:
                    self.units_allocated[p["index"]] -= p["units"]
                self._bump()
                rep = self.ctl.Reply()
                rep.release_allocation.SetInParent()
                return rep
            return self._err(errno.EINVAL, "unknown request")

    def _fill(self, m, aid, a):
        m.id = aid
        m.device_ids.extend(a["ids"])
        m.socket_dir = a["dir"]
        for p in a["parts"]:
            m.parts.add(gpu_index=p["index"], gpu_uuid=p["uuid"], units=p["units"],
                        quota_bytes=p["units"] * self.unit_bytes, chunks_quota=p["units"] * 4)

    def _create(self, ids):
        if not ids:
            return self._err(errno.EINVAL, "no device IDs")
        if len(set(ids)) != len(ids):
            return self._err(errno.EINVAL, "duplicate device IDs")
        byuuid = {g["uuid"]: g for g in self.gpus}
        parts = {}
        for d in ids:
            uuid, _, unit = d.rpartition("-u")
            g = byuuid.get(uuid)
            if g is None or not unit.isdigit() or int(unit) >= g["units"]:
                return self._err(errno.EINVAL, "device ID '%s' is not a gshare.io/gpumem device of this node" % d)
            if not g["healthy"]:
                return self._err(errno.EIO, "GPU %s is unhealthy" % uuid)
            parts[g["index"]] = parts.get(g["index"], 0) + 1
        key = sorted(ids)
        for aid, a in self.allocs.items():
            if a["ids"] == key:
                rep = self.ctl.Reply()
                self._fill(rep.create_allocation.allocation, aid, a)
                rep.create_allocation.created = False
                return rep
        for aid, a in self.allocs.items():
            clash = set(a["ids"]) & set(key)
            if clash:
                return self._err(errno.EBUSY, "device ID '%s' is already part of allocation %s" % (sorted(clash)[0], aid))
        aid = "a" + hashlib.sha256("\n".join(key).encode()).hexdigest()[:15]
        d = os.path.join(self.sockroot, aid)
        os.makedirs(d, exist_ok=True)
        a = dict(ids=key, dir=d, parts=[dict(index=i, uuid=self.gpus[i]["uuid"], units=n)
                                        for i, n in sorted(parts.items())])
        self.allocs[aid] = a
        for p in a["parts"]:
            self.units_allocated[p["index"]] = self.units_allocated.get(p["index"], 0) + p["units"]
        self._bump()
        rep = self.ctl.Reply()
        self._fill(rep.create_allocation.allocation, aid, a)
        rep.create_allocation.created = True
        return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--units", type=int, default=8)
    ap.add_argument("--tmp", default=None)
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gsproto
    tmp = a.tmp or tempfile.mkdtemp(prefix="gshare-standin-")
    ns = gsproto.load(tmp)
    agent = Agent(ns.ctl, a.socket, a.gpus, a.units, numa=[i % 2 for i in range(a.gpus)],
                  sockroot=os.path.join(tmp, "alloc"))
    agent.start()
    print("standin agent: %d GPUs x %d units on %s" % (a.gpus, a.units, a.socket), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        agent.stop()


if __name__ == "__main__":
    main()
