"""The memory limit on M is the largest M whose peak activations fit, by the cost model's own count."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel.evaluate import in_flight_microbatches
from collapipe_core.scheduler.kernels import memory_limits


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_memory_limit_is_the_largest_m_that_fits_every_scheduled_device(schedule: str) -> None:
    rng = np.random.default_rng(11)
    rows, k, limit = 300, 5, 12
    delta = rng.integers(0, 4, (rows, k)) * (rng.random((rows, k)) < 0.7)
    state, activation, buffers, overhead = 3.0, 1.0, 0.5, 2.0
    memory = rng.uniform(2.0, 60.0, (rows, k))
    got = memory_limits(delta, memory, state, activation, buffers, overhead, limit, schedule == "1f1b")
    for r in range(rows):
        fits = []
        for m in range(1, limit + 1):
            in_flight = in_flight_microbatches(delta[r : r + 1], np.array([m]), schedule)[0]
            need = delta[r] * (state + in_flight * activation) + activation + m * buffers + overhead
            fits.append(bool(np.all((delta[r] == 0) | (need <= memory[r]))))
        expected = next((m for m, ok in enumerate(fits) if not ok), limit)  # M = 1..m fit, m + 1 not
        assert got[r] == expected, (r, delta[r], memory[r], fits)
    assert np.any(got == 0) and np.any((got > 0) & (got < limit))  # both bounds are exercised
