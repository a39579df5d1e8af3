"""DSSDA's link steps: the power FOC, and bandwidth + power against the exact (barrier) allocation."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.scheduler.allocation import allocate_links, cluster_terms, solve_foc
from collapipe_core.scheduler.barrier import solve_links
from collapipe_core.scheduler.optimal import cluster_candidates
from collapipe_core.scheduler.problem import build_problem, costs
from tests.core.scheduler.instances import random_instance


def test_power_foc_solution_satisfies_its_equation() -> None:
    y = np.array([0.0, 1e-12, 1e-6, 0.3, 1.0, 17.0, 1e4, 1e12])
    x = solve_foc(y)
    assert np.allclose((1 + x) * np.log1p(x) - x, y, rtol=1e-9, atol=1e-15)


def test_links_are_within_a_fraction_of_a_percent_of_the_exact_allocation() -> None:
    ratios = []
    for seed in range(60):
        state = random_instance(seed)
        pr = build_problem(state)
        if pr.shape[0] != 1:
            continue
        delta, micro = cluster_candidates(pr, 0)
        if delta.shape[0] == 0:
            continue
        pick = np.random.default_rng(seed).choice(delta.shape[0], min(6, delta.shape[0]), replace=False)
        d, m = delta[pick][:, None, :], micro[pick][:, None]
        _, _, exact = solve_links(pr, d, m)
        one = np.ones(m.shape)
        beta, power, _ = allocate_links(
            pr, d, m.astype(float), cluster_terms(pr, d, m.astype(float), one, one, 0 * one), 4
        )
        assert np.all(beta.sum(axis=-1) <= 1 + 1e-9) and np.all(power <= pr.max_power_w * (1 + 1e-12))
        rate = pr.rate_bps(beta, power)
        u = np.where(d > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
        ratios.extend((costs(pr, d, m, u, power).objective / exact).tolist())
    assert len(ratios) > 100
    assert max(ratios) <= 1.005
    assert np.mean(ratios) <= 1.0002
    assert min(ratios) >= 1 - 1e-6


def test_a_costly_queue_lowers_the_link_power() -> None:
    state = random_instance(4)
    pr = build_problem(state)
    delta, micro = cluster_candidates(pr, 0)
    d, m = delta[:1, None, :], micro[:1, None].astype(float)
    one = np.ones(m.shape)
    terms = cluster_terms(pr, d, m, one, one, 0 * one)
    calm = allocate_links(pr.with_queues(np.zeros(pr.shape)), d, m, terms)[1]
    busy = allocate_links(pr.with_queues(np.full(pr.shape, 1e6)), d, m, terms)[1]
    on = d > 0
    assert np.allclose(calm[on], np.broadcast_to(pr.max_power_w, on.shape)[on])  # free energy: full power
    assert np.all(busy[on] < calm[on])
    assert pytest.approx(1.0) == 1.0


def test_rows_without_energy_weights_get_the_figures_of_every_round_run() -> None:
    """Rows of single clusters at zero queues stop once their β repeats; a batch with a leading axis
    runs the general loop. Both must give the same β, p and score, bit for bit."""
    compared = 0
    for seed in range(40):
        pr = build_problem(random_instance(seed))
        pr = pr.with_queues(np.zeros(pr.shape))
        delta, micro = cluster_candidates(pr, 0)
        if delta.shape[0] == 0:
            continue
        rows = pr.rows(np.zeros(delta.shape[0], dtype=np.int64))
        m = micro.astype(float)
        one = np.ones(m.shape)
        per_row = allocate_links(rows, delta, m, cluster_terms(rows, delta, m, one, one, 0 * one), 4)
        d1, m1, one1 = delta[None], m[None], one[None]
        batch = allocate_links(rows, d1, m1, cluster_terms(rows, d1, m1, one1, one1, 0 * one1), 4)
        for a, b in zip(per_row, batch, strict=True):
            assert np.array_equal(a, b[0])
        compared += delta.shape[0]
    assert compared > 100
