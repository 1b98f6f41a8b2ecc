"""JAX: default preallocation sizes itself from the quota, not the GPU, and a
jitted computation gives the right result."""
import numpy as np
import jax
import jax.numpy as jnp
from fw_common import MiB, check, quota

q = quota()
dev = jax.devices()[0]
stats = dev.memory_stats()
limit = stats.get("bytes_limit", 0)
# XLA preallocates XLA_PYTHON_CLIENT_MEM_FRACTION (0.75) of the memory it sees.
check(0 < limit <= q, f"jax bytes_limit {limit // MiB} MiB <= quota {q // MiB} MiB")
check(limit >= 0.5 * q, f"jax bytes_limit {limit // MiB} MiB sized from the quota")


@jax.jit
def f(a, b):
    return jnp.tanh(a @ b) + 1.0


rng = np.random.default_rng(0)
a = rng.standard_normal((512, 512), dtype=np.float32)
b = rng.standard_normal((512, 512), dtype=np.float32)
got = np.asarray(f(a, b))
want = np.tanh(a.astype(np.float64) @ b.astype(np.float64)) + 1.0
err = np.linalg.norm(got - want) / np.linalg.norm(want)
check(err < 1e-2, f"jax jitted result matches numpy (rel err {err:.2e})")
