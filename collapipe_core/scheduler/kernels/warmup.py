"""Compile every kernel once, on a tiny problem, so that the on-disk cache is warm before the first
decision (``make setup`` and the image build run it; a cold cache costs seconds, docs/scheduler.md)."""

from __future__ import annotations

import numpy as np

from collapipe_core.scheduler.kernels import priced
from collapipe_core.scheduler.kernels.bandwidth import bandwidth_rows
from collapipe_core.scheduler.kernels.costs import decision_costs
from collapipe_core.scheduler.kernels.links import warm_up_links
from collapipe_core.scheduler.kernels.microbatches import joint_microbatches, memory_limits
from collapipe_core.scheduler.kernels.segments import best_rows


def warm_up() -> None:
    """Call each kernel on a 1-row, 2-device, 3-TEB problem: compiles (or loads from the cache) the one
    signature each is called with (the wrappers pass contiguous float64/int64 arrays and plain scalars)."""
    num_blocks = 3
    delta = np.array([[2, 1]])
    terms = np.ones((6, 1))
    bandwidth_rows(delta, np.zeros((1, 2)), np.ones((1, 2)), terms, 1.0, 1.0)
    cost = np.cumsum(np.ones((1, 2, num_blocks)), axis=2)
    link_s = np.ones((1, 2))
    best_rows(cost, cost, np.full((1, 2), num_blocks), np.ones((1, 2)), link_s, terms, delta, num_blocks, 2)
    memory_limits(delta, np.ones((1, 2)), 1.0, 1.0, 1.0, 1.0, 2, False)
    joint_microbatches(
        delta[None],
        link_s[None],
        link_s[None],
        np.ones((1, 1), dtype=np.int64),
        np.ones((3, 1, 2)),
        np.ones(8),
        2,
    )
    decision_costs(
        delta[None],
        np.ones((1, 1), dtype=np.int64),
        link_s[None],
        link_s[None],
        np.ones((3, 1, 2)),
        np.ones(11),
    )
    warm_up_links()
    priced.warm_up()
