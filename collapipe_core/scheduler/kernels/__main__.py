"""``python -m collapipe_core.scheduler.kernels``: compile (or load from the cache) every kernel once."""

import time

from collapipe_core.scheduler.kernels.warmup import warm_up

start_s = time.perf_counter()
warm_up()
print(f"scheduler kernels ready in {time.perf_counter() - start_s:.1f} s")
