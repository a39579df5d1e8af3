"""DSSDA's segment step: the best δ for fixed M and link model, by exact dynamic programming.

For one cluster (a "row") the segment problem is

    J(δ) = Σ_{k: δ_k>0} c_k(δ_k) + c1·[max(c_F, X, T) + max(c_B, 2X, T)] + c2·max(Γ_f, Γ)
    X = max_{δ_k>0} δ_k·a_k,   T = max_{δ_k>0} t_k,   Γ = max_{δ_k>0} γ_k(δ_k)

with c_k(d) the additive cost of d TEBs on device k (time, queue-weighted energy, and in the priced
link model the bandwidth at price μ), t_k the device's link time per payload and γ_k(d) its gather
time — additive except for three maxima. The DP over (devices, TEBs placed) is exact for the additive
part; the maxima are handled exactly:

- T: devices are processed in decreasing t_k, so the first scheduled device sets T; the DP carries a
  "started" flag and charges the maxima on the transition that starts the schedule.
- X and Γ: thresholds (X̄, Γ̄) from the values d·a_k and γ_k(d) are enumerated; a threshold pair caps
  device k at the largest d with d·a_k ≤ X̄ and γ_k(d) ≤ Γ̄, and the maxima are charged at X̄ and Γ̄.
  (γ_k(d) = d·B·u_k(d) does not decrease with d in either link model, so the d under a threshold form a
  prefix; the exactness below relies on it.)
  Every solution is feasible under its own thresholds, where that charge is exact, so the minimum over
  all pairs is the exact optimum. Pairs are solved in order of a valid lower bound — the LP relaxation
  (each device's cheapest cost per TEB, min_d c_k(d)/d, filled greedily under the caps) plus the maxima
  at the thresholds — and dropped once the bound reaches the best solution found. Values of X̄ (Γ̄) at
  or below the floor of their term (c_F, c_B/2; Γ_f) are merged into the largest one, which dominates.
  With more candidates than ``max_pairs`` allows, the ones nearest the current solution's X and Γ are
  examined (exact within that window); each row's candidates are its own.

Memory caps (they depend on M) bound every δ_k; unavailable devices have cap 0.

Cost of the DP: O(rows × pairs × K × L × D) with D the largest cap, in compiled scalar loops; the whole
step, row by row, is one compiled call (``kernels.best_rows``). A row's pairs are solved one at a time in
order of their bounds, so each is pruned by the best solution found so far. Work the DP's answer cannot
depend on is skipped: the first device's continuations (nothing has started before it), continuations
beyond a device's cap, pairs whose caps cannot hold L, and a device updates only the dp[j] from which
the devices after it can still reach j = L (the last one only dp[L]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import kernels
from collapipe_core.scheduler.problem import IntArray, take_last


@dataclass(frozen=True, eq=False)
class SegmentCosts:
    """Per row the data of J(δ): (R, K, L) arrays indexed by d − 1, (R, K) per device, (R,) per row."""

    cost: FloatArray  # c_k(d)
    gather_s: FloatArray  # γ_k(d)
    caps: IntArray  # memory cap (0 = cannot be scheduled)
    compute_s: FloatArray  # a_k
    link_s: FloatArray  # t_k
    c1: FloatArray
    c2: FloatArray
    stage_f: FloatArray
    stage_b: FloatArray
    gather_floor: FloatArray
    constant: FloatArray  # (R,) added to every placement's cost


def segment_cost(sc: SegmentCosts, delta: IntArray) -> FloatArray:
    """J(δ) for δ (R, K) (ignoring memory caps)."""
    on = delta > 0
    idx = np.clip(delta - 1, 0, sc.cost.shape[2] - 1)[:, :, None]
    add = np.sum(np.where(on, take_last(sc.cost, idx)[:, :, 0], 0.0), axis=1)
    gam = np.max(np.where(on, take_last(sc.gather_s, idx)[:, :, 0], 0.0), axis=1)
    x = np.max(np.where(on, delta * sc.compute_s, 0.0), axis=1)
    t = np.max(np.where(on, sc.link_s, 0.0), axis=1)
    maxima = _maxima(sc.c1, sc.c2, sc.stage_f, sc.stage_b, sc.gather_floor, x, t, gam)
    return np.asarray(add + sc.constant + maxima, dtype=np.float64)


def _maxima(
    c1: FloatArray,
    c2: FloatArray,
    sf: FloatArray,
    sb: FloatArray,
    floor: FloatArray,
    x: FloatArray,
    t: FloatArray,
    g: FloatArray,
) -> FloatArray:
    stages = np.maximum(np.maximum(sf, x), t) + np.maximum(np.maximum(sb, 2 * x), t)
    return np.asarray(c1 * stages + c2 * np.maximum(floor, g), dtype=np.float64)


def best_segments(
    sc: SegmentCosts, num_blocks: int, current: IntArray, max_pairs: int = 4096
) -> tuple[IntArray, FloatArray]:
    """The δ (R, K) minimising J and its cost (R,); ``current`` seeds the bound if it fits the caps.

    Rows whose caps cannot hold the L TEBs get cost ∞ (and ``current`` back). At most √max_pairs
    thresholds of each kind are examined per row (``kernels.best_rows`` runs the whole step).
    """
    width = max(int(np.sqrt(max_pairs)), 2)
    return kernels.best_rows(
        sc.cost, sc.gather_s, sc.caps, sc.compute_s, sc.link_s, _row_terms(sc), current, num_blocks, width
    )


def _row_terms(sc: SegmentCosts) -> FloatArray:
    """(6, R): c1, c2, c_F, c_B, Γ_f and the constant of each row."""
    return np.stack([sc.c1, sc.c2, sc.stage_f, sc.stage_b, sc.gather_floor, sc.constant])
