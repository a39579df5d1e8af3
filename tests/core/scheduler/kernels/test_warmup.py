"""The warm-up compiles every signature a decision uses: after it, DSSDA compiles nothing new."""

from __future__ import annotations

from collapipe_core.scheduler import get_policy
from collapipe_core.scheduler.kernels import bandwidth, costs, links, microbatches, priced, segments, warm_up
from tests.core.scheduler.instances import random_round


def test_after_the_warm_up_a_decision_compiles_nothing() -> None:
    warm_up()
    kernels = (
        bandwidth._bandwidth_rows,
        segments._best_rows,
        microbatches._memory_limits,
        microbatches._joint,
        costs._costs,
        links._link_rows,
        priced._priced_rows,
    )
    compiled = [list(kernel.signatures) for kernel in kernels]
    assert all(len(signatures) == 1 for signatures in compiled)
    for seed in range(3):
        get_policy("dssda").decide(random_round(seed, clusters=2, devices=3))
    assert [list(kernel.signatures) for kernel in kernels] == compiled
