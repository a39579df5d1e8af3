"""What d TEBs on a device would cost under a model of its link: the segment DP's inputs.

The segment DP (:mod:`~collapipe_core.scheduler.segments`) needs, for every device and TEB count d, the
additive cost c_k(d), the link time t_k and the gather time γ_k(d). A device's link is re-solved after
every proposal, so the DP works with a model of it; two are used side by side (each proposal is then
re-allocated and scored exactly). Rows are single clusters (problem rows, device arrays (R, K)) with
their M, weights w, v on the cluster's pipeline and gather times (as in the link step) and Γ_f, the
largest gather time of the other clusters:

- **current links**: scheduled devices keep their (β_k, p_k); a device not scheduled gets an equal share
  1/(m + 1) of the band (m scheduled devices) at p_max. With u_k = 1/r_k:

      c_k(d) = w·V·I·(3·d·a_k + 2·P·u_k) + Q_k·(M·d·e_k + p_k·u_k·(2·I·M·P + d·B)),
      t_k = P·u_k,  γ_k(d) = d·B·u_k,  the gather term v·V·max(Γ_f, Γ) and the download w·V·Γ;

- **bandwidth at a price** (the Lagrangian of the band Σ β ≤ 1): every device follows the current common
  latency targets z1 = max u (link) and z2 = max δ·u (gather) and its interior value,
  u_k(d) = min(z1, z2/d, √(μ·ζ_k/a)) (ζ_k = 1/(W·log2(1 + x_k)) at the current SNR, a = 2·w·V·I·P, μ the
  band's price from the link step's bandwidth step); its SNR is the power step's optimum at that u,
  x_k(d) = min(foc(μ/(W·u·A_k(d))), cap(u)) (A_k(d) = Q_k·(2·I·M·P + d·B)·N0/h_k; the cap where the power
  reaches p_max), and the band it takes, 1/(W·log2(1 + x)·u), is charged at μ:

      c_k(d) = w·V·I·(3·d·a_k + 2·P·u_k(d)) + Q_k·M·d·e_k + A_k(d)·x/log2(1 + x) + μ/(W·log2(1 + x)·u_k(d)),
      t_k = P·z1,  γ_k(d) = d·B·u_k(d),  the gather term and the download charged at the target:
      v·V·max(Γ_f, B·z2) + w·V·B·z2.

  It sees the band a device frees when it is dropped and what a device needs for more TEBs, which fixed
  links cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray, quiet
from collapipe_core.scheduler.links import bandwidth_step, link_terms, solve_foc
from collapipe_core.scheduler.segments import SegmentCosts

CAP_STEPS = 30


@dataclass(frozen=True, eq=False)
class LinkRows:
    """Rows of single clusters (problem rows ``pr``, device arrays (R, K)): δ, and the prospective links
    β, p (R, K) — scheduled devices keep theirs, the other available ones get an equal share 1/(m + 1)
    of the band at p_max — with M, the weights w, v and the floors Γ_f (R,)."""

    pr: RoundProblem
    delta: IntArray
    micro: IntArray
    beta: FloatArray
    power: FloatArray
    w: FloatArray
    v: FloatArray
    floor: FloatArray


@quiet
def current_links(rows: LinkRows) -> SegmentCosts:
    """The segment data of ``rows`` under their current links."""
    pr, micro, beta, power, w, v = rows.pr, rows.micro, rows.beta, rows.power, rows.w, rows.v
    mc = pr.micro_costs(micro)
    u = pr.time_per_bit(beta, power)
    u = np.where(np.isfinite(u), u, 1e30)
    m = micro.astype(np.float64)[:, None]
    it, p_bits, b_bits, tau = (
        pr.iterations,
        np.asarray(mc.payload_bits)[..., None],
        pr.block_bits,
        pr.link_latency_s,
    )
    d = np.arange(1, pr.num_blocks + 1, dtype=np.float64)
    fixed = w[:, None] * pr.V * it * 2 * p_bits * u + pr.queues * power * u * 2 * it * m * p_bits
    if tau:  # each scheduled device's two transfers per micro-batch wait τ each
        fixed = fixed + w[:, None] * pr.V * it * 2 * tau
    rho = np.broadcast_to(np.asarray(mc.backward_ratio, dtype=np.float64), micro.shape)
    per_block = w[:, None] * pr.V * it * (1 + rho[:, None]) * mc.compute_s + pr.queues * (
        m * mc.compute_energy_j + power * u * b_bits
    )
    return SegmentCosts(
        cost=fixed[..., None] + per_block[..., None] * d,
        gather_s=(b_bits * u)[..., None] * d,
        caps=pr.memory_caps(micro),
        compute_s=np.broadcast_to(mc.compute_s, u.shape),
        link_s=p_bits * u + tau,
        backward_ratio=rho,
        c1=w * pr.V * it * (m[:, 0] - 1.0),
        c2=v * pr.V,
        c3=w * pr.V,
        stage_f=np.broadcast_to(mc.chain_max_forward_s, micro.shape),
        stage_b=np.broadcast_to(mc.chain_max_backward_s, micro.shape),
        gather_floor=rows.floor,
        constant=np.zeros(micro.size),
    )


@quiet
def bandwidth_price(rows: LinkRows) -> SegmentCosts:
    """The segment data of ``rows`` under bandwidth at a price."""
    pr, delta, beta, power, w, v = rows.pr, rows.delta, rows.beta, rows.power, rows.w, rows.v
    on = delta > 0
    snr = np.where(
        pr.available, power * pr.gain / (np.maximum(beta, 1e-300) * pr.bandwidth_hz * pr.noise_w_per_hz), 1.0
    )
    zeta = 1.0 / (pr.bandwidth_hz * np.log2(1.0 + np.maximum(snr, 1e-12)))
    u_now = np.where(on, zeta / np.maximum(beta, 1e-300), 0.0)
    m = rows.micro.astype(np.float64)
    mc = pr.micro_costs(rows.micro)
    rho = np.broadcast_to(np.asarray(mc.backward_ratio, dtype=np.float64), rows.micro.shape)
    p_bits, tau = np.asarray(mc.payload_bits)[..., None, None], pr.link_latency_s
    terms = link_terms(pr, delta, m, w, v)
    rate_slope = np.where(on, 1.0 / zeta, 1.0)
    _, bracket = bandwidth_step(terms, delta, np.zeros(beta.shape), rate_slope, pr.block_bits)
    mu = np.sqrt(np.maximum(bracket[:, 0], 0.0) * np.maximum(bracket[:, 1], 0.0))[:, None, None]
    z1 = np.max(u_now, axis=1)[:, None, None]
    z2 = np.max(delta * u_now, axis=1)[:, None, None]
    d = np.arange(1, pr.num_blocks + 1, dtype=np.float64)
    interior = np.sqrt(mu[:, :, 0] * zeta / np.maximum(terms.a, 1e-300)[:, None])[..., None]
    u = np.minimum(np.minimum(z1, z2 / d), interior)  # (R, K, L)
    u = np.where(np.isfinite(u) & (u > 0), u, z1)
    bits = 2 * pr.iterations * m[:, None, None] * p_bits + d * pr.block_bits
    energy = (pr.queues * pr.noise_w_per_hz / pr.gain)[..., None] * bits  # A_k(d)
    x = _snr(pr, u, mu, energy, (pr.max_power_w * pr.gain)[..., None])
    ell = np.log2(1.0 + x)
    compute = np.broadcast_to(mc.compute_s, delta.shape)
    cost = (
        w[:, None, None]
        * pr.V
        * pr.iterations
        * ((1 + rho[:, None, None]) * compute[..., None] * d + 2 * p_bits * u)
        + (pr.queues * mc.compute_energy_j)[..., None] * m[:, None, None] * d
        + energy * x / ell
        + mu / (pr.bandwidth_hz * ell * u)
    )
    if tau:  # each scheduled device's two transfers per micro-batch wait τ each
        cost = cost + w[:, None, None] * pr.V * pr.iterations * 2 * tau
    return SegmentCosts(
        cost=cost,
        gather_s=pr.block_bits * d * u,
        caps=pr.memory_caps(rows.micro),
        compute_s=compute,
        link_s=np.broadcast_to(p_bits[..., 0] * z1[:, :, 0] + tau, delta.shape),
        backward_ratio=rho,
        c1=w * pr.V * pr.iterations * (m - 1.0),
        c2=np.zeros(m.size),
        c3=np.zeros(m.size),
        stage_f=np.broadcast_to(mc.chain_max_forward_s, m.shape),
        stage_b=np.broadcast_to(mc.chain_max_backward_s, m.shape),
        gather_floor=np.zeros(m.size),
        constant=pr.V
        * (v * np.maximum(rows.floor, pr.block_bits * z2[:, 0, 0]) + w * pr.block_bits * z2[:, 0, 0]),
    )


def _snr(
    pr: RoundProblem, u: FloatArray, mu: FloatArray, weight: FloatArray, pmax_gain: FloatArray
) -> FloatArray:
    """The SNR of a link held at time per bit u: the first-order condition (1 + x)·ln(1 + x) − x =
    μ/(W·u·A) (full power where A = 0), capped where the power N0·x/(h·log2(1 + x)·u) reaches p_max."""
    y = np.where(weight > 0, mu / (pr.bandwidth_hz * u * np.where(weight > 0, weight, 1.0)), np.inf)
    x = np.full(np.broadcast_shapes(y.shape, u.shape), np.inf)
    finite = np.isfinite(y)
    if finite.any():
        x[finite] = solve_foc(np.minimum(y[finite], 1e300))
    c = np.broadcast_to(pmax_gain * u / pr.noise_w_per_hz, x.shape)  # x/log2(1 + x) ≤ c: within p_max
    over = ~np.isfinite(x) | (x / np.log2(1.0 + np.maximum(x, 1e-300)) > c)
    x[over] = power_cap(c[over])
    out: FloatArray = np.maximum(x, 1e-9)
    return out


def power_cap(c: FloatArray) -> FloatArray:
    """The largest x with x = c·log2(1 + x) (0 when c ≤ ln 2): Newton's method from above (x − c·log2(1 + x)
    is convex, so the iterates decrease monotonically to the root)."""
    x: FloatArray = 2.0 * c * np.log2(1.0 + 2.0 * c) + 1.0  # above the root (c ≥ ln 2), else the root is 0
    for _ in range(CAP_STEPS):
        f = x - c * np.log2(1.0 + x)
        slope = 1.0 - c / ((1.0 + x) * np.log(2.0))
        step = np.where(slope > 0, f / np.where(slope > 0, slope, 1.0), x)
        x = np.maximum(x - step, 0.0)
        if np.all(np.abs(step) <= 1e-13 * np.maximum(x, 1e-300)):
            break
    return x
