"""The coupling of clusters: the round's link cache, and the choice of one option per cluster."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from collapipe_core.costmodel.closed_form import round_objective
from collapipe_core.costmodel.problem import RoundProblem, build_problem
from collapipe_core.scheduler import clusters
from collapipe_core.scheduler.clusters import LinkCache, coupled_links, select
from collapipe_core.scheduler.links import allocate
from tests.core.scheduler.instances import random_round


def _batch(seed: int) -> tuple[RoundProblem, np.ndarray, np.ndarray]:
    """A round of 3 × 4 devices and 5 placements (δ, M) per cluster, two of them repeats."""
    pr = build_problem(random_round(seed, clusters=3, devices=4))
    rng = np.random.default_rng(seed)
    n, k = pr.shape
    delta = np.zeros((5, n, k), dtype=np.int64)
    for s in range(3):
        for c in range(n):
            on = np.flatnonzero(pr.available[c])
            cut = np.sort(rng.integers(0, pr.num_blocks + 1, on.size - 1))
            delta[s, c, on] = np.diff(np.concatenate([[0], cut, [pr.num_blocks]]))
    delta[3], delta[4] = delta[0], delta[1]
    micro = rng.integers(1, pr.microbatch_limit + 1, (5, n))
    micro[3], micro[4] = micro[0], micro[1]
    return pr, delta, micro


def test_the_cache_solves_each_distinct_cluster_problem_once_and_gives_its_links() -> None:
    for seed in (1, 2, 3):
        pr, delta, micro = _batch(seed)
        cache = LinkCache(pr)
        beta, power, _, _ = coupled_links(cache, delta, micro, 2, (1.0,))
        n = pr.shape[0]
        distinct = {
            (c, int(m[c]), d[c].tobytes()) for d, m in zip(delta, micro, strict=True) for c in range(n)
        }
        assert cache.requested == 5 * n and cache.solved == len(distinct)
        cluster = np.broadcast_to(np.arange(n), micro.shape).reshape(-1)
        ones = np.ones(cluster.size)
        direct = allocate(pr, cluster, delta.reshape(-1, pr.shape[1]), micro.reshape(-1), ones, ones, 2)
        np.testing.assert_allclose(beta.reshape(-1, pr.shape[1]), direct[0], rtol=1e-12)
        np.testing.assert_allclose(power.reshape(-1, pr.shape[1]), direct[1], rtol=1e-12)
        coupled_links(cache, delta[:3], micro[:3], 2, (1.0,))  # all known: nothing solved
        assert cache.solved == len(distinct)


@pytest.mark.parametrize("method", ["levels", "best responses"])
def test_the_cluster_selection_matches_every_combination(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The level search is exact for the maxima (the convergence term by prices of a micro-batch); best
    responses never end above their start."""
    if method == "best responses":
        monkeypatch.setattr(clusters, "LEVELS_LIMIT", 0)
    rng = np.random.default_rng(7)
    pr = build_problem(random_round(1, clusters=3, devices=4))
    for _ in range(40):
        w, n = 4, 3
        pipe, gather = rng.uniform(1, 2, (1, w, n)), rng.uniform(0.5, 1, (1, w, n))
        energy = rng.uniform(0, 1, (1, w, n)) * pr.V
        micro = rng.integers(1, 5, (1, w, n)).astype(float)
        pick = select(pr, pipe, gather, energy, micro)[0]
        columns = np.arange(n)
        found = round_objective(
            pr,
            pipe[0, pick, columns],
            gather[0, pick, columns],
            energy[0, pick, columns],
            micro[0, pick, columns],
        )
        every = [
            round_objective(
                pr, pipe[0, c, columns], gather[0, c, columns], energy[0, c, columns], micro[0, c, columns]
            )
            for c in (np.array(combo) for combo in itertools.product(range(w), repeat=n))
        ]
        start = every[0]
        if method == "levels":
            assert found <= min(every) * (1 + 0.02)  # the micro-batch prices come within 2 %
            same_m = select(pr, pipe, gather, energy)[0]  # without the convergence term: exact
            fixed = [
                round_objective(
                    pr, pipe[0, c, columns], gather[0, c, columns], energy[0, c, columns], np.ones(n)
                )
                for c in (np.array(combo) for combo in itertools.product(range(w), repeat=n))
            ]
            got = round_objective(
                pr,
                pipe[0, same_m, columns],
                gather[0, same_m, columns],
                energy[0, same_m, columns],
                np.ones(n),
            )
            assert got == pytest.approx(min(fixed), rel=1e-12)
        else:
            assert found <= start * (1 + 1e-12)
