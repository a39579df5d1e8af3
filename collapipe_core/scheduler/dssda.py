"""DSSDA — Dynamic Segment Scheduling and Resource Allocation (docs/scheduler.md), and ``myopic``.

Each round minimises the drift-plus-penalty bound of evaluate()'s model,

    J(δ, M, β, p) = penalty(T(t), Σ_n M_n) + Σ_k Q_k(t)·E_k(t)      (problem.py: costs, round_objective)

with the penalty V·(T + λ·σ²/(b·Σ M)) (``variance``) or V·T·(1 + B_noise/(b·Σ M)), the modeled time per
unit of training progress (``noise_scale``),

over segments δ, micro-batches M_n, bandwidth shares β and powers p, by block-coordinate descent. A pass:

- candidates per cluster (:mod:`~collapipe_core.scheduler.candidates`): the exact segment DP under link
  models for candidate M and weights, the best-ranked moves, and the previous round's placement;
- the link step for each (:mod:`~collapipe_core.scheduler.links`, through the round's
  :class:`~collapipe_core.scheduler.clusters.LinkCache`);
- acceptance: the best of every candidate alone (the others as they are; the best few that move the
  pipeline's maximum also with every cluster's M re-chosen by the exact M step,
  :mod:`~collapipe_core.scheduler.microbatches`) and of one option per cluster chosen together
  (:func:`~collapipe_core.scheduler.clusters.select`), as chosen and with M re-chosen;
- then, with several clusters, the links coupled across clusters again (the weights w_n, v_n of each
  cluster's pipeline and gather times, chosen from a menu).

With the noise-scale convergence term (``problem.penalty``), each pass's steps weigh micro-batches at
the latency of the solution it starts from (T̂); every candidate is scored exactly. The first pass
explores every candidate M, later ones M ± 1 around each cluster's. Passes repeat until one no longer
lowers J by more than 1e-5 (relative). The descent works with the narrow row sets (fewer of them) first
and widens when it converges (back to narrow after an improvement); its result is polished: M for its
links, the links coupled with a finer weight menu, then M_n ± 1 of one cluster at a time with the links
coupled again. ``Decision.solver_iterations`` counts the passes.
A round where no placement fits in memory is refused with :class:`NoPlacementFits` (a ValueError) naming
the devices and shortfall.

With ``training.activation_checkpointing: auto`` DSSDA also chooses which devices recompute their TEBs'
activations. It solves the round twice: without recomputation (when some placement fits without it) and
with every device allowed to recompute (memory caps and costs as if all did); the second solution's flags
are then narrowed to the devices whose memory without recomputation exceeds their capacity
(``RoundProblem.recompute_needed``: recomputing only adds time and energy), it is descended again under
those flags and they are narrowed once more to where its result needs them. The lower objective of the
two is the decision, its flags in ``Decision.recompute``.

``myopic`` is DSSDA with every Q_k = 0 (it ignores the energy budgets).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from collapipe_core.costmodel.closed_form import costs, round_objective
from collapipe_core.costmodel.problem import RoundProblem, build_problem
from collapipe_core.decision import Decision
from collapipe_core.network import FloatArray, device_id
from collapipe_core.scheduler.arrays import IntArray, quiet
from collapipe_core.scheduler.base import register
from collapipe_core.scheduler.candidates import RowSet, Solution, Weights, candidates, segment_step
from collapipe_core.scheduler.clusters import WEIGHTS, LinkCache, coupled_links, others_max, select
from collapipe_core.scheduler.microbatches import best_microbatches
from collapipe_core.state import RoundState

TOLERANCE = 1e-5  # a pass (or a step of the final M ± 1 search) must lower J by more than this, relative
MAX_PASSES = 16
PASS_WEIGHTS = (1.0, 0.3, 0.0)  # the weight menu of the coupled links after each pass
PLUS_MINUS_ONE_CLUSTERS = 16  # most clusters of the final M ± 1 search (2N candidates of N clusters' links)
JOINT_CANDIDATES = 4  # single changes that move the pipeline's maximum tried with every M re-chosen

Figures = tuple[FloatArray, FloatArray, FloatArray, FloatArray]  # R + I·T^pipe, gather time, Σ Q·E, M


def solve(
    state: RoundState, use_queues: bool = True, max_blocks_per_device: int | None = None
) -> tuple[Decision, float]:
    """DSSDA's decision for ``state`` and its objective (queues set to 0 when ``use_queues`` is False;
    no device holding more than ``max_blocks_per_device`` TEBs when given: L − 1 spreads every cluster's
    encoder over two devices or more)."""
    pr = dataclasses.replace(build_problem(state), max_blocks_per_device=max_blocks_per_device)
    if not use_queues:
        pr = dataclasses.replace(pr, queues=np.zeros(pr.shape))
    if pr.checkpointing != "auto":
        check_memory(pr)
        return _solve(pr)
    return _solve_recomputing(pr)


def _solve_recomputing(pr: RoundProblem) -> tuple[Decision, float]:
    """Under ``auto``: the better of the round solved without recomputation and with it where memory needs
    it (module docstring)."""
    anyone = pr.with_recompute(pr.available)
    check_memory(anyone)
    options = []
    if _fits(pr):
        options.append(_solve(pr))
    first, _ = _solve(anyone)
    delta, micro = first.num_blocks(), first.num_microbatches()
    flags = pr.recompute_needed(delta, micro)
    narrowed = pr.with_recompute(flags)
    solution = (delta, micro, first.bandwidth_share(), first.power_w())
    solution, _, passes = _descend(narrowed, LinkCache(narrowed), solution)
    delta, micro, beta, power = solution
    flags = pr.recompute_needed(delta, micro)  # within the flags it descended under, where still needed
    solution = (delta, micro, beta, power)
    decision = Decision.from_arrays(
        delta, beta, power, micro, recompute=flags, solver_iterations=first.solver_iterations + passes
    )
    options.append((decision, objective(pr.with_recompute(flags), solution)))
    return min(options, key=lambda option: option[1])


def _fits(pr: RoundProblem) -> bool:
    try:
        check_memory(pr)
    except NoPlacementFits:
        return False
    return True


@quiet
def _solve(pr: RoundProblem) -> tuple[Decision, float]:
    cache = LinkCache(pr)
    delta, micro = _start(pr)
    beta, power = (x[0] for x in coupled_links(cache, delta[None], micro[None], 1, (1.0,))[:2])
    solution, current, passes = _descend(pr, cache, (delta, micro, beta, power))
    # polish: M for the links found, links coupled with a finer menu
    n, delta = pr.shape[0], solution[0]
    micro = _micro_step(pr, delta[None], solution[2][None], solution[3][None])[0] if n > 1 else solution[1]
    weights = tuple(float(w) for w in np.linspace(1.0, 0.0, 11)) if n == 2 else WEIGHTS
    beta, power = (x[0] for x in coupled_links(cache, delta[None], micro[None], 2, weights)[:2])
    fine = (delta, micro, beta, power)
    fine_value = objective(pr, fine)
    if fine_value < current:
        solution, current = fine, fine_value
    if 1 < n <= PLUS_MINUS_ONE_CLUSTERS:
        solution, current = _micro_plus_minus_one(pr, cache, solution, current)
    delta, micro, beta, power = solution
    return Decision.from_arrays(delta, beta, power, micro, solver_iterations=passes + 1), current


def _micro_plus_minus_one(
    pr: RoundProblem, cache: LinkCache, solution: Solution, current: float
) -> tuple[Solution, float]:
    """M_n ± 1 of one cluster at a time with every cluster's links coupled again, while that lowers J: the
    joint change of M and links that the steps, each fixing the other, cannot make (a cluster that takes one
    more micro-batch becomes the bottleneck, and the others then slow their links to save energy)."""
    choices = pr.microbatch_choices
    for _ in range(MAX_PASSES):
        delta, micro = solution[0], solution[1]
        fits = pr.memory_fits(delta)  # (N, C)
        index = np.searchsorted(choices, micro)  # each cluster's M among the choices
        one = np.eye(pr.shape[0], dtype=np.int64)
        steps = index + np.concatenate([one, -one])  # the next choice of M_n, then the previous one
        inside = np.all((steps >= 0) & (steps < choices.size), axis=1)
        steps = steps[inside]
        micros = choices[steps]
        micros = micros[np.all(fits[np.arange(pr.shape[0]), steps], axis=1)]
        if micros.shape[0] == 0:
            break
        deltas = np.repeat(delta[None], micros.shape[0], axis=0)
        beta, power, _, _ = coupled_links(cache, deltas, micros, 2)
        values = costs(pr, deltas, micros, pr.time_per_bit(beta, power), power).objective
        i = int(np.argmin(values))
        if values[i] >= current * (1 - TOLERANCE):
            break
        solution, current = (delta, micros[i], beta[i], power[i]), float(values[i])
    return solution, current


def _descend(pr: RoundProblem, cache: LinkCache, solution: Solution) -> tuple[Solution, float, int]:
    """Passes from ``solution`` until one lowers J no more with the wide row sets: with the narrow ones
    (fewer) first, widening once they converge and back to narrow after an improvement. Returns the
    solution, J and the number of passes."""
    current = objective(pr, solution)
    weights = (np.ones(pr.shape[0]), np.ones(pr.shape[0]))
    passes, wide = 0, False
    while passes < MAX_PASSES:
        passes += 1
        pr = _estimated(pr, solution)
        new, new_weights, value = _pass(pr, cache, solution, weights, passes == 1, wide)
        if value < current * (1 - TOLERANCE):
            solution, current, weights, wide = new, value, new_weights, False
        elif wide:
            break
        else:
            wide = True
    return solution, current, passes


def _pass(
    pr: RoundProblem, cache: LinkCache, solution: Solution, weights: Weights, explore: bool, wide: bool
) -> tuple[Solution, Weights, float]:
    """One pass: every cluster's candidates (every candidate M when ``explore``), links for each (weights
    (1, 1) and the cluster's own), the acceptance; then, with several clusters, the links coupled again
    (the new weights). Returns the solution, the weights and J."""
    cand = candidates(pr, solution, weights, explore, wide)
    w, v = weights
    own = np.flatnonzero((w[cand.owner] != 1) | (v[cand.owner] != 1))  # also under the cluster's weights
    rows = np.concatenate([np.arange(cand.owner.size), own])
    owner, delta, micro = cand.owner[rows], cand.delta[rows], cand.micro[rows]
    own_weights = np.arange(rows.size) >= cand.owner.size  # the repeated rows
    pipeline_w, gather_w = np.where(own_weights, w[owner], 1.0), np.where(own_weights, v[owner], 1.0)
    total = micro + solution[1].sum() - solution[1][owner]
    beta, power = cache.links(owner, delta, micro, pipeline_w, gather_w, 2, total)
    new, value = _accept(pr, solution, owner, (delta, micro, beta, power))
    if pr.shape[0] == 1:
        return new, weights, value
    b, p, w_new, v_new = (x[0] for x in coupled_links(cache, new[0][None], new[1][None], 2, PASS_WEIGHTS))
    coupled = (new[0], new[1], b, p)
    coupled_value = objective(pr, coupled)
    if coupled_value < value:
        return coupled, (w_new, v_new), coupled_value
    return new, (w_new, v_new), value


def _estimated(pr: RoundProblem, solution: Solution) -> RoundProblem:
    """With the noise-scale term, the problem with T̂ = the solution's latency (the steps' convergence gain
    V·T̂·B_noise/b, :attr:`RoundProblem.convergence_gain`); the variance term needs no estimate."""
    if pr.convergence != "noise_scale":
        return pr
    delta, micro, beta, power = solution
    latency = float(costs(pr, delta, micro, pr.time_per_bit(beta, power), power).latency_s)
    return dataclasses.replace(pr, latency_estimate=latency)


def _accept(pr: RoundProblem, solution: Solution, owner: IntArray, cand: Solution) -> tuple[Solution, float]:
    """The best (and its J) of: the current solution; each candidate alone (its cluster changed, the others
    as they are), and the JOINT_CANDIDATES best of those that move the pipeline's maximum (their cluster is
    at it or passes it) with every cluster's M re-chosen by the joint M step (a change that leaves the
    maximum where it is leaves the other clusters' best M as they are); one option per cluster chosen
    together by the cluster selection, as chosen and with M re-chosen."""
    n = pr.shape[0]
    now, new = _figures(pr, solution), _figures(pr, cand, owner)
    value = _single_changes(pr, now, new, owner)
    delta, micro, beta, power = _replaced(solution, cand, owner, np.array([int(np.argmin(value))]))
    options = [solution, (delta[0], micro[0], beta[0], power[0])]
    if n > 1:
        moves_max = (now[0][owner] >= now[0].max() * (1 - 1e-9)) | (new[0] > others_max(now[0])[owner])
        pool = np.flatnonzero(moves_max)
        top = pool[np.argsort(value[pool])[:JOINT_CANDIDATES]]
        delta, _, beta, power = _replaced(solution, cand, owner, top)
        chosen = _selected(pr, solution, owner, cand, now, new)
        # M re-chosen by one joint M step for the top ones and the selection
        delta, beta, power = (
            np.concatenate([x, y[None]])
            for x, y in zip((delta, beta, power), chosen[0:1] + chosen[2:], strict=True)
        )
        joint = _micro_step(pr, delta, beta, power)
        options += [(delta[j], joint[j], beta[j], power[j]) for j in range(top.size)]
        options += [chosen, (chosen[0], joint[-1], chosen[2], chosen[3])]
    values = objectives(pr, options)
    best = int(np.argmin(values))
    return options[best], float(values[best])


def _figures(pr: RoundProblem, solution: Solution, owner: IntArray | None = None) -> Figures:
    """Per cluster (with ``owner``: per single-cluster row) R + I·T^pipe, the gather time, Σ_k Q_k·E_k, M."""
    problem = pr if owner is None else pr.rows(owner)
    delta, micro, beta, power = solution
    c = costs(problem, delta, micro, problem.time_per_bit(beta, power), power)
    energy = np.sum(problem.queues * c.energy_j, axis=-1)
    return c.train_s, c.gather_s, energy, np.asarray(micro, dtype=np.float64)


def _single_changes(pr: RoundProblem, now: Figures, new: Figures, owner: IntArray) -> FloatArray:
    """J (Q,) of the solution whose figures are ``now`` (N,) with cluster owner_q's replaced by ``new``
    (Q,): the other clusters' maxima by the top-two rule, their sums by difference."""
    pipe = np.maximum(others_max(now[0])[owner], new[0])
    gather = np.maximum(others_max(now[1])[owner], new[1])
    energy = now[2].sum() - now[2][owner] + new[2]
    micro = now[3].sum() - now[3][owner] + new[3]
    value: FloatArray = round_objective(pr, pipe[:, None], gather[:, None], energy[:, None], micro[:, None])
    return value


def _replaced(solution: Solution, cand: Solution, owner: IntArray, which: IntArray) -> Solution:
    """Solutions (S, ...): the current one with cluster owner[i]'s part replaced by candidate i, i ∈ which."""
    at = (np.arange(which.size), owner[which])
    parts: list[npt.NDArray[Any]] = [np.repeat(x[None], which.size, 0) for x in solution]
    for part, option in zip(parts, cand, strict=True):
        part[at] = option[which]
    return parts[0], parts[1], parts[2], parts[3]


def _selected(
    pr: RoundProblem, solution: Solution, owner: IntArray, cand: Solution, now: Figures, new: Figures
) -> Solution:
    """One option per cluster — its current part (option 0) or one of its candidates — chosen by the
    cluster selection."""
    n = pr.shape[0]
    order = np.argsort(owner, kind="stable")
    slot = np.empty_like(owner)  # each candidate's option within its cluster: 1, 2, … in order
    slot[order] = 1 + np.arange(owner.size) - np.searchsorted(owner[order], owner[order])
    menus = []
    for current, option, missing in zip(now, new, (np.inf, 0.0, 0.0, 1.0), strict=True):
        menu = np.full((int(slot.max()) + 1, n), float(missing))
        menu[0], menu[slot, owner] = current, option
        menus.append(menu[None])
    pick = select(pr, *menus)[0]
    index = np.full(menus[0].shape[1:], -1)
    index[slot, owner] = np.arange(owner.size)
    changed = np.flatnonzero(pick > 0)
    parts: list[npt.NDArray[Any]] = [x.copy() for x in solution]
    for part, chosen in zip(parts, cand, strict=True):
        part[changed] = chosen[index[pick[changed], changed]]
    return parts[0], parts[1], parts[2], parts[3]


def objective(pr: RoundProblem, solution: Solution) -> float:
    delta, micro, beta, power = solution
    return float(costs(pr, delta, micro, pr.time_per_bit(beta, power), power).objective)


def objectives(pr: RoundProblem, solutions: list[Solution]) -> FloatArray:
    """J of each solution (S,), scored together."""
    delta, micro, beta, power = (np.stack(x) for x in zip(*solutions, strict=True))
    value: FloatArray = costs(pr, delta, micro, pr.time_per_bit(beta, power), power).objective
    return value


def _micro_step(pr: RoundProblem, delta: IntArray, beta: FloatArray, power: FloatArray) -> IntArray:
    """The exact joint M (S, N) for fixed δ, β, p (S, N, K)."""
    return best_microbatches(pr, delta, pr.time_per_bit(beta, power), power, pr.memory_fits(delta))


def _start(pr: RoundProblem) -> tuple[IntArray, IntArray]:
    """(δ, M) of the segment step under current links with every available device on an equal share at
    p_max, the best of each cluster over the candidate M."""
    n = pr.shape[0]
    share = np.where(pr.available, 1.0 / np.maximum(pr.available.sum(axis=1, keepdims=True), 1), 0.0)
    power = np.where(share > 0, pr.max_power_w, 0.0)
    everyone = (pr.available.astype(np.int64), np.ones(n, dtype=np.int64), share, power)
    delta, micro, ones = _fallback(pr), np.ones(n, dtype=np.int64), np.ones(n)
    found, _, _ = segment_step(pr, everyone, delta, [RowSet(ones, ones)], True, ("current",))
    order = np.lexsort((found.value, found.owner))  # by cluster, then by cost
    best = order[np.unique(found.owner[order], return_index=True)[1]]  # each cluster's least cost
    delta[found.owner[best]], micro[found.owner[best]] = found.delta[best], found.micro[best]
    return delta, micro


def _fallback(pr: RoundProblem) -> IntArray:
    """A placement that fits in memory at the M that needs the least: the largest caps first, per cluster."""
    caps = pr.memory_caps(np.full(pr.shape[0], pr.lightest_micro))
    order = np.argsort(-caps, axis=1, kind="stable")
    room = np.take_along_axis(caps, order, axis=1)
    delta = np.zeros(pr.shape, dtype=np.int64)
    before = np.cumsum(room, axis=1) - room  # the TEBs placed on the devices with larger caps
    np.put_along_axis(delta, order, np.clip(pr.num_blocks - before, 0, room), axis=1)
    return delta


class NoPlacementFits(ValueError):
    """A round where some cluster cannot hold the encoder even with one micro-batch."""


def check_memory(pr: RoundProblem) -> None:
    """Refuse a round where some cluster cannot hold the encoder at any M (the M that needs the least
    memory: one micro-batch when it holds b samples, the most when they split a fixed batch)."""
    choices = pr.microbatch_choices
    caps = pr.memory_caps(choices[:, None])  # (C, N, K)
    lightest = np.argmax(caps.sum(axis=2), axis=0)  # (N,) the choice of M holding the most TEBs
    lines = []
    for n in np.flatnonzero(caps.sum(axis=2).max(axis=0) < pr.num_blocks).tolist():
        m = int(choices[lightest[n]])
        held, fit = int(caps[lightest[n], n].sum()), caps[lightest[n], n]
        per_block = float(np.max(pr.memory_line(np.full(pr.shape[0], m))[1][n]))
        missing = pr.num_blocks - held
        devices = ", ".join(
            f"{device_id(n, k)} fits {fit[k]} "
            f"({f'{pr.memory_bytes[n, k] / 2**20:.1f} MiB' if pr.available[n, k] else 'unavailable'})"
            for k in range(pr.shape[1])
        )
        lines.append(
            f"cluster {n}: its devices hold {held} of {pr.num_blocks} TEBs even at M = {m} ({devices}); "
            "short "
            f"by {missing} TEB(s) = {missing * per_block:.0f} bytes ({missing * per_block / 2**20:.2f} MiB "
            f"at {per_block / 2**20:.2f} MiB per TEB, plus {pr.overhead_bytes / 2**20:.0f} MiB runtime on "
            "each device)"
        )
    if lines:
        raise NoPlacementFits("dssda: no placement fits in memory — " + "; ".join(lines))


@register("dssda")
class Dssda:
    """DSSDA: per-round drift-plus-penalty minimisation by block-coordinate descent."""

    name = "dssda"
    minimises_objective = True  # its decisions are explained against the best spread placement

    def decide(self, state: RoundState) -> Decision:
        return solve(state)[0]


@register("myopic")
class Myopic:
    """DSSDA with every virtual queue at zero: minimises latency and the convergence term only."""

    name = "myopic"
    minimises_objective = True

    def decide(self, state: RoundState) -> Decision:
        return solve(state, use_queues=False)[0]
