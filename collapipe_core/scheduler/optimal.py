"""``optimal``: exhaustive search of the per-round problem, the reference DSSDA is checked against.

Every cluster's segment vectors δ (all compositions of L into the available devices, zeros allowed)
are combined with every micro-batch count M = 1..M_max that fits in memory; across clusters every
combination of those is a candidate. For each candidate the link allocation (β, p) is solved exactly
by :func:`collapipe_core.scheduler.optimal_links.solve_links` (a log-barrier method, independent of DSSDA's
allocation steps). Candidates are solved in order of a valid lower bound on their objective and the
search stops when the next lower bound reaches the best objective found (branch and bound: the result
is the exact optimum of the model up to the barrier's 1e-9 tolerance).

Lower bound of a candidate (every device at p_max; concave rates bounded by their tangent at the equal
share β = 1/m, r_k(β) ≤ c_k + d_k·β): the sum of the separately minimised link-time terms
(Σ_k u_k by Lagrangian duality, max_k u_k and max_k δ_k·u_k exactly by water-filling), the compute
energy, and the transmit energy's floor Q_k·bits_k·N0·ln 2/h_k (its value as SNR → 0). A round with a
previous placement (moves cost their transfers, problem.transfers) is solved the same way: the links'
problem then includes the moved optimizer state.

With ``training.activation_checkpointing: auto`` every device may also recompute: the candidates are the
(δ, M) that fit with recomputation on the devices that need it, each with the one flag vector that is not
dominated, the devices whose memory without recomputation exceeds their capacity
(:meth:`~collapipe_core.costmodel.problem.RoundProblem.recompute_needed`): a flag only adds a device's
forward again (time and energy) and lowers only its memory, so any other feasible flags cost at least as
much for every (β, p) (tests/core/scheduler/test_recompute.py checks it by enumerating the flags).

Small instances only: the number of candidates is the product over clusters of C(L + K − 1, K − 1)·M_max.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from collapipe_core.costmodel.closed_form import costs, penalty
from collapipe_core.costmodel.problem import RoundProblem, build_problem
from collapipe_core.decision import Decision
from collapipe_core.network import BoolArray, FloatArray
from collapipe_core.scheduler.arrays import IntArray
from collapipe_core.scheduler.base import register
from collapipe_core.scheduler.optimal_links import solve_links
from collapipe_core.state import RoundState

MAX_CANDIDATES = 450_000  # 8 devices × 12 TEBs × 8 micro-batches (403,200) fit: 2–10 s measured
CHUNK = 64


def compositions(num_blocks: int, available: BoolArray) -> IntArray:
    """Every δ with Σ δ = L, δ_k ≥ 0 and δ_k = 0 on unavailable devices (rows, in lexicographic order)."""
    slots = np.flatnonzero(available)
    out = np.zeros((0, available.size), dtype=np.int64)
    if slots.size == 0:
        return out
    rows = []
    for bars in itertools.combinations(range(num_blocks + slots.size - 1), slots.size - 1):
        edges = (-1, *bars, num_blocks + slots.size - 1)
        row = np.zeros(available.size, dtype=np.int64)
        row[slots] = np.diff(edges) - 1
        rows.append(row)
    return np.array(rows, dtype=np.int64) if rows else out


def cluster_candidates(problem: RoundProblem, cluster: int) -> tuple[IntArray, IntArray, BoolArray]:
    """(δ (C, K), M (C,), the devices that recompute (C, K)) of one cluster that respect availability and
    every device's memory (under ``auto``, recomputing where it must: module docstring)."""
    pr = problem
    delta = compositions(pr.num_blocks, pr.available[cluster])
    if delta.shape[0] == 0:
        return delta, np.zeros(0, dtype=np.int64), np.zeros(delta.shape, dtype=bool)
    auto = pr.checkpointing == "auto"
    row = pr.rows(np.array([cluster]))
    search = row.with_recompute(row.available) if auto else row
    micro = pr.microbatch_choices
    fits = search.memory_fits(delta[:, None, :])[:, 0].reshape(-1)  # (C·choices,)
    d = np.repeat(delta, micro.size, axis=0)[fits]
    m = np.tile(micro, delta.shape[0])[fits]
    if not auto:
        flags = np.broadcast_to(row.recompute, d.shape) & (d > 0) if row.recompute is not None else d < 0
        return d, m, flags
    return d, m, row.recompute_needed(d[:, None, :], m[:, None])[:, 0, :]


def solve(state: RoundState) -> tuple[Decision, float, int]:
    """The optimal decision, its objective and the number of candidates solved exactly."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _solve(state)


def _solve(state: RoundState) -> tuple[Decision, float, int]:
    pr = build_problem(state)
    n_clusters, k = pr.shape
    per_cluster = [cluster_candidates(pr, n) for n in range(n_clusters)]
    empty = [n for n, (d, _, _) in enumerate(per_cluster) if d.shape[0] == 0]
    if empty:
        raise ValueError(f"optimal: no segment placement fits in memory in cluster(s) {empty}")
    total = math.prod(d.shape[0] for d, _, _ in per_cluster)
    if total > MAX_CANDIDATES:
        raise ValueError(
            f"optimal: {total} candidates exceed {MAX_CANDIDATES}; use it on small instances "
            "(few devices, blocks and micro-batches)"
        )
    bounds = [_cluster_bounds(pr, n, d, m, r) for n, (d, m, r) in enumerate(per_cluster)]
    # with many joint candidates, each cluster solved alone gives a much tighter bound (worth its cost)
    alone = (
        [_alone(pr, n, d, m, r) for n, (d, m, r) in enumerate(per_cluster)]
        if n_clusters > 1 and total > 2 * CHUNK and pr.convergence == "variance"  # its bound needs G apart
        else []
    )
    index = np.array(list(itertools.product(*(range(d.shape[0]) for d, _, _ in per_cluster))), dtype=np.int64)
    delta = np.stack([per_cluster[n][0][index[:, n]] for n in range(n_clusters)], axis=1)
    micro = np.stack([per_cluster[n][1][index[:, n]] for n in range(n_clusters)], axis=1)
    flags = np.stack([per_cluster[n][2][index[:, n]] for n in range(n_clusters)], axis=1)
    pipe_lb = np.stack([bounds[n][0][index[:, n]] for n in range(n_clusters)], axis=1)
    gather_lb = np.stack([bounds[n][1][index[:, n]] for n in range(n_clusters)], axis=1)
    energy_lb = np.sum([bounds[n][2][index[:, n]] for n in range(n_clusters)], axis=0)
    micro_total = micro.sum(axis=1)
    latency_lb = pipe_lb.max(axis=1) + gather_lb.max(axis=1) + pr.upload_s
    lower = penalty(pr, latency_lb, micro_total) + energy_lb
    convergence = penalty(pr, np.zeros(micro_total.shape), micro_total)  # V·λ·G (the variance term only)
    for n in range(len(alone)):  # J ≥ V·(R_n + I·T^pipe_n + A_n) + Q·E_n + Σ_{m≠n} Q·E_m + V·(U + λG)
        others = energy_lb - bounds[n][2][index[:, n]]
        lower = np.maximum(lower, alone[n][index[:, n]] + others + pr.V * pr.upload_s + convergence)
    order = np.argsort(lower, kind="stable")
    best, best_at = np.inf, -1
    best_beta = best_power = np.zeros((n_clusters, k))
    solved = 0
    for start in range(0, order.size, CHUNK):
        chunk = order[start : start + CHUNK]
        chunk = chunk[lower[chunk] < best * (1 - 1e-12)]
        if chunk.size == 0:
            break
        beta, power, objective = solve_links(pr.with_recompute(flags[chunk]), delta[chunk], micro[chunk])
        solved += chunk.size
        i = int(np.argmin(objective))
        if objective[i] < best:
            best, best_at = float(objective[i]), int(chunk[i])
            best_beta, best_power = beta[i], power[i]
    decision = Decision.from_arrays(
        delta[best_at],
        best_beta,
        best_power,
        micro[best_at],
        recompute=flags[best_at] if pr.checkpointing == "auto" else None,
    )
    return decision, best, solved


def _alone(pr: RoundProblem, n: int, delta: IntArray, micro: IntArray, flags: BoolArray) -> FloatArray:
    """min over links of V·(R_n + I·T^pipe_n + gather_n) + Σ_k Q_k·E_k for each candidate of cluster n."""
    single = pr.rows(np.array([n]))
    objective = np.concatenate(
        [
            solve_links(
                single.with_recompute(flags[i : i + CHUNK, None, :]),
                delta[i : i + CHUNK, None, :],
                micro[i : i + CHUNK, None],
            )[2]
            for i in range(0, delta.shape[0], CHUNK)
        ]
    )
    convergence = penalty(pr, np.zeros(micro.shape), micro.astype(np.float64))
    out: FloatArray = objective - pr.V * pr.upload_s - convergence
    return out


def _cluster_bounds(
    pr: RoundProblem, n: int, delta: IntArray, micro: IntArray, flags: BoolArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Lower bounds of R_n + I·T^pipe_n, of the gather time and of Σ_k Q_k·E_k for each candidate of
    cluster n (R_n ≥ U + the gather time: the moved state's transfers only add)."""
    sched = delta > 0
    m = micro.astype(np.float64)
    count = sched.sum(axis=1, keepdims=True).astype(np.float64)
    # tangent of the concave full-power rate at β0 = 1/m: r(β) ≤ c + d·β
    beta0 = 1.0 / count
    bw = beta0 * pr.bandwidth_hz
    snr = pr.max_power_w[n] * pr.gain[n] / (bw * pr.noise_w_per_hz)
    rate0 = bw * np.log2(1.0 + snr)
    slope = pr.bandwidth_hz * (np.log2(1.0 + snr) - snr / ((1.0 + snr) * np.log(2.0)))
    intercept = rate0 - slope * beta0
    big = 1e300
    c = np.where(sched, intercept, big)
    d = np.where(sched, slope, 1.0)
    sum_u = _sum_inverse_bound(c, d, sched)
    max_u = 1.0 / _equalised_rate(c, d, np.ones_like(c), sched)
    max_gather = 1.0 / _equalised_rate(c, d, np.where(sched, delta, 1.0).astype(np.float64), sched)
    rows = pr.rows(np.full(delta.shape[0], n)).with_recompute(flags)
    mc = rows.micro_costs(micro)
    p_bits, tau = np.asarray(mc.payload_bits), pr.link_latency_s
    x, back = delta * mc.compute_s, mc.backward_s(delta)
    c_f = np.maximum(mc.chain_max_forward_s, np.max(np.where(sched, x, 0.0), axis=1))
    c_b = np.maximum(mc.chain_max_backward_s, np.max(np.where(sched, back, 0.0), axis=1))
    link = p_bits * max_u + tau
    pipe = (
        mc.chain_sum_s
        + np.sum(np.where(sched, x + back + 2 * tau, 0.0), axis=1)
        + 2 * p_bits * sum_u
        + (m - 1) * (np.maximum(c_f, link) + np.maximum(c_b, link))
    )
    bits = 2.0 * pr.iterations * m[:, None] * p_bits[..., None] + delta * pr.block_bits
    energy = np.where(
        sched,
        m[:, None] * delta * mc.energy_per_block_j() + bits * pr.noise_w_per_hz * np.log(2.0) / pr.gain[n],
        0.0,
    )
    gather = pr.block_bits * max_gather + tau
    return pr.upload_s + gather + pr.iterations * pipe, gather, np.sum(pr.queues[n] * energy, axis=1)


def _sum_inverse_bound(c: FloatArray, d: FloatArray, sched: BoolArray) -> FloatArray:
    """A lower bound of min Σ_k 1/(c_k + d_k·β_k) over the simplex: the Lagrangian dual at one μ."""
    inv_sqrt = np.where(sched, 1.0 / np.sqrt(d), 0.0)
    root_inv_mu = (1.0 + np.sum(np.where(sched, c / d, 0.0), axis=1)) / np.sum(inv_sqrt, axis=1)
    mu = (1.0 / root_inv_mu)[:, None] ** 2
    interior = np.sqrt(d / mu) >= c
    per_device = np.where(interior, 2.0 * np.sqrt(mu / d) - mu * c / d, 1.0 / c)
    return np.asarray(np.sum(np.where(sched, per_device, 0.0), axis=1) - mu[:, 0], dtype=np.float64)


def _equalised_rate(c: FloatArray, d: FloatArray, w: FloatArray, sched: BoolArray) -> FloatArray:
    """max over the simplex of min_k (c_k + d_k·β_k)/w_k — the best bottleneck rate (water-filling)."""
    # y = common value of (c_k + d_k β_k)/w_k; devices with c_k/w_k ≥ y need no bandwidth
    level = np.where(sched, c / w, np.inf)
    order = np.argsort(level, axis=1)
    lv = np.take_along_axis(level, order, axis=1)
    wd = np.take_along_axis(np.where(sched, w / d, 0.0), order, axis=1)
    cd = np.take_along_axis(np.where(sched, c / d, 0.0), order, axis=1)
    # using the first j devices: Σ (w y − c)/d = 1 → y = (1 + Σ c/d) / Σ w/d
    y = (1.0 + np.cumsum(cd, axis=1)) / np.maximum(np.cumsum(wd, axis=1), 1e-300)
    nxt = np.concatenate([lv[:, 1:], np.full((lv.shape[0], 1), np.inf)], axis=1)
    valid = (y >= lv) & (y <= nxt) & np.isfinite(lv)
    return np.asarray(np.max(np.where(valid, y, 0.0), axis=1), dtype=np.float64)


@register("optimal")
class Optimal:
    """Exhaustive search of the per-round problem (small instances only; the reference for DSSDA)."""

    name = "optimal"

    def decide(self, state: RoundState) -> Decision:
        return solve(state)[0]


def objective_of(state: RoundState, decision: Decision) -> float:
    """The closed-form objective of a decision (GPipe), for reports and tests."""
    delta = decision.num_blocks()
    pr = build_problem(state)
    pr = pr.with_recompute(pr.recompute_of(delta, decision.recompute()))
    u = pr.time_per_bit(decision.bandwidth_share(), decision.power_w())
    return float(costs(pr, delta, decision.num_microbatches(), u, decision.power_w()).objective)
