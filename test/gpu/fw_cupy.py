"""CuPy: its memory pool allocates and frees under the quota; an oversize
request fails with CuPy's out-of-memory error."""
import cupy
from fw_common import check, quota

q = quota()
free, total = cupy.cuda.runtime.memGetInfo()
check(total == q, f"cupy memGetInfo total {total} == quota {q}")
pool = cupy.get_default_memory_pool()
a = cupy.ones(q // 2 // 4, dtype=cupy.float32)         # half the quota
check(float(a[-1]) == 1.0 and int(a.size) * 4 == q // 2, "cupy half-quota array usable")
oom = False
try:
    cupy.empty(q, dtype=cupy.uint8)                    # cannot fit next to a
except cupy.cuda.memory.OutOfMemoryError:
    oom = True
check(oom, "cupy oversize request raised OutOfMemoryError")
del a
pool.free_all_blocks()
b = cupy.arange(q // 2 // 4 * 3 // 2, dtype=cupy.float32)  # 3/4 of the quota now fits
check(float(b[12345]) == 12345.0, "cupy pool reuses freed memory for a 3/4-quota array")
del b
pool.free_all_blocks()
