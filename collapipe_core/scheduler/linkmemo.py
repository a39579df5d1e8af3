"""A per-round memo of DSSDA's link allocation, one cluster at a time.

With the gather floor at zero (as the link step uses it) a cluster's links depend only on that cluster:
its devices' constants, its segments δ_n and micro-batches M_n, its weights (w_n, v_n) on the pipeline
and gather maxima, and the rounds of the link descent. The descent asks for the same cluster links many
times in one round — proposals that leave a cluster as it is, two link models proposing the same
segments, the links re-solved after an M step that kept M, the weight (1, 1) of every menu. The memo
solves each distinct (cluster, δ_n, M_n, w_n, v_n, rounds) once, all new ones of a request in one call of
the compiled :func:`~collapipe_core.scheduler.kernels.links.allocate_rows`: per row, what
:func:`~collapipe_core.scheduler.allocation.allocate_links` computes for that cluster alone
(:meth:`~collapipe_core.scheduler.problem.RoundProblem.rows`), the same arithmetic; a row's answer does
not depend on the other rows of the request (numpy's full batch can differ in the last bits: Newton's
stopping test in its power step is batch-wide, and numpy's exp/log round differently from libm's).

A memo belongs to one RoundProblem (one round, one set of queues); a new round needs a new memo.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.allocation import PRICES
from collapipe_core.scheduler.kernels.links import allocate_rows
from collapipe_core.scheduler.problem import IntArray, RoundProblem


class LinkMemo:
    """Links (β, p) per (cluster, δ_n, M_n, w_n, v_n, rounds) of one round's problem."""

    def __init__(self, pr: RoundProblem) -> None:
        self.problem = pr
        self._index: dict[bytes, int] = {}
        k = pr.shape[1]
        self._beta: FloatArray = np.zeros((0, k))
        self._power: FloatArray = np.zeros((0, k))
        self.requested_rows = 0  # rows asked for, for the benchmarks' hit rate
        self.solved_rows = 0  # rows actually solved

    def links(
        self,
        cluster: IntArray,
        delta: IntArray,
        micro: IntArray,
        pipeline_weight: FloatArray,
        gather_weight: FloatArray,
        rounds: int,
    ) -> tuple[FloatArray, FloatArray]:
        """β, p (R, K) for rows of cluster index (R,), δ (R, K), M (R,), weights (R,)."""
        rows = cluster.shape[0]
        # one row of float64 per request: cluster, M, w, v, rounds, δ (filled in place: fewer numpy calls)
        key_matrix = np.empty((rows, 5 + delta.shape[1]))
        key_matrix[:, 0] = cluster
        key_matrix[:, 1] = micro
        key_matrix[:, 2] = pipeline_weight
        key_matrix[:, 3] = gather_weight
        key_matrix[:, 4] = float(rounds)
        key_matrix[:, 5:] = delta
        keys = [row.tobytes() for row in key_matrix]
        index = self._index
        missing: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key not in index and key not in missing:
                missing[key] = i
        if missing:
            new = np.fromiter(missing.values(), dtype=np.int64, count=len(missing))
            beta, power = _solve(
                self.problem,
                cluster[new],
                delta[new],
                micro[new],
                pipeline_weight[new],
                gather_weight[new],
                rounds,
            )
            start = self._beta.shape[0]
            for offset, key in enumerate(missing):
                index[key] = start + offset
            self._beta = np.concatenate([self._beta, beta])
            self._power = np.concatenate([self._power, power])
            self.solved_rows += new.size
        self.requested_rows += rows
        at = np.fromiter((index[key] for key in keys), dtype=np.int64, count=rows)
        return self._beta[at], self._power[at]


def _solve(
    pr: RoundProblem,
    cluster: IntArray,
    delta: IntArray,
    micro: IntArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
    rounds: int,
) -> tuple[FloatArray, FloatArray]:
    """β, p (R, K) of each cluster's links alone, rows of cluster (R,), δ (R, K), M (R,), weights (R,)."""
    return allocate_rows(pr, cluster, delta, micro, pipeline_weight, gather_weight, rounds, PRICES)
