"""The compiled closed form scores each decision of a batch on its own: any leading dimensions, and the
same figures as scoring the decisions one at a time (tests/core/scheduler/test_problem.py checks the
figures themselves against the cost model)."""

from __future__ import annotations

import numpy as np

from collapipe_core.scheduler.problem import build_problem, costs
from tests.core.scheduler.instances import random_round


def test_a_batch_scores_every_decision_as_alone() -> None:
    rng = np.random.default_rng(3)
    pr = build_problem(random_round(4, clusters=3, devices=4))
    n, k = pr.shape
    delta = rng.integers(0, 5, (2, 3, n, k)) * (rng.random((2, 3, n, k)) < 0.7)
    micro = rng.integers(1, 6, (2, 3, n))
    u = rng.uniform(1e-7, 1e-5, (2, 3, n, k))
    power = rng.uniform(0.0, 0.3, (2, 3, n, k))
    batch = costs(pr, delta, micro, u, power)
    assert batch.objective.shape == (2, 3) and batch.energy_j.shape == (2, 3, n, k)
    for s in range(2):
        for c in range(3):
            alone = costs(pr, delta[s, c], micro[s, c], u[s, c], power[s, c])
            assert float(alone.objective) == batch.objective[s, c]
            assert np.array_equal(alone.pipeline_s, batch.pipeline_s[s, c])
            assert np.array_equal(alone.gather_s, batch.gather_s[s, c])
            assert np.array_equal(alone.energy_j, batch.energy_j[s, c])
    # u is not read where δ = 0 (the callers pass ∞ there)
    off = np.where(delta > 0, u, np.inf)
    assert np.array_equal(costs(pr, delta, micro, off, power).objective, batch.objective)
