"""The bandwidth step of DSSDA's link allocation: exact β for a fixed rate model, by KKT structures.

Each scheduled link's rate is modelled as r_k = c_k + d_k·β_k (c = 0, d = W·log2(1 + x_k) at a fixed SNR;
the tangent of the concave rate for a link at p_max) and u_k = 1/r_k. The link-dependent latency of a
cluster is

    Lat(u) = a·Σ_k u_k + c1·[max(c^F, P·z1) + max(c^B, P·z1)] + c2·max(Γ_f, B·z2),
    z1 = max_k u_k,  z2 = max_k δ_k·u_k,

convex in β. With common targets z1 (link) and z2 (gather) and bandwidth price μ = s², the KKT
conditions give u_k = s·min(κ1, κ2/δ_k, √(ζ_k/a)), ζ_k = 1/d_k: every device is bound by the link
target, by the gather target, or interior (water-filling). A free target with slope σ of its term has
κ² = Σ_B (ζ_k/m_k)/(σ + a·Σ_B m_k) over the devices B binding it (the longest self-consistent prefix
by ζ_k/m_k²; m_k = 1 for the link target, 1/δ_k for the gather target, min(1, δ*/δ_k) when the two are
tied at ratio δ*); a target can also sit at a kink of its term. The budget Σ_k (1/u_k − c_k)/d_k = 1
fixes s in closed form. Every structure is a candidate, and the cheapest is the exact minimiser (the
enumeration is compiled: ``kernels/bandwidth.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import kernels
from collapipe_core.scheduler.problem import IntArray, RoundProblem


@dataclass(frozen=True, eq=False)
class ClusterTerms:
    """Per (batch, cluster) coefficients of the link-dependent cost, arrays of shape (..., N)."""

    a: FloatArray  # weight of Σ_k u_k
    c1: FloatArray  # weight of the stage maxima
    c2: FloatArray  # weight of the gather maximum
    stage_f: FloatArray  # c^F = max(c_F, max_k δ_k·a_k)
    stage_b: FloatArray  # c^B = max(c_B, 2·max_k δ_k·a_k)
    gather_floor: FloatArray  # Γ_f, seconds


def cluster_terms(
    pr: RoundProblem,
    delta: IntArray,
    micro: FloatArray,
    pipeline_weight: FloatArray,
    gather_weight: FloatArray,
    gather_floor: FloatArray,
) -> ClusterTerms:
    x = np.where(delta > 0, delta * pr.compute_s, 0.0).max(axis=-1)
    return ClusterTerms(
        a=2.0 * pipeline_weight * pr.V * pr.iterations * pr.payload_bits,
        c1=pipeline_weight * pr.V * pr.iterations * (micro - 1.0),
        c2=gather_weight * pr.V,
        stage_f=np.maximum(pr.chain_max_forward_s, x),
        stage_b=np.maximum(pr.chain_max_backward_s, 2.0 * x),
        gather_floor=gather_floor,
    )


def latency_cost(pr: RoundProblem, terms: ClusterTerms, delta: IntArray, u: FloatArray) -> FloatArray:
    """Lat(u) for u (..., N, K) (ignored where δ = 0), shape (..., N)."""
    on = delta > 0
    uu = np.where(on, u, 0.0)
    z1 = uu.max(axis=-1)
    z2 = (delta * uu).max(axis=-1)
    link = pr.payload_bits * z1
    cost = (
        terms.a * uu.sum(axis=-1)
        + terms.c1 * (np.maximum(terms.stage_f, link) + np.maximum(terms.stage_b, link))
        + terms.c2 * np.maximum(terms.gather_floor, pr.block_bits * z2)
    )
    return np.asarray(cost, dtype=np.float64)


def bandwidth_step(
    pr: RoundProblem,
    terms: ClusterTerms,
    delta: IntArray,
    intercept: FloatArray,
    slope: FloatArray,
) -> tuple[FloatArray, FloatArray]:
    """Exact β for the rate model r_k = c_k + d_k·β_k (..., N, K); returns (β, [μ_lo, μ_hi] (..., N, 2)).

    A link at a fixed SNR x has c = 0, d = W·ℓ(x) (exact); a link held at p_max has the tangent of its
    concave rate at the current β. Several structures can reach the same minimum (one device, ties,
    kinks), each with its own price: the range of the cost-tied candidates' prices is returned. Every
    (batch, cluster) row is solved on its own by the compiled :func:`kernels.bandwidth_rows`.
    """
    lead = delta.shape[:-1]
    k = delta.shape[-1]
    rows = int(np.prod(lead)) if lead else 1
    row_terms = np.stack(
        [
            _flat(np.asarray(x, dtype=np.float64), lead, rows)
            for x in (terms.a, terms.c1, terms.c2, terms.stage_f, terms.stage_b, terms.gather_floor)
        ]
    )
    beta, bracket = kernels.bandwidth_rows(
        delta.reshape(rows, k),
        _per_device(intercept, delta.shape).reshape(rows, k),
        _per_device(slope, delta.shape).reshape(rows, k),
        row_terms,
        pr.payload_bits,
        pr.block_bits,
    )
    return beta.reshape(delta.shape), bracket.reshape((*lead, 2))


def _per_device(x: FloatArray, shape: tuple[int, ...]) -> FloatArray:
    return x if x.shape == shape else np.broadcast_to(x, shape)


def _flat(x: FloatArray, lead: tuple[int, ...], rows: int) -> FloatArray:
    """A per-(batch, cluster) term as a flat (rows,) array."""
    return x.reshape(rows) if x.shape == lead else np.broadcast_to(x, lead).reshape(rows)
