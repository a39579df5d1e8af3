"""The compiled link allocation of single-cluster rows against the numpy allocate_links it compiles."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from collapipe_core.scheduler.allocation import PRICES, _score, allocate_links, cluster_terms, energy_weights
from collapipe_core.scheduler.coupling import WEIGHTS
from collapipe_core.scheduler.kernels.links import allocate_rows
from collapipe_core.scheduler.linkmemo import LinkMemo
from collapipe_core.scheduler.problem import RoundProblem, build_problem
from tests.core.scheduler.instances import random_instance, random_round

Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _problem(seed: int) -> RoundProblem:
    """Small and mid-size rounds; every third one without queues (no energy weight anywhere)."""
    state = random_instance(seed) if seed % 2 else random_round(seed, clusters=3, devices=4)
    if seed % 3 == 0:
        state = dataclasses.replace(state, queues=np.zeros_like(state.queues))
    return build_problem(state)


def _rows(pr: RoundProblem, rng: np.random.Generator, count: int) -> Rows:
    """Random rows (cluster, δ, M, w, v): δ spread over some available devices within their memory caps."""
    n, k = pr.shape
    room_at_one = pr.memory_caps(np.ones(n))
    fitting = np.flatnonzero(room_at_one.sum(axis=1) >= pr.num_blocks)
    if fitting.size == 0:  # no cluster holds the model alone: memory aside (the links do not read it)
        fitting, room_at_one = np.arange(n), np.where(pr.available, pr.num_blocks, 0)
    cluster = rng.choice(fitting, count)
    micro = rng.integers(1, pr.microbatch_limit + 1, count)
    delta = np.zeros((count, k), dtype=np.int64)
    for row, c in enumerate(cluster):
        caps = np.minimum(pr.memory_caps(np.full(n, micro[row]))[c], room_at_one[c])
        if caps.sum() < pr.num_blocks:
            micro[row] = 1
            caps = room_at_one[c]
        devices = np.flatnonzero(caps > 0)
        chosen = devices[rng.random(devices.size) < 0.7]
        if caps[chosen].sum() < pr.num_blocks:
            chosen = devices
        for _ in range(pr.num_blocks):  # each TEB to a chosen device with room left
            room = chosen[delta[row, chosen] < caps[chosen]]
            delta[row, rng.choice(room)] += 1
    return cluster, delta, micro, rng.choice(WEIGHTS, count), rng.choice(WEIGHTS, count)


def _numpy(pr: RoundProblem, rows: Rows, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    cluster, delta, micro, pipeline_weight, gather_weight = rows
    sub = pr.rows(cluster)
    mf = micro.astype(np.float64)
    terms = cluster_terms(sub, delta, mf, pipeline_weight, gather_weight, np.zeros(mf.shape))
    beta, power, _ = allocate_links(sub, delta, mf, terms, rounds)
    return beta, power


def _link_cost(pr: RoundProblem, rows: Rows, beta: np.ndarray, power: np.ndarray) -> np.ndarray:
    """Lat(u) + Σ_k A_k·x_k/ℓ(x_k) of each row (allocation's score) at the links β, p."""
    cluster, delta, micro, pipeline_weight, gather_weight = rows
    sub = pr.rows(cluster)
    mf = micro.astype(np.float64)
    terms = cluster_terms(sub, delta, mf, pipeline_weight, gather_weight, np.zeros(mf.shape))
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(
            delta > 0,
            power * sub.gain / (np.maximum(beta, 1e-300) * sub.bandwidth_hz * sub.noise_w_per_hz),
            0.0,
        )
        return _score(sub, terms, delta, beta, x, energy_weights(sub, delta, mf))


def _take(rows: Rows, at: slice) -> Rows:
    cluster, delta, micro, pipeline_weight, gather_weight = rows
    return cluster[at], delta[at], micro[at], pipeline_weight[at], gather_weight[at]


@pytest.mark.parametrize("seed", range(48))
def test_compiled_links_cost_what_numpy_allocate_links_costs(seed: int) -> None:
    pr = _problem(seed)
    rng = np.random.default_rng([seed, 7])
    rounds = int(rng.integers(1, 5))
    rows = _rows(pr, rng, 10)
    beta, power = allocate_rows(pr, *rows, rounds, PRICES)
    cost = _link_cost(pr, rows, beta, power)
    on = rows[1] > 0
    assert np.all(beta[~on] == 0.0) and np.all(power[~on] == 0.0)
    assert np.all(beta[on] > 0.0) and np.all(beta.sum(axis=1) <= 1.0 + 1e-12)
    assert np.all(power >= 0.0) and np.all(power <= pr.max_power_w[rows[0]])
    mixed = _numpy(pr, rows, rounds)  # every row in one numpy batch
    np.testing.assert_allclose(cost, _link_cost(pr, rows, *mixed), rtol=1e-9, atol=0.0)
    for row in range(rows[0].size):  # each row alone
        alone = _take(rows, slice(row, row + 1))
        reference = _link_cost(pr, alone, *_numpy(pr, alone, rounds))
        np.testing.assert_allclose(cost[row : row + 1], reference, rtol=1e-9, atol=0.0)
        b, p = allocate_rows(pr, *alone, rounds, PRICES)  # a row's links do not depend on the other rows
        np.testing.assert_array_equal(b[0], beta[row])
        np.testing.assert_array_equal(p[0], power[row])


def test_the_link_memo_answers_with_the_compiled_links() -> None:
    for seed in range(6):
        pr = _problem(seed)
        rows = _rows(pr, np.random.default_rng(seed), 10)
        memo = LinkMemo(pr)
        cluster, delta, micro, pipeline_weight, gather_weight = rows
        remembered = memo.links(cluster, delta, micro, pipeline_weight, gather_weight, 2)
        compiled = allocate_rows(pr, *rows, 2, PRICES)
        for a, b in zip(remembered, compiled, strict=True):
            np.testing.assert_array_equal(a, b)
