"""The micro-batch step compiled (the model: ``scheduler/microbatches.py``): the memory limit on M of each
row (:func:`memory_limits`) and the exact joint M of each start (:func:`joint_microbatches`), one row or
start at a time in scalar loops. Same arithmetic as the numpy formulation they replaced.
"""

from __future__ import annotations

import math

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.kernels.arrays import floats, ints
from collapipe_core.scheduler.kernels.costs import stage_terms
from collapipe_core.scheduler.kernels.scalars import INF, fmax, jit, row_sum, sort_order
from collapipe_core.scheduler.problem import IntArray

# digests of the files whose jit helpers this one compiles in (why: scalars.py's docstring)
SCALARS_SHA256 = "c3b4f4258ac946f7"
COSTS_SHA256 = "992cfa80590e6db5"


def memory_limits(
    delta: IntArray,
    memory_bytes: FloatArray,
    block_state_bytes: float,
    activation_bytes: float,
    buffer_bytes: float,
    overhead_bytes: float,
    microbatch_limit: int,
    one_f_one_b: bool,
) -> IntArray:
    """Largest M ≤ ``microbatch_limit`` (R,) such that every M' ≤ M fits every scheduled device of the row
    (0 if not even M = 1): δ_k·(state + in_flight_k(M')·activation) + activation + M'·buffers + overhead ≤
    memory_k (``costmodel.device_memory_bytes``).

    delta, memory_bytes (R, K). in_flight is M for GPipe and min(C − i_k, M) for 1F1B (C = scheduled
    devices + 2, i_k the device's 1-based position among them), as ``costmodel.in_flight_microbatches``.
    """
    limits = np.empty(delta.shape[0], dtype=np.int64)
    (memory,) = floats(memory_bytes)
    (d,) = ints(delta)
    _memory_limits(
        d,
        memory,
        float(block_state_bytes),
        float(activation_bytes),
        float(buffer_bytes),
        float(overhead_bytes),
        int(microbatch_limit),
        bool(one_f_one_b),
        limits,
    )
    return limits


@jit
def _memory_limits(delta, memory, state, activation, buffers, overhead, limit, one_f_one_b, out):  # type: ignore[no-untyped-def]
    rows, k = delta.shape
    for r in range(rows):
        stages = 2
        for i in range(k):
            stages += delta[r, i] > 0
        best = 0
        for m in range(1, limit + 1):
            fits = True
            position = 0
            for i in range(k):
                if delta[r, i] == 0:
                    continue
                position += 1
                in_flight = min(stages - position, m) if one_f_one_b else m
                need = delta[r, i] * (state + in_flight * activation) + activation + m * buffers + overhead
                if need > memory[r, i]:
                    fits = False
            if not fits:
                break
            best = m
        out[r] = best


def joint_microbatches(
    delta: IntArray,
    time_per_bit: FloatArray,
    power: FloatArray,
    limit: IntArray,
    devices: FloatArray,
    constants: FloatArray,
    microbatch_limit: int,
) -> IntArray:
    """The exact joint M (S, N) of each start (``microbatches.best_microbatches`` has the formulas).

    delta, time_per_bit u, power (S, N, K); limit (S, N) ≥ 1; devices (3, N, K): a_k, e_k, Q_k;
    constants: S0, c_F, c_B, I, P, V, V·λ·σ², b.
    """
    s_count, n, _k = delta.shape
    micro = np.empty((s_count, n), dtype=np.int64)
    u, p, dev, const = floats(time_per_bit, power, devices, constants)
    d, lim = ints(delta, limit)
    _joint(d, u, p, lim, dev, const, int(microbatch_limit), micro)
    return micro


@jit
def _joint(delta, u, power, limit, devices, constants, m_max, out):  # type: ignore[no-untyped-def]
    s_count, n, k = delta.shape
    chain_sum, c_f, c_b, iterations, payload, v, v_lam_var, batch = constants
    pi = np.empty(n)
    rho = np.empty(n)
    eta = np.empty(n)
    work = np.empty(k)
    energy = np.empty(k)
    units = np.empty(n, dtype=np.int64)
    micro = np.empty(n, dtype=np.int64)
    best_micro = np.empty(n, dtype=np.int64)
    terms = np.empty(n)
    order = np.empty(n, dtype=np.int64)
    gain = v_lam_var / batch  # V·λ·σ²/b, the convergence term's numerator
    for s in range(s_count):
        for c in range(n):
            stages, max_f, max_b = stage_terms(delta[s, c], u[s, c], devices[0, c], payload, work)
            for i in range(k):
                on = delta[s, c, i] > 0
                uu = u[s, c, i] if on else 0.0
                per_m = delta[s, c, i] * devices[1, c, i] + 2 * iterations * payload * power[s, c, i] * uu
                energy[i] = devices[2, c, i] * per_m if on else 0.0
            pi[c] = iterations * (chain_sum + stages)
            rho[c] = iterations * (fmax(c_f, max_f) + fmax(c_b, max_b))
            eta[c] = row_sum(energy, k)
        sort_order(eta, False, order)  # cheapest first
        # the first level (cluster 0, M = 1) stands when no level is feasible, as numpy's argmin over ∞
        _units(pi[0], pi, rho, limit[s], units)
        _greedy(units, eta, order, gain, best_micro)
        best = INF
        for level_c in range(n):  # each level Π̄ = π_c + (m − 1)·ρ_c the maximum can sit at
            for m in range(1, min(m_max, limit[s, level_c]) + 1):
                level = pi[level_c] + (m - 1) * rho[level_c]
                if not math.isfinite(level) or not _units(level, pi, rho, limit[s], units):
                    continue
                _greedy(units, eta, order, gain, micro)
                top = -INF
                total = 0
                for c in range(n):
                    top = fmax(top, pi[c] + (micro[c] - 1) * rho[c])
                    terms[c] = eta[c] * micro[c]
                    total += micro[c]
                value = v * top + row_sum(terms, n) + v_lam_var / (batch * total)
                if value < best:
                    best = value
                    best_micro[:] = micro
        out[s] = best_micro


@jit
def _units(level, pi, rho, limit, units):  # type: ignore[no-untyped-def]
    """U_c(Π̄) (N,): the most micro-batches each cluster may take under the level (at least 1); returns
    whether every cluster fits at least one."""
    feasible = True
    for c in range(pi.shape[0]):
        if rho[c] > 0:
            room = np.floor((level - pi[c]) / rho[c] * (1 + 1e-12) + 1e-12) + 1.0
        else:
            room = float(limit[c]) if level >= pi[c] * (1 - 1e-12) else 0.0
        room = min(max(room, 0.0), float(limit[c]))
        feasible = feasible and room >= 1
        units[c] = max(int(room), 1)
    return feasible


@jit
def _greedy(units, eta, order, gain, micro):  # type: ignore[no-untyped-def]
    """M (N,): the t-th extra micro-batch (total N + t) gains gain/((N + t − 1)(N + t)); the clusters
    take their extra units cheapest η first while that gain exceeds their η (``microbatches._greedy``)."""
    n = units.shape[0]
    before = 0
    for q in range(n):
        c = order[q]
        extra = units[c] - 1
        cost = eta[c]
        ratio = gain / cost if cost > 0 else INF
        if gain > 0:
            t_max = np.ceil((1 + math.sqrt(1 + 4 * min(ratio, 1e300))) / 2 - n) - 1 if ratio < INF else INF
        else:
            t_max = 0.0
        taken = min(max(min(before + extra, t_max) - before, 0), extra)
        micro[c] = 1 + int(taken)
        before += extra
