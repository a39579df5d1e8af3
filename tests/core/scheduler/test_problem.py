"""The solvers' closed form is exactly the cost model (GPipe), and the memory figures are its own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collapipe_core.costmodel.problem import build_problem, device_memory_bytes, in_flight_microbatches
from tests.core.scheduler.instances import random_instance


def test_memory_caps_match_the_memory_model() -> None:
    state = random_instance(7)
    pr = build_problem(state)
    b = state.settings.microbatch_size
    activation, buffers = b * state.profile.block_activation_bytes, 2 * b * state.profile.payload_bytes
    for m in range(1, pr.microbatch_limit + 1):
        caps = pr.memory_caps(np.full(pr.shape[0], m))
        fixed = pr.overhead_bytes + activation + m * buffers
        fits = caps * (pr.block_state_bytes + m * activation) + fixed <= pr.memory_bytes
        over = (caps + 1) * (pr.block_state_bytes + m * activation) + fixed > pr.memory_bytes
        assert np.all(~pr.available | (fits | (caps == 0)))
        assert np.all(~pr.available | over | (caps == pr.num_blocks))


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_the_memory_limit_on_M_is_the_largest_that_fits_every_scheduled_device(schedule: str) -> None:
    rng = np.random.default_rng(2)
    for seed in range(30):
        state = random_instance(seed)
        pr = dataclasses.replace(build_problem(state), schedule=schedule)
        b = state.settings.microbatch_size
        delta = np.where(pr.available, rng.integers(0, 3, pr.shape), 0)
        limit = pr.memory_limit(delta)
        for m in range(1, pr.microbatch_limit + 1):
            micro = np.full(pr.shape[0], m)
            memory = device_memory_bytes(
                delta,
                in_flight_microbatches(delta, micro, schedule),
                micro[:, None],
                pr.block_state_bytes,
                b * state.profile.block_activation_bytes,
                2 * b * state.profile.payload_bytes,
                pr.overhead_bytes,
            )
            fits = np.all((delta == 0) | (memory <= pr.memory_bytes), axis=1)
            assert not np.any((m <= limit) & ~fits)
            assert not np.any((m == limit + 1) & fits)
