"""The blocks of DSSDA's descent: the joint (δ, M) segment step, the links, the M step, acceptance.

Every function works on a batch of starts: δ (S, N, K), M (S, N), β and p (S, N, K).

- Segment step: for each candidate M (the grid 1, 2, 3, 4, 6, 8, … up to M_max and M ± 1, or only
  M, M ± 1 and M_max at lean effort) and each link model of :mod:`~collapipe_core.scheduler.proposals`,
  the exact segment DP of :mod:`~collapipe_core.scheduler.segments`; per cluster the (δ, M) with the
  lowest DP cost plus V·λ·σ²/(b·Σ M) is that model's proposal.
- Links: :func:`~collapipe_core.scheduler.coupling.coupled_links` for each proposal.
- Acceptance: each cluster takes the proposal that lowers the whole objective most with the other
  clusters unchanged; all such clusters change together unless that is worse than the best single change.
  The single changes are scored from per-cluster figures (O(S·C·N·K), not a full evaluation each).

Links go through the round's :class:`~collapipe_core.scheduler.linkmemo.LinkMemo` when one is given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import proposals
from collapipe_core.scheduler.coupling import coupled_links
from collapipe_core.scheduler.linkmemo import LinkMemo
from collapipe_core.scheduler.microbatches import best_microbatches, memory_limit
from collapipe_core.scheduler.problem import IntArray, RoundProblem, costs, take_last
from collapipe_core.scheduler.segments import SegmentCosts, best_segments

TOLERANCE = 1e-9
Proposal = tuple[IntArray, IntArray, FloatArray, FloatArray]
Model = tuple[Callable[..., SegmentCosts], bool]  # (model, its rows comparable: keep only the best)


@dataclass(frozen=True)
class Effort:
    """How hard DSSDA searches (the blocks are the same; the neighbourhoods differ)."""

    iterations: int  # passes of the descent
    micro_grid: bool  # the full grid of M candidates in the segment step
    gather_targets: tuple[float, ...]  # priced-links model: gather targets relative to the current one
    diversity: bool  # also propose with one device left out and with equal shares
    max_pairs: int  # threshold pairs of the segment DP (comparable models)
    diverse_pairs: int  # threshold pairs of the diversity models
    moves: int  # passes of the final local search (0: none)
    move_weights: tuple[float, ...]  # weight menu of the coupled links when judging moves
    polish_weights: tuple[float, ...]  # weight menu of the coupled links at the end
    polish_rounds: int


FULL = Effort(
    1,
    True,
    proposals.GATHER_TARGETS,
    True,
    1024,
    64,
    8,
    (1.0, 0.3, 0.1, 0.0),
    (1.0, 0.5, 0.25, 0.1, 0.03, 0.0),
    4,
)
LEAN = Effort(3, False, (0.7, 1.0, 1.4), False, 9, 9, 0, (1.0,), (1.0, 0.1, 0.0), 3)
SCALE = Effort(2, False, (1.0, 1.4), False, 4, 4, 0, (1.0,), (1.0, 0.0), 2)


def objective(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray
) -> FloatArray:
    return costs(pr, delta, micro, proposals.time_per_bit(pr, beta, power), power).objective


def links(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    rounds: int = 2,
    weights: tuple[float, ...] = (1.0,),
    memo: LinkMemo | None = None,
) -> tuple[FloatArray, FloatArray]:
    return coupled_links(pr, delta, micro, rounds, weights, memo)


def micro_step(pr: RoundProblem, delta: IntArray, beta: FloatArray, power: FloatArray) -> IntArray:
    """The exact joint M for fixed δ, β, p (any leading dimensions)."""
    lead = delta.shape[:-2]
    flat = delta.reshape((-1, *delta.shape[-2:]))
    limit = np.minimum(memory_limit(pr, flat), pr.microbatch_limit)
    u = proposals.time_per_bit(pr, beta, power).reshape(flat.shape)
    micro = best_microbatches(pr, flat, u, power.reshape(flat.shape), np.maximum(limit, 1))
    return micro.reshape((*lead, pr.shape[0]))


def micro_candidates(pr: RoundProblem, micro: IntArray, effort: Effort) -> IntArray:
    """Candidate M values (S, C, N) of the joint (δ, M) segment step."""
    limit = pr.microbatch_limit
    grid = [m for m in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) if m <= limit] if effort.micro_grid else []
    grid = sorted(set(grid) | {limit})
    fixed = np.broadcast_to(np.array(grid)[None, :, None], (micro.shape[0], len(grid), micro.shape[1]))
    around = np.stack([micro - 1, micro, micro + 1], axis=1)
    return np.asarray(np.clip(np.concatenate([fixed, around], axis=1), 1, limit), dtype=np.int64)


def segments(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    beta: FloatArray,
    power: FloatArray,
    current: IntArray,
    models: tuple[Model, ...],
    effort: Effort,
) -> tuple[IntArray, IntArray]:
    """Joint (δ, M) step under link models: the segment DP for every candidate M and model row.

    A model yields rows (start, M, cluster, r); the best M per (start, cluster, r) is kept, and over r
    too when the model's rows are comparable. Returns (δ, M) (S, proposals, N, K), (S, proposals, N).
    """
    s_count, n, k = delta.shape
    cand = micro_candidates(pr, micro, effort)  # (S, C, N)
    c_count = cand.shape[1]

    def wide(x: npt.NDArray[Any]) -> npt.NDArray[Any]:  # (S, ...) → (S, C, ...)
        return np.repeat(x[:, None], c_count, axis=1)

    floor = proposals.gather_floors(pr, delta, micro, beta, power)
    parts = [model(pr, wide(delta), cand, wide(beta), wide(power), wide(floor)) for model, _ in models]
    sizes = [p.constant.shape[0] for p in parts]
    found: dict[int, tuple[IntArray, FloatArray]] = {}
    # the comparable models are searched widely, the diversity models (one proposal per row) narrowly
    for group in (True, False):
        members = [i for i, (_, comparable) in enumerate(models) if comparable == group]
        if not members:
            continue
        fields = SegmentCosts.__dataclass_fields__
        sc = SegmentCosts(*(np.concatenate([getattr(parts[i], f) for i in members]) for f in fields))
        per_row = [sizes[i] // (s_count * c_count * n) for i in members]
        start = np.concatenate([np.repeat(wide(current).reshape(-1, k), r, axis=0) for r in per_row])
        pairs = effort.max_pairs if group else effort.diverse_pairs
        d_g, c_g = best_segments(sc, pr.num_blocks, start, max_pairs=pairs)
        offset = 0
        for i in members:
            found[i] = (d_g[offset : offset + sizes[i]], c_g[offset : offset + sizes[i]])
            offset += sizes[i]
    others = micro.sum(axis=1)[:, None, None] - micro[:, None, :]
    g = pr.V * pr.lambda_ * pr.gradient_variance / (pr.microbatch_size * (cand + others))
    out_delta, out_micro = [], []
    for i, (_, comparable) in enumerate(models):
        new, cost = found[i]
        extra = sizes[i] // (s_count * c_count * n)
        total = (cost.reshape(s_count, c_count, n, extra) + g[..., None]).transpose(
            0, 2, 3, 1
        )  # (S, N, r, C)
        nd = new.reshape(s_count, c_count, n, extra, k).transpose(0, 2, 3, 1, 4)  # (S, N, r, C, K)
        c_best = np.argmin(total, axis=3)  # (S, N, r)
        value = take_last(total, c_best[..., None])[..., 0]
        pick_d = np.take_along_axis(nd, c_best[..., None, None], axis=3)[..., 0, :]  # (S, N, r, K)
        cands = np.broadcast_to(cand.transpose(0, 2, 1)[:, :, None, :], (s_count, n, extra, c_count))
        pick_m = take_last(cands, c_best[..., None])[..., 0]
        if comparable:
            r_best = np.argmin(value, axis=2)[..., None]
            pick_d = np.take_along_axis(pick_d, r_best[..., None], axis=2)
            pick_m = take_last(pick_m, r_best)
        out_delta.append(pick_d.transpose(0, 2, 1, 3))
        out_micro.append(pick_m.transpose(0, 2, 1))
    return np.concatenate(out_delta, axis=1), np.concatenate(out_micro, axis=1)


def propose(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    beta: FloatArray,
    power: FloatArray,
    effort: Effort,
    memo: LinkMemo | None = None,
) -> Proposal:
    """New (δ, M, β, p) per start and proposal (S, P, ...): the joint segment step, then the links."""
    priced = functools.partial(proposals.priced_links, targets=effort.gather_targets)
    models: tuple[Model, ...] = ((proposals.current_links, True), (priced, True))
    if effort.diversity:
        models += ((proposals.without_each, False), (proposals.equal_shares, False))
    new_delta, new_micro = segments(pr, delta, micro, beta, power, delta, models, effort)
    new_beta, new_power = links(pr, new_delta, new_micro, memo=memo)
    if pr.shape[0] > 1:  # M couples the clusters through G(Σ M) and the maximum: the joint M step
        new_micro = micro_step(pr, new_delta, new_beta, new_power)
        new_beta, new_power = links(pr, new_delta, new_micro, memo=memo)
    return new_delta, new_micro, new_beta, new_power


def accept(
    pr: RoundProblem, old: Proposal, new: Proposal, current: FloatArray
) -> tuple[IntArray, IntArray, FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Per cluster, the best proposal that lowers the whole objective with the other clusters unchanged;
    all such clusters change together unless that is worse than the best single change.

    The objective of "cluster i takes proposal c" is assembled from per-cluster figures (the other
    clusters' maxima by the top-two rule, sums by difference), O(S·C·N·K) rather than one full
    evaluation per variant."""
    s_count = old[0].shape[0]
    single = _single_changes(pr, old, new)  # (S, C, N)
    choice = np.argmin(single, axis=1)  # (S, N)
    gain = np.min(single, axis=1)
    good = gain < current[:, None] * (1 - TOLERANCE)

    starts, clusters = np.arange(s_count)[:, None], np.arange(choice.shape[1])[None, :]

    def chosen(o: npt.NDArray[Any], nw: npt.NDArray[Any], mask: npt.NDArray[np.bool_]) -> npt.NDArray[Any]:
        sel = nw[starts, choice, clusters]  # (S, N, ...): start s, proposal choice[s, n], cluster n
        return np.where(mask[..., None] if o.ndim == 3 else mask, sel, o)

    together = [chosen(o, nw, good) for o, nw in zip(old, new, strict=True)]
    both = objective(pr, *together)
    only = np.zeros_like(good)
    only[np.arange(s_count), np.argmin(gain, axis=1)] = True
    mask = np.where((both <= np.min(gain, axis=1))[:, None], good, only & good)
    result = [chosen(o, nw, mask) for o, nw in zip(old, new, strict=True)]
    return result[0], result[1], result[2], result[3], np.any(mask, axis=1)


def _single_changes(pr: RoundProblem, old: Proposal, new: Proposal) -> FloatArray:
    """Objective (S, C, N) of each start with only cluster i changed to proposal c."""
    o = costs(pr, old[0], old[1], proposals.time_per_bit(pr, old[2], old[3]), old[3])
    c = costs(pr, new[0], new[1], proposals.time_per_bit(pr, new[2], new[3]), new[3])
    energy_o = np.sum(pr.queues * o.energy_j, axis=-1)  # (S, N)
    energy_c = np.sum(pr.queues * c.energy_j, axis=-1)  # (S, C, N)
    micro_o = old[1].astype(np.float64)
    pipe = np.maximum(_others_max(o.pipeline_s)[:, None], c.pipeline_s)
    gather = np.maximum(_others_max(o.gather_s)[:, None], c.gather_s)
    energy = (energy_o.sum(axis=-1)[:, None] - energy_o)[:, None] + energy_c
    total_micro = (micro_o.sum(axis=-1)[:, None] - micro_o)[:, None] + new[1]
    latency = pr.iterations * pipe + gather + pr.upload_s
    convergence = pr.gradient_variance / (pr.microbatch_size * total_micro)
    return np.asarray(pr.V * (latency + pr.lambda_ * convergence) + energy, dtype=np.float64)


def _others_max(x: FloatArray) -> FloatArray:
    """For each cluster the largest value of the other clusters (S, N); −∞ with one cluster."""
    if x.shape[-1] == 1:
        return np.full(x.shape, -np.inf)
    top = np.argmax(x, axis=-1)[..., None]
    first = take_last(x, top)
    second = np.max(np.where(np.arange(x.shape[-1]) == top, -np.inf, x), axis=-1, keepdims=True)
    return np.where(np.arange(x.shape[-1]) == top, second, first)
