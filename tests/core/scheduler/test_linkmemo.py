"""The per-round link memo: the links of the whole batch, each distinct cluster problem solved once."""

from __future__ import annotations

import numpy as np

from collapipe_core.scheduler.coupling import coupled_links, options
from collapipe_core.scheduler.linkmemo import LinkMemo
from collapipe_core.scheduler.problem import RoundProblem, build_problem
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


def _distinct(delta: np.ndarray, micro: np.ndarray) -> int:
    """Distinct (cluster, M, δ) link problems of a batch."""
    n = delta.shape[1]
    return len({(c, int(m[c]), d[c].tobytes()) for d, m in zip(delta, micro, strict=True) for c in range(n)})


def test_memoised_links_equal_the_batch_solution_and_repeats_are_solved_once() -> None:
    for seed in (1, 2, 3):
        pr, delta, micro = _batch(seed)
        memo = LinkMemo(pr)
        plain = coupled_links(pr, delta, micro, 2, (1.0,))
        remembered = coupled_links(pr, delta, micro, 2, (1.0,), memo)
        for a, b in zip(plain, remembered, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-300)
        assert memo.requested_rows == 5 * pr.shape[0]
        assert memo.solved_rows == _distinct(delta, micro)
        again = coupled_links(pr, delta[:3], micro[:3], 2, (1.0,), memo)  # all remembered: nothing solved
        assert memo.solved_rows == _distinct(delta, micro)
        np.testing.assert_array_equal(again[0], remembered[0][:3])


def test_memoised_weight_menus_equal_the_plain_ones_and_share_the_unit_weights() -> None:
    pr, delta, micro = _batch(4)
    memo = LinkMemo(pr)
    coupled_links(pr, delta, micro, 2, (1.0,), memo)  # the (1, 1) options at 2 rounds, remembered
    solved = memo.solved_rows
    plain = options(pr, delta, micro, (1.0, 0.1, 0.0), 2)
    remembered = options(pr, delta, micro, (1.0, 0.1, 0.0), 2, memo)
    for name in ("beta", "power", "pipe", "gather", "energy"):
        np.testing.assert_allclose(getattr(remembered, name), getattr(plain, name), rtol=1e-12, atol=1e-300)
    assert memo.solved_rows - solved == 8 * solved  # 9 weight pairs, (1, 1) already known


def test_a_memo_keeps_rounds_apart() -> None:
    pr, delta, micro = _batch(5)
    memo = LinkMemo(pr)
    two = coupled_links(pr, delta, micro, 2, (1.0,), memo)
    three = coupled_links(pr, delta, micro, 3, (1.0,), memo)
    np.testing.assert_allclose(three[0], coupled_links(pr, delta, micro, 3, (1.0,))[0], rtol=1e-12)
    assert memo.solved_rows == 2 * _distinct(delta, micro)  # each rounds count solved on its own
    assert two[0].shape == three[0].shape
