"""Each cluster's candidates in a descent pass: new (δ_n, M_n) the driver solves links for and judges.

- **The segment step** (:func:`segment_step`): the exact segment DP (module ``segments``) for every
  cluster, candidate M, row set and link model (module ``segment_costs``); each (cluster, M, row set,
  model) proposes its δ. Candidate M: when exploring (the start and the descent's first pass) the grid 1, 2,
  3, 4, 6, 8, 12, … ≤ M_max, M_max and M ± 1; in later passes M and M ± 1. A row set is the weights
  (w_n, v_n) the models use for the cluster's pipeline and gather times (the gather term's floor is the
  other clusters' largest gather time), and whether it runs at every candidate M or at the cluster's own
  M only.
- **Moves** (:func:`best_moves`): t TEBs from a device i to a device j of one cluster, t ∈ {1, ⌈δ_i/2⌉,
  δ_i − 1, δ_i}, ranked by the link models' costs at the cluster's M plus the upload of the moved optimizer
  state by its previous holders; the best few of each model (a local search around the DP's optimum,
  judged by the driver with links re-solved).
- **Staying** (:func:`staying`): the previous round's placement, which moves no TEB. What a move costs
  (its optimizer state's transfers, :func:`~collapipe_core.costmodel.closed_form.transfers`) depends on where
  the TEBs were, which the DP and the link models do not see; the driver scores every candidate with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.costmodel.closed_form import gather_s, latency_factor, transfers
from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray, indexed, joined
from collapipe_core.scheduler.clusters import others_max
from collapipe_core.scheduler.segment_costs import LinkRows, bandwidth_price, current_links
from collapipe_core.scheduler.segments import SegmentCosts, best_segments, segment_cost

MICRO_GRID = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
THRESHOLDS = 32  # most thresholds of each kind (X̄, Γ̄) the DP examines per row, nearest the current ones
MOVES_PER_MODEL = 4  # best-ranked moves per cluster and link model

Solution = tuple[IntArray, IntArray, FloatArray, FloatArray]  # δ (N, K), M (N,), β, p (N, K)
Weights = tuple[FloatArray, FloatArray]  # each cluster's weights w_n, v_n on its pipeline and gather times


@dataclass(frozen=True, eq=False)
class RowSet:
    """Rows of the segment step: the models' weights on each cluster's pipeline and gather times (N,), and
    whether the rows run at every candidate M (else at each cluster's own M)."""

    pipeline_weight: FloatArray
    gather_weight: FloatArray
    every_micro: bool = True


@dataclass(frozen=True, eq=False)
class Candidates:
    """Candidates (owner (Q,), δ (Q, K), M (Q,)) and their DP costs (Q,) (+ the convergence term)."""

    owner: IntArray
    delta: IntArray
    micro: IntArray
    value: FloatArray

    def distinct(self) -> Candidates:
        """Each (owner, M, δ) once, in order of first appearance."""
        keys = np.concatenate([self.owner[:, None], self.micro[:, None], self.delta], axis=1)
        return indexed(self, np.sort(np.unique(keys, axis=0, return_index=True)[1]))


def micro_candidates(pr: RoundProblem, micro: IntArray, explore: bool) -> tuple[IntArray, IntArray]:
    """Candidate M of every cluster as rows (cluster (R,), M (R,)), each once: M and its neighbours among
    the choices of M (M ± 1 with a fixed micro-batch), and when ``explore`` also the grid up to M_max (with
    a fixed batch, whose choices are the few divisors of B, every choice)."""
    choices = pr.microbatch_choices.tolist()
    limit = choices[-1]
    if not explore:
        grid: set[int] = set()
    elif pr.batch_size is not None:
        grid = set(choices)
    else:
        grid = {m for m in MICRO_GRID if m <= limit} | {limit}
    pairs = sorted(
        (c, m)
        for c in range(pr.shape[0])
        for m in grid | set(neighbours(choices, int(micro[c])))
        if m in choices
    )
    rows = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return rows[:, 0], rows[:, 1]


def neighbours(choices: list[int], micro: int) -> tuple[int, ...]:
    """M and the choices next to it (M − 1, M, M + 1 with a fixed micro-batch)."""
    if micro not in choices:
        return (micro,)
    i = choices.index(micro)
    return tuple(choices[max(i - 1, 0) : i + 2])


def segment_step(
    pr: RoundProblem,
    solution: Solution,
    incumbent: IntArray,
    row_sets: list[RowSet],
    explore: bool,
    models: tuple[str, ...] = ("current", "price"),
) -> tuple[Candidates, list[SegmentCosts], IntArray]:
    """The segment step of every cluster at its candidate M (:func:`micro_candidates`); also each
    model's segment data and each cluster's row there at its current M under the first row set (N,) (for
    ranking moves). ``incumbent`` (N, K) seeds the DP."""
    delta, micro, beta, power = solution
    n = pr.shape[0]
    every = micro_candidates(pr, micro, explore)
    sets = []  # per row set: clusters, M, weights w and v
    for s in row_sets:
        c, m = every if s.every_micro else (np.arange(n), micro)
        sets.append((c, m, s.pipeline_weight[c], s.gather_weight[c]))
    cluster, m_rows, w, v = (np.concatenate(x) for x in zip(*sets, strict=True))
    factor = latency_factor(pr, m_rows + micro.sum() - micro[cluster])  # the penalty's weight of T, ÷ V
    gather = gather_s(pr, delta, np.where(delta > 0, pr.time_per_bit(beta, power), 0.0))
    floor = others_max(gather)[cluster]  # Γ_f: the other clusters' largest gather time (−∞: none)
    rows, on = pr.rows(cluster), delta[cluster] > 0  # unscheduled devices: a share 1/(m + 1) at p_max
    share = np.where(rows.available, 1.0 / (on.sum(axis=1, keepdims=True) + 1.0), 0.0)
    beta = np.where(on, beta[cluster], share)
    power = np.where(on, power[cluster], np.where(share > 0, rows.max_power_w, 0.0))
    model = {"current": current_links, "price": bandwidth_price}
    link_rows = LinkRows(rows, delta[cluster], m_rows, beta, power, w * factor, v * factor, floor)
    parts = [model[name](link_rows) for name in models]
    seed = np.concatenate([incumbent[cluster]] * len(models))
    found, cost = best_segments(joined(parts), pr.num_blocks, seed, THRESHOLDS)
    others = micro.sum() - micro
    convergence = pr.convergence_gain / (m_rows + others[cluster])
    value = cost + np.tile(convergence, len(models))
    out = Candidates(np.tile(cluster, len(models)), found, np.tile(m_rows, len(models)), value)
    out = indexed(out, np.isfinite(value))
    at_current = np.zeros(n, dtype=np.int64)
    current = np.flatnonzero(every[1] == micro[every[0]])
    at_current[every[0][current]] = current
    return out, parts, at_current


def moves(pr: RoundProblem, delta: IntArray) -> tuple[IntArray, IntArray]:
    """(owner (Q,), its new δ (Q, K)) of every move of t TEBs from device i to another available device j of
    its cluster, t ∈ {1, ⌈δ_i/2⌉, δ_i − 1, δ_i}."""
    k = pr.shape[1]
    has = delta[:, :, None]  # (N, K, 1)
    t = np.concatenate([np.ones_like(has), (has + 1) // 2, has - 1, has], axis=2)  # (N, K, 4)
    first = np.ones(t.shape, dtype=bool)
    for col in range(1, 4):  # each distinct t once
        first[:, :, col] = np.all(t[:, :, col : col + 1] != t[:, :, :col], axis=2)
    ok = (t >= 1) & (t <= has) & first
    target = pr.available[:, None, :] & ~np.eye(k, dtype=bool)  # (N, K_from, K_to)
    c, i, j, which = np.nonzero(ok[:, :, None, :] & target[:, :, :, None])
    moved = delta[c].copy()
    step = t[c, i, which]
    moved[np.arange(c.size), i] -= step
    moved[np.arange(c.size), j] += step
    return c, moved


def best_moves(
    pr: RoundProblem, solution: Solution, models: list[SegmentCosts], at_current: IntArray
) -> Candidates:
    """The moves of every cluster's segments, the best MOVES_PER_MODEL of each cluster under each link
    model, at the cluster's M. A move's rank is its cost under the model plus what moving TEBs costs that
    the models do not see: the previous holders' upload of the moved optimizer state (its time, weighted
    as the models weigh the cluster's time, and its queue-weighted energy; ``problem.transfers``)."""
    delta, micro = solution[0], solution[1]
    owner, moved = moves(pr, delta)
    unseen = np.zeros(owner.size)
    if pr.previous is not None:  # without a previous placement no TEB has a holder to upload it
        rows = pr.rows(owner)
        upload, energy = transfers(rows, moved, np.zeros(moved.shape))  # the senders' part: no download
        weight = pr.V * latency_factor(pr, micro.sum())
        unseen = weight * (upload - pr.upload_s) + np.sum(rows.queues * energy, axis=1)
    parts = []
    for data in models:
        sub = indexed(data, at_current[owner])
        value = np.where(np.all(moved <= sub.caps, axis=1), segment_cost(sub, moved) + unseen, np.inf)
        order = np.lexsort((value, owner))  # by cluster, then by cost
        rank = np.arange(order.size) - np.searchsorted(owner[order], owner[order])
        top = order[(rank < MOVES_PER_MODEL) & np.isfinite(value[order])]
        parts.append(Candidates(owner[top], moved[top], micro[owner[top]], value[top]))
    return joined(parts)


def candidates(
    pr: RoundProblem, solution: Solution, weights: Weights, explore: bool, wide: bool = True
) -> Candidates:
    """Every cluster's candidates, each once. Row sets: weights (1, 1) at every candidate M, and the
    clusters' own weights (the link step's choice) at their M; with several clusters (``wide``) also
    weights (0.3, 1) and (0, 1) at their M. ``explore``: the M grid
    (:func:`micro_candidates`)."""
    n = pr.shape[0]
    ones = np.ones(n)
    row_sets = [RowSet(ones, ones)]
    if np.any(weights[0] != 1) or np.any(weights[1] != 1):
        row_sets.append(RowSet(*weights, every_micro=False))
    if n > 1 and wide:
        row_sets += [RowSet(w * ones, v * ones, every_micro=False) for w, v in ((0.3, 1.0), (0.0, 1.0))]
    proposed, models, at_current = segment_step(pr, solution, solution[0], row_sets, explore)
    moved = best_moves(pr, solution, models, at_current)
    parts = [proposed, moved, staying(pr, solution[1], explore)]
    return joined(parts).distinct()


def staying(pr: RoundProblem, micro: IntArray, explore: bool) -> Candidates:
    """The previous round's placement of each cluster, at every candidate M: the placement that moves
    no TEB, or, where a device can no longer hold its TEBs (unavailable, or short of memory at that M), the
    fewest moves that repair it (:func:`repaired`). The DP does not see what moves cost (it depends on where
    each TEB was); the driver scores every candidate with it."""
    if pr.previous is None or pr.previous.delta is None:
        empty = np.zeros(0, dtype=np.int64)
        return Candidates(empty, np.zeros((0, pr.shape[1]), dtype=np.int64), empty, np.zeros(0))
    cluster, m_rows = micro_candidates(pr, micro, explore)
    caps = pr.rows(cluster).memory_caps(m_rows)
    delta = repaired(pr.previous.delta[cluster], caps, pr.num_blocks)
    fits = delta.sum(axis=1) == pr.num_blocks
    return Candidates(cluster[fits], delta[fits], m_rows[fits], np.zeros(int(fits.sum())))


def repaired(previous: IntArray, caps: IntArray, blocks: int) -> IntArray:
    """Each row's δ (R, K) within its caps, moving as few TEBs as possible from ``previous``: a device over
    its cap keeps what it can hold, and the TEBs it gives up go to the nearest devices with room (the next
    ones first); rows whose caps hold fewer than L TEBs keep a short δ."""
    delta = np.minimum(previous, caps)
    k = previous.shape[1]
    for row in np.flatnonzero(delta.sum(axis=1) < blocks):
        left = blocks - int(delta[row].sum())
        over = np.flatnonzero(previous[row] > caps[row])
        origin = int(over[0]) if over.size else 0
        for j in sorted(range(k), key=lambda j: (abs(j - origin), j < origin)):
            take = min(left, int(caps[row, j] - delta[row, j]))
            delta[row, j] += take
            left -= take
    return delta
