"""DSSDA — Dynamic Segment Scheduling and Resource Allocation (docs/scheduler.md), and ``myopic``.

Each round minimises the drift-plus-penalty bound of evaluate()'s model,

    J(δ, M, β, p) = V·(T(t) + λ·G(M)) + Σ_k Q_k(t)·E_k(t),

over segments δ (Σ_k δ_k = L per cluster, contiguous in device order, δ_k = 0 allowed, 0 on unavailable
devices), micro-batches M_n ∈ 1..M_max, bandwidth shares β (Σ_k β_k ≤ 1 per cluster) and powers
0 ≤ p_k ≤ p_max, subject to every device's memory. Block-coordinate descent, each block solved exactly
for the others fixed (every formula: docs/scheduler.md and the modules named):

1. segments δ jointly with M — dynamic programming over (devices, TEBs placed); the makespan's and the
   gather's maxima are made exact by a device order and enumerated thresholds
   (:mod:`~collapipe_core.scheduler.segments`), run under several link models
   (:mod:`~collapipe_core.scheduler.proposals`) whose proposals are re-allocated and scored exactly;
2. links β, p — bandwidth by common latency targets (closed-form KKT structures), power per link by the
   first-order condition of its (V + Q_k)-weighted cost (:mod:`~collapipe_core.scheduler.allocation`),
   clusters coupled through the Lagrange shares of the maxima (:mod:`~collapipe_core.scheduler.coupling`);
3. micro-batches M — exact joint 1-D search over the clusters (:mod:`~collapipe_core.scheduler.microbatches`);
4. a local search over one cluster's moves, links re-solved (:mod:`~collapipe_core.scheduler.neighbours`).

The descent stops when J improves by less than 1e-9 (relative) or after the pass limit of the search
effort (FULL, LEAN or SCALE by the round's size, :mod:`~collapipe_core.scheduler.descent`). One
:class:`~collapipe_core.scheduler.linkmemo.LinkMemo` per round lets every step reuse the links of a
cluster (δ_n, M_n, weights, rounds) already solved; it changes the time, not the decision.
``Decision.solver_iterations`` counts the passes. A round where no placement fits in memory is refused
with a ValueError naming the devices and the shortfall.

``myopic`` is DSSDA with every Q_k = 0 (it ignores the energy budgets).
"""

from __future__ import annotations

import numpy as np

from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, device_id
from collapipe_core.scheduler import neighbours, proposals
from collapipe_core.scheduler.base import register
from collapipe_core.scheduler.descent import (
    FULL,
    LEAN,
    SCALE,
    TOLERANCE,
    Effort,
    accept,
    links,
    micro_step,
    objective,
    propose,
    segments,
)
from collapipe_core.scheduler.linkmemo import LinkMemo
from collapipe_core.scheduler.problem import IntArray, RoundProblem, build_problem, quiet
from collapipe_core.state import RoundState

# Efforts by size (docs/scheduler.md, "Effort" and "Decision time", has what each searches, the decision
# times and LEAN's measured quality against FULL at 12 devices).
FULL_DEVICES = 10  # full search up to this many devices, FULL_BLOCKS TEBs and FULL_MICRO micro-batches
FULL_BLOCKS = 8
FULL_MICRO = 8
SCALE_DEVICES = 200  # from this many devices on, the scale effort


def effort_for(pr: RoundProblem) -> Effort:
    """The search effort for the round's size: FULL, LEAN or SCALE (same blocks, smaller neighbourhoods)."""
    n, k = pr.shape
    if n * k <= FULL_DEVICES and pr.num_blocks <= FULL_BLOCKS and pr.microbatch_limit <= FULL_MICRO:
        return FULL
    return SCALE if n * k >= SCALE_DEVICES else LEAN


def solve(state: RoundState, use_queues: bool = True, effort: Effort | None = None) -> tuple[Decision, float]:
    """DSSDA's decision for ``state`` and its objective (queues set to 0 when ``use_queues`` is False).

    The steps represent infeasible candidates by ∞ and mask them, so IEEE warnings are silenced here
    (once for the whole round: :func:`~collapipe_core.scheduler.problem.quiet`)."""
    return _solve(state, use_queues, effort)


@quiet
def _solve(state: RoundState, use_queues: bool, effort: Effort | None) -> tuple[Decision, float]:
    pr = build_problem(state)
    if not use_queues:
        pr = pr.with_queues(np.zeros(pr.shape))
    check_memory(pr)
    effort = effort or effort_for(pr)
    memo = LinkMemo(pr)  # each cluster's links for a given (δ_n, M_n, weights, rounds) are solved once
    delta, micro, _, _ = _starts(pr, effort)
    beta, power = links(pr, delta, micro, rounds=1, memo=memo)  # a start: the proposals re-solve the links
    current = objective(pr, delta, micro, beta, power)
    iterations = 1
    for _ in range(effort.iterations):
        iterations += 1
        proposal = propose(pr, delta, micro, beta, power, effort, memo)
        delta, micro, beta, power, improved = accept(pr, (delta, micro, beta, power), proposal, current)
        new = objective(pr, delta, micro, beta, power)
        converged = bool(np.all(new >= current * (1 - TOLERANCE)))
        current = new
        if converged or not np.any(improved):
            break
    s = int(np.argmin(current))
    delta, micro, beta, power = delta[s : s + 1], micro[s : s + 1], beta[s : s + 1], power[s : s + 1]
    for _ in range(effort.moves):
        d, m, b, p, value, now = neighbours.best_move(
            pr, delta[0], micro[0], effort.move_weights, (beta[0], power[0])
        )
        iterations += 1
        if value >= now * (1 - TOLERANCE):
            break
        delta, micro, beta, power = d[None], m[None], b[None], p[None]
    # polish: M for the links found (the moves already tried every M of a lone cluster), links to full
    # precision (coupled across clusters)
    fine_micro = micro_step(pr, delta, beta, power) if pr.shape[0] > 1 or effort.moves == 0 else micro
    weights = effort.polish_weights
    if pr.shape[0] == 2 and effort is FULL:
        weights = tuple(float(w) for w in np.linspace(1.0, 0.0, 11))  # ties between two clusters
    fine = links(pr, delta, fine_micro, effort.polish_rounds, weights, memo)
    options = [(micro, beta, power), (fine_micro, *fine)]
    values = [float(objective(pr, delta, m, b, p)[0]) for m, b, p in options]
    micro, beta, power = options[int(np.argmin(values))]
    decision = Decision.from_arrays(delta[0], beta[0], power[0], micro[0], solver_iterations=iterations)
    return decision, min(values)


def check_memory(pr: RoundProblem) -> None:
    """Refuse a round where some cluster cannot hold the encoder even with one micro-batch."""
    caps = pr.memory_caps(np.ones(pr.shape[0]))
    short = [n for n in range(pr.shape[0]) if caps[n].sum() < pr.num_blocks]
    if not short:
        return
    per_block = pr.block_state_bytes + pr.activation_bytes
    lines = []
    for n in short:
        missing = pr.num_blocks - int(caps[n].sum())
        devices = ", ".join(
            f"{device_id(n, k)} fits {int(caps[n, k])} "
            f"({'unavailable' if not pr.available[n, k] else f'{pr.memory_bytes[n, k] / 2**20:.1f} MiB'})"
            for k in range(pr.shape[1])
        )
        lines.append(
            f"cluster {n}: its devices hold {int(caps[n].sum())} of {pr.num_blocks} TEBs even at M = 1 "
            f"({devices}); short by {missing} TEB(s) = {missing * per_block:.0f} bytes "
            f"({missing * per_block / 2**20:.2f} MiB at {per_block / 2**20:.2f} MiB per TEB, plus "
            f"{pr.overhead_bytes / 2**20:.0f} MiB runtime on each device)"
        )
    raise ValueError("dssda: no placement fits in memory — " + "; ".join(lines))


def _starts(pr: RoundProblem, effort: Effort) -> tuple[IntArray, IntArray, FloatArray, FloatArray]:
    """The initial (δ, M, β, p) (1, ...): the joint segment step with every available device on an
    equal share of its cluster's band at p_max; the scheduled devices keep those shares."""
    n, _k = pr.shape
    share = 1.0 / np.maximum(pr.available.sum(axis=1, keepdims=True), 1)
    beta = np.where(pr.available, share, 0.0)[None]
    power = np.where(beta > 0, pr.max_power_w, 0.0)
    scheduled = pr.available.astype(np.int64)[None]  # every link as given
    micro = np.ones((1, n), dtype=np.int64)
    current = _fallback(pr)[None]
    delta, micro = segments(
        pr, scheduled, micro, beta, power, current, ((proposals.current_links, True),), effort
    )
    delta, micro = delta[:, 0], micro[:, 0]
    on = delta > 0
    beta = np.where(on, 1.0 / np.maximum(on.sum(axis=-1, keepdims=True), 1), 0.0)
    return delta, micro, beta, np.where(on, pr.max_power_w, 0.0)


def _fallback(pr: RoundProblem) -> IntArray:
    """A placement that fits in memory at M = 1: the largest caps first, per cluster."""
    caps = pr.memory_caps(np.ones(pr.shape[0]))
    delta = np.zeros(pr.shape, dtype=np.int64)
    for n in range(pr.shape[0]):
        left = pr.num_blocks
        for k in np.argsort(-caps[n], kind="stable"):
            take = min(left, int(caps[n, k]))
            delta[n, k] = take
            left -= take
    return delta


@register("dssda")
class Dssda:
    """DSSDA: per-round drift-plus-penalty minimisation by block-coordinate descent."""

    name = "dssda"

    def decide(self, state: RoundState) -> Decision:
        return solve(state)[0]


@register("myopic")
class Myopic:
    """DSSDA with every virtual queue at zero: minimises latency and the convergence term only."""

    name = "myopic"

    def decide(self, state: RoundState) -> Decision:
        return solve(state, use_queues=False)[0]
