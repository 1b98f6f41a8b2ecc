#!/usr/bin/python3
"""What the driver does with memory whose creator died (issue 18), with
NVML's per-process figures: A creates and exports 1 GiB (POSIX fd), B
imports and maps it, A is killed.  Prints JSON lines."""
import ctypes as C, json, os, socket, signal, time

cu = C.CDLL("libcuda.so.1")
nv = C.CDLL("libnvidia-ml.so.1")
GiB = 1 << 30

class Prop(C.Structure):
    _fields_ = [("type", C.c_int), ("requestedHandleTypes", C.c_int), ("loc_type", C.c_int), ("loc_id", C.c_int),
                ("win32", C.c_void_p), ("compressionType", C.c_ubyte), ("gpuDirectRDMACapable", C.c_ubyte),
                ("usage", C.c_ushort), ("reserved", C.c_ubyte * 4)]

class Acc(C.Structure):
    _fields_ = [("loc_type", C.c_int), ("loc_id", C.c_int), ("flags", C.c_int)]

def ck(r, what):
    if r != 0:
        raise SystemExit(f"{what}: {r}")

def ctx():
    ck(cu.cuInit(0), "cuInit")
    dev = C.c_int(); ck(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
    c = C.c_void_p(); ck(cu.cuDevicePrimaryCtxRetain(C.byref(c), dev), "retain")
    ck(cu.cuCtxSetCurrent(c), "setcurrent")

def meminfo():
    f = C.c_size_t(); t = C.c_size_t(); cu.cuMemGetInfo_v2(C.byref(f), C.byref(t)); return f.value >> 20

class NvProc(C.Structure):
    _fields_ = [("pid", C.c_uint), ("used", C.c_ulonglong), ("gi", C.c_uint), ("ci", C.c_uint)]

def nvml_procs():
    nv.nvmlInit_v2()
    h = C.c_void_p(); nv.nvmlDeviceGetHandleByIndex_v2(0, C.byref(h))
    n = C.c_uint(64); arr = (NvProc * 64)()
    r = nv.nvmlDeviceGetComputeRunningProcesses_v3(h, C.byref(n), arr)
    return {arr[i].pid: arr[i].used >> 20 for i in range(n.value)} if r == 0 else {"err": r}

def out(**kw):
    print(json.dumps(kw), flush=True)

a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
pid_a = os.fork()
if pid_a == 0:
    ctx()
    p = Prop(); p.type = 1; p.requestedHandleTypes = 1; p.loc_type = 1; p.loc_id = 0
    h = C.c_ulonglong(); ck(cu.cuMemCreate(C.byref(h), C.c_size_t(GiB), C.byref(p), C.c_ulonglong(0)), "create")
    fd = C.c_int(); ck(cu.cuMemExportToShareableHandle(C.byref(fd), h, 1, C.c_ulonglong(0)), "export")
    socket.send_fds(a, [b"x"], [fd.value])
    while True:
        time.sleep(1)
ctx()
base = meminfo()
_, fds, _, _ = socket.recv_fds(b, 1, 1)
h = C.c_ulonglong(); ck(cu.cuMemImportFromShareableHandle(C.byref(h), C.c_void_p(fds[0]), 1), "import")
va = C.c_ulonglong(); ck(cu.cuMemAddressReserve(C.byref(va), C.c_size_t(GiB), C.c_size_t(0), C.c_ulonglong(0), C.c_ulonglong(0)), "reserve")
ck(cu.cuMemMap(va, C.c_size_t(GiB), C.c_size_t(0), h, C.c_ulonglong(0)), "map")
acc = Acc(1, 0, 3); ck(cu.cuMemSetAccess(va, C.c_size_t(GiB), C.byref(acc), C.c_size_t(1)), "access")
ck(cu.cuMemsetD32_v2(va, C.c_uint(0x5a5a5a5a), C.c_size_t(GiB // 4)), "memset")
cu.cuCtxSynchronize()
out(stage="both alive", free_mib=meminfo(), nvml=nvml_procs(), a=pid_a, b=os.getpid())
fd2 = C.c_int(); r = cu.cuMemExportToShareableHandle(C.byref(fd2), h, 1, C.c_ulonglong(0))
out(stage="re-export while exporter alive", result=r)
os.kill(pid_a, signal.SIGKILL); os.waitpid(pid_a, 0); time.sleep(1)
out(stage="A killed", free_mib=meminfo(), nvml=nvml_procs())
r = cu.cuMemExportToShareableHandle(C.byref(fd2), h, 1, C.c_ulonglong(0))
out(stage="re-export after exporter died", result=r)
buf = (C.c_uint * 4)()
ck(cu.cuMemcpyDtoH_v2(buf, C.c_ulonglong(va.value + GiB - 16), C.c_size_t(16)), "dtoh")
out(stage="data after A died", word=hex(buf[0]))
# A third process imports B's kept fd after the creator died?
pid_c = os.fork()
if pid_c == 0:
    ctx(); h3 = C.c_ulonglong()
    r = cu.cuMemImportFromShareableHandle(C.byref(h3), C.c_void_p(fds[0]), 1)
    out(stage="C imports the kept fd after A died", result=r, nvml=nvml_procs())
    os._exit(0)
os.waitpid(pid_c, 0)
cu.cuMemRelease(h); os.close(fds[0])
out(stage="B released handle and fd, still mapped", free_mib=meminfo(), nvml=nvml_procs())
cu.cuMemUnmap(va, C.c_size_t(GiB)); time.sleep(0.5)
out(stage="B unmapped", free_mib=meminfo(), nvml=nvml_procs(), base_free_mib=base)
