"""DSSDA's acceptance step: each single-cluster change is scored as a full evaluation would score it."""

from __future__ import annotations

import numpy as np

from collapipe_core.scheduler import dssda
from collapipe_core.scheduler.descent import LEAN, _single_changes, links, objective, propose
from collapipe_core.scheduler.problem import build_problem
from tests.core.scheduler.instances import random_round


def test_single_cluster_changes_score_as_the_full_objective() -> None:
    checked = 0
    for seed, (clusters, devices) in enumerate([(1, 4), (3, 4), (10, 5)] * 2):
        pr = build_problem(random_round(seed + 1, clusters, devices))
        try:
            dssda.check_memory(pr)
        except ValueError:
            continue
        delta, micro, _, _ = dssda._starts(pr, LEAN)
        beta, power = links(pr, delta, micro, rounds=1)
        old = (delta, micro, beta, power)
        new = propose(pr, delta, micro, beta, power, LEAN)
        fast = _single_changes(pr, old, new)  # (S, C, N)
        s_count, c_count, n = fast.shape
        for s in range(s_count):
            for c in range(c_count):
                for i in range(n):
                    variant = [o[s].copy() for o in old]
                    for v, nw in zip(variant, new, strict=True):
                        v[i] = nw[s, c, i]
                    full = objective(pr, *(v[None] for v in variant))[0]
                    np.testing.assert_allclose(fast[s, c, i], full, rtol=1e-12)
                    checked += 1
    assert checked >= 30
