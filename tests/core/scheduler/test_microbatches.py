"""The micro-batch step is the exact joint optimum over the clusters' M."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from collapipe_core.costmodel.closed_form import costs
from collapipe_core.costmodel.problem import build_problem
from collapipe_core.scheduler.microbatches import best_microbatches
from tests.core.scheduler.instances import random_instance, random_round


def test_joint_micro_batches_match_brute_force() -> None:
    checked = 0
    for seed in range(120):
        state = random_instance(seed) if seed < 80 else random_round(seed, 3, 3)
        pr = build_problem(state)
        if pr.shape[0] < 2 or pr.microbatch_limit < 2:
            continue
        rng = np.random.default_rng(seed)
        delta = np.zeros(pr.shape, dtype=np.int64)
        for c in range(pr.shape[0]):
            slots = np.flatnonzero(pr.available[c])
            delta[c, slots] = rng.multinomial(pr.num_blocks, np.ones(slots.size) / slots.size)
        limit = np.minimum(pr.memory_limit(delta[None])[0], pr.microbatch_limit)
        if np.any(limit < 1) or np.prod(limit) > 5000:
            continue
        on = delta > 0
        beta = np.where(on, 1.0 / on.sum(axis=1, keepdims=True), 0.0)
        power = np.where(on, 0.5 * pr.max_power_w, 0.0)
        u = pr.time_per_bit(beta, power)
        micro = best_microbatches(pr, delta[None], u[None], power[None], pr.memory_fits(delta[None]))[0]
        value = float(costs(pr, delta, micro, u, power).objective)
        grid = itertools.product(*(range(1, int(m) + 1) for m in limit))
        brute = min(float(costs(pr, delta, np.array(m), u, power).objective) for m in grid)
        assert value == pytest.approx(brute, rel=1e-12)
        assert np.all(micro <= limit)
        checked += 1
    assert checked >= 12
