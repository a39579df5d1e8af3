"""The segment DP is exact: it matches brute force over every composition."""

from __future__ import annotations

import itertools

import numpy as np

from collapipe_core.scheduler.arrays import indexed
from collapipe_core.scheduler.segments import SegmentCosts, best_segments, segment_cost


def _random_costs(rng: np.random.Generator, rows: int, k: int, L: int) -> SegmentCosts:
    d = np.arange(1, L + 1)
    fixed, slope = rng.uniform(0, 1, (rows, k)), rng.uniform(0, 1, (rows, k))
    curve = rng.uniform(0, 0.2, (rows, k, L)).cumsum(axis=2)  # any increasing extra cost
    per_block = rng.uniform(0.05, 1.0, (rows, k))
    return SegmentCosts(
        cost=fixed[..., None] + slope[..., None] * d + curve,
        gather_s=per_block[..., None] * d * rng.uniform(0.5, 1.5, (rows, k, 1)),
        caps=rng.integers(0, L + 1, (rows, k)),
        compute_s=rng.uniform(0.01, 0.5, (rows, k)),
        link_s=rng.uniform(0.01, 1.0, (rows, k)),
        backward_ratio=rng.choice([1.0, 1.5, 2.0], rows),  # full training 2; a frozen base's less
        c1=rng.uniform(0, 3, rows) * (rng.random(rows) < 0.8),
        c2=rng.uniform(0, 3, rows),
        c3=rng.uniform(0, 3, rows) * (rng.random(rows) < 0.5),
        stage_f=rng.uniform(0, 0.5, rows),
        stage_b=rng.uniform(0, 1.0, rows),
        gather_floor=rng.uniform(0, 1.0, rows) * (rng.random(rows) < 0.5),
        constant=rng.uniform(0, 1, rows),
    )


def test_dp_matches_brute_force_over_every_composition() -> None:
    rng = np.random.default_rng(5)
    for k, L in ((2, 5), (3, 4), (4, 6), (5, 3), (4, 9), (6, 7)):
        sc = _random_costs(rng, 40, k, L)
        comps = np.array([c for c in itertools.product(range(L + 1), repeat=k) if sum(c) == L])
        current = np.zeros((40, k), dtype=np.int64)
        current[:, 0] = L
        delta, cost = best_segments(sc, L, current)
        for r in range(40):
            ok = comps[np.all(comps <= sc.caps[r], axis=1)]
            if ok.size == 0:
                assert not np.isfinite(cost[r])
                continue
            brute = segment_cost(indexed(sc, np.full(len(ok), r)), ok).min()
            assert np.isclose(cost[r], brute, rtol=1e-12), (k, L, r)
            assert delta[r].sum() == L and np.all(delta[r] <= sc.caps[r])
