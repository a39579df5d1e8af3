"""DSSDA's link step: the bandwidth step on the simplex, the power step's equation, and bandwidth + power
against the exact (log-barrier) allocation of ``optimal``."""

from __future__ import annotations

import dataclasses

import numpy as np

from collapipe_core.costmodel.closed_form import costs
from collapipe_core.costmodel.problem import RoundProblem, build_problem
from collapipe_core.scheduler.links import LinkTerms, allocate, bandwidth_step, solve_foc
from collapipe_core.scheduler.optimal import cluster_candidates
from collapipe_core.scheduler.optimal_links import solve_links
from tests.core.scheduler.instances import random_instance


def _latency(
    beta: np.ndarray, delta: np.ndarray, d: np.ndarray, t: LinkTerms, p_bits: float, b_bits: float
) -> np.ndarray:
    """Lat at bandwidth shares beta (..., K), u_k = 1/(d_k·β_k) on the scheduled devices."""
    on = delta > 0
    with np.errstate(divide="ignore"):
        u = np.where(on, 1.0 / (d * beta), 0.0)
    link = p_bits * u.max(axis=-1)
    gather = b_bits * (delta * u).max(axis=-1)
    download = t.download * gather if t.download[0] > 0 else 0.0
    return np.asarray(
        t.a * u.sum(axis=-1)
        + t.c1 * (np.maximum(t.stage_f, link) + np.maximum(t.stage_b, link))
        + t.c2 * gather
        + download
    )


def test_the_bandwidth_step_finds_the_least_latency_on_the_simplex() -> None:
    rng = np.random.default_rng(3)
    grid = np.linspace(0.0, 1.0, 401)
    simplex = np.array([(x, y, max(1.0 - x - y, 0.0)) for x in grid for y in grid if x + y <= 1.0 + 1e-12])
    simplex[simplex < 1e-12] = 0.0
    for trial in range(60):
        delta = rng.integers(1, 7, 3)
        if trial % 4 < 3:  # most rows leave a device out
            delta[trial % 4] = 0
        d = rng.uniform(0.5, 5, 3)  # links at a fixed SNR: the model where the step is exact
        p_bits, b_bits = rng.uniform(0.5, 2), rng.uniform(0.5, 2)
        values = [rng.uniform(0.1, 2), rng.uniform(0, 3), rng.uniform(0, 3), rng.uniform(0, 2) * (trial % 2)]
        values += [rng.uniform(0, 1), rng.uniform(0, 2), p_bits]
        terms = LinkTerms(*(np.array([x]) for x in values))
        beta, bracket = bandwidth_step(terms, delta[None], np.zeros((1, 3)), d[None], b_bits)
        on = delta > 0
        shares = simplex[np.all(simplex[:, ~on] == 0.0, axis=1)]  # unscheduled devices get nothing
        on_grid = _latency(shares, delta, d, terms, p_bits, b_bits).min()
        found = float(_latency(beta[0], delta, d, terms, p_bits, b_bits)[0])
        assert np.all(beta[0][~on] == 0.0) and np.all(beta[0][on] > 0.0)
        assert beta[0].sum() <= 1.0 + 1e-12
        assert found <= on_grid * (1 + 1e-9)
        assert found >= on_grid * (1 - 1e-2)  # the grid comes close to the optimum
        assert 0.0 <= bracket[0, 0] <= bracket[0, 1]


def test_power_foc_solution_satisfies_its_equation() -> None:
    y = np.array([0.0, 1e-12, 1e-6, 0.3, 1.0, 17.0, 1e4, 1e12])
    x = solve_foc(y)
    assert np.allclose((1 + x) * np.log1p(x) - x, y, rtol=1e-9, atol=1e-15)


def _allocate(
    pr: RoundProblem, delta: np.ndarray, micro: np.ndarray, rounds: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    one = np.ones(micro.shape)
    return allocate(pr, np.zeros(delta.shape[0], dtype=np.int64), delta, micro, one, one, rounds)


def test_links_are_within_a_fraction_of_a_percent_of_the_exact_allocation() -> None:
    ratios = []
    for seed in range(60):
        state = random_instance(seed)
        pr = build_problem(state)
        if pr.shape[0] != 1:
            continue
        delta, micro, _ = cluster_candidates(pr, 0)
        if delta.shape[0] == 0:
            continue
        pick = np.random.default_rng(seed).choice(delta.shape[0], min(6, delta.shape[0]), replace=False)
        d, m = delta[pick], micro[pick]
        _, _, exact = solve_links(pr, d[:, None, :], m[:, None])
        beta, power = _allocate(pr, d, m)
        assert np.all(beta.sum(axis=-1) <= 1 + 1e-9) and np.all(power <= pr.max_power_w * (1 + 1e-12))
        u = pr.time_per_bit(beta[:, None], power[:, None])
        ratios.extend((costs(pr, d[:, None], m[:, None], u, power[:, None]).objective / exact).tolist())
    assert len(ratios) > 100
    assert max(ratios) <= 1.005
    assert np.mean(ratios) <= 1.0002
    assert min(ratios) >= 1 - 1e-6


def test_a_costly_queue_lowers_the_link_power() -> None:
    pr = build_problem(random_instance(4))
    delta, micro, _ = cluster_candidates(pr, 0)
    d, m = delta[:1], micro[:1]
    calm = _allocate(dataclasses.replace(pr, queues=np.zeros(pr.shape)), d, m)[1]
    busy = _allocate(dataclasses.replace(pr, queues=np.full(pr.shape, 1e6)), d, m)[1]
    on = d > 0
    assert np.allclose(calm[on], np.broadcast_to(pr.max_power_w, on.shape)[on])  # free energy: full power
    assert np.all(busy[on] < calm[on])
