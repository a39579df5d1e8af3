"""The closed-form figures of a batch of decisions, compiled (the model: ``scheduler/problem.py``, whose
:func:`~collapipe_core.scheduler.problem.costs` calls :func:`decision_costs`). The solvers evaluate small
batches a dozen times a round; as numpy that was some thirty array calls each.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.kernels.arrays import IntArray, floats, ints
from collapipe_core.scheduler.kernels.scalars import fmax, jit, row_sum

# digests of the files whose jit helpers this one compiles in (why: scalars.py's docstring)
SCALARS_SHA256 = "c3b4f4258ac946f7"


def decision_costs(
    delta: IntArray,
    micro: IntArray,
    time_per_bit: FloatArray,
    power: FloatArray,
    devices: FloatArray,
    constants: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(pipeline_s (B, N), gather_s (B, N), energy_j (B, N, K), objective (B,)) of B decisions.

    delta (B, N, K) int TEBs, micro (B, N) int M, time_per_bit u and power (B, N, K) (u is read only where
    δ > 0); devices (3, N, K): a_k, e_k, Q_k; constants: S0, c_F, c_B, P, B, I, U, V, λ, σ², b. Per
    cluster and decision (problem.py has the formulas):

        T^pipe = S0 + Σ (3·δa + 2·Pu) + (M − 1)·[max(c_F, max max(δa, Pu)) + max(c_B, max max(2δa, Pu))]
        A = max δ·B·u,   E_k = M·δ·e + p·u·(2·I·M·P + δ·B)
        J = V·(max_n I·T^pipe_n + max_n A_n + U + λ·σ²/(b·Σ M)) + Σ Q·E
    """
    b, n, k = delta.shape
    pipeline = np.empty((b, n))
    gather = np.empty((b, n))
    energy = np.empty((b, n, k))
    objective = np.empty(b)
    u, p, dev, const = floats(time_per_bit, power, devices, constants)
    d, m = ints(delta, micro)
    _costs(d, m, u, p, dev, const, pipeline, gather, energy, objective)
    return pipeline, gather, energy, objective


@jit
def _costs(delta, micro, u, power, devices, constants, pipeline, gather, energy, objective):  # type: ignore[no-untyped-def]
    b, n, k = delta.shape
    chain_sum, c_f, c_b, payload, block, iterations, upload, v, lam, variance, batch = constants
    work = np.empty(k)
    weighted = np.empty(n * k)
    for s in range(b):
        total_micro = 0.0
        top_pipe = -np.inf
        top_gather = -np.inf
        for c in range(n):
            m = float(micro[s, c])
            total_micro += m
            stages, max_f, max_b = stage_terms(delta[s, c], u[s, c], devices[0, c], payload, work)
            top = -np.inf
            for i in range(k):
                on = delta[s, c, i] > 0
                uu = u[s, c, i] if on else 0.0
                top = fmax(top, delta[s, c, i] * block * uu)
                bits = 2.0 * iterations * m * payload + delta[s, c, i] * block
                e = m * delta[s, c, i] * devices[1, c, i] + power[s, c, i] * uu * bits if on else 0.0
                energy[s, c, i] = e
                weighted[c * k + i] = devices[2, c, i] * e
            pipe = chain_sum + stages + (m - 1.0) * (fmax(c_f, max_f) + fmax(c_b, max_b))
            pipeline[s, c] = pipe
            gather[s, c] = top
            top_pipe = fmax(top_pipe, iterations * pipe)
            top_gather = fmax(top_gather, top)
        convergence = variance / (batch * total_micro)
        latency = top_pipe + top_gather + upload
        objective[s] = v * (latency + lam * convergence) + row_sum(weighted, n * k)


@jit
def stage_terms(delta, u, compute_s, payload, work):  # type: ignore[no-untyped-def]
    """One cluster's Σ_k (3·δ_k·a_k + 2·P·u_k) and its stage maxima max_k max(δ_k·a_k, P·u_k),
    max_k max(2·δ_k·a_k, P·u_k) over the scheduled devices (0 when none); ``work`` (K) is scratch."""
    k = delta.shape[0]
    max_f = 0.0
    max_b = 0.0
    for i in range(k):
        on = delta[i] > 0
        uu = u[i] if on else 0.0
        x = delta[i] * compute_s[i]
        tx = payload * uu
        work[i] = 3.0 * x + 2.0 * tx if on else 0.0
        max_f = fmax(max_f, fmax(x, tx) if on else 0.0)
        max_b = fmax(max_b, fmax(2 * x, tx) if on else 0.0)
    return row_sum(work, k), max_f, max_b
