"""The solvers' closed form is exactly the cost model (GPipe)."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.decision import Decision
from collapipe_core.scheduler.problem import build_problem, costs
from tests.core.scheduler.instances import random_instance


def test_closed_form_objective_equals_evaluate_on_random_decisions() -> None:
    rng = np.random.default_rng(11)
    for seed in range(40):
        state = random_instance(seed)
        pr = build_problem(state)
        n, k = pr.shape
        avail = np.flatnonzero(state.available[0])
        delta = np.zeros((n, k), dtype=np.int64)
        for c in range(n):
            slots = np.flatnonzero(state.available[c])
            delta[c, slots] = rng.multinomial(pr.num_blocks, np.ones(slots.size) / slots.size)
        assert avail.size > 0
        on = delta > 0
        beta = np.where(on, rng.dirichlet(np.ones(k), n), 0.0)
        beta = beta / beta.sum(axis=1, keepdims=True)
        power = np.where(on, rng.uniform(0.01, 1.0, (n, k)) * pr.max_power_w, 0.0)
        micro = rng.integers(1, pr.microbatch_limit + 1, n)
        ev = evaluate(state, Decision.from_arrays(delta, beta, power, micro))
        rate = pr.rate_bps(beta, power)
        u = np.where(on, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
        c = costs(pr, delta, micro, u, power)
        assert float(c.objective) == pytest.approx(ev.objective, rel=1e-12)
        assert np.allclose(c.energy_j, ev.energy_j, rtol=1e-12)
        assert np.allclose(c.pipeline_s, ev.pipeline_s, rtol=1e-12)


def test_memory_caps_match_the_memory_model() -> None:
    state = random_instance(7)
    pr = build_problem(state)
    for m in range(1, pr.microbatch_limit + 1):
        caps = pr.memory_caps(np.full(pr.shape[0], m))
        fixed = pr.overhead_bytes + pr.activation_bytes + m * pr.buffer_bytes
        fits = caps * (pr.block_state_bytes + m * pr.activation_bytes) + fixed <= pr.memory_bytes
        over = (caps + 1) * (pr.block_state_bytes + m * pr.activation_bytes) + fixed > pr.memory_bytes
        assert np.all(~pr.available | (fits | (caps == 0)))
        assert np.all(~pr.available | over | (caps == pr.num_blocks))
