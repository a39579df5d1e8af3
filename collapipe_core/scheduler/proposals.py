"""The link models under which DSSDA's segment step proposes new segments (and micro-batch counts).

The segment DP needs, for each device and TEB count d, the additive cost of d TEBs there, its link
time and its gather time. The links are re-solved after every proposal, so two models of what a
device's link will be are used, side by side (each proposal is re-allocated and scored exactly):

- **current links**: scheduled devices keep their (β_k, p_k); a device not scheduled gets an equal
  share 1/(m + 1) of the band (m scheduled devices) at p_max. With u_k = 1/r_k:
      c_k(d) = w·V·I·(3·d·a_k + 2·P·u_k) + Q_k·(M·d·e_k + p_k·u_k·(2·I·M·P + d·B)),
      t_k = P·u_k,  γ_k(d) = d·B·u_k.
- **priced links**: every device's link follows the current common latency targets z1 (link),
  z2 (gather) and interior value √(μ·ζ_k/a): u_k(d) = min(z1, z2/d, √(μ·ζ_k/a)) at its current SNR x_k
  (ζ_k = 1/(W·log2(1 + x_k))), and its bandwidth ζ_k/u_k(d) is charged at the current price μ:
      c_k(d) = w·V·I·(3·d·a_k + 2·P·u_k(d)) + Q_k·(M·d·e_k + (2·I·M·P + d·B)·N0·x_k/(h_k·log2(1 + x_k)))
               + μ·ζ_k/u_k(d),
      t_k = P·z1,  γ_k(d) = d·B·u_k(d).
  This is the Lagrangian of the bandwidth budget: it sees the bandwidth a device frees when it is
  dropped and what a device needs for more TEBs, which fixed links cannot.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.allocation import ClusterTerms, bandwidth_step, cluster_terms
from collapipe_core.scheduler.kernels.priced import priced_rows
from collapipe_core.scheduler.problem import IntArray, RoundProblem, costs, quiet, take_last
from collapipe_core.scheduler.segments import SegmentCosts


@quiet
def time_per_bit(pr: RoundProblem, beta: FloatArray, power: FloatArray) -> FloatArray:
    rate = pr.rate_bps(beta, power)
    return np.where(rate > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)


def gather_floors(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray
) -> FloatArray:
    """For each cluster the largest gather time among the other clusters (..., N); 0 with one cluster."""
    n = pr.shape[0]
    if n == 1 or not np.any(delta > 0):
        return np.zeros(delta.shape[:-1])
    g = costs(pr, delta, micro, time_per_bit(pr, beta, power), power).gather_s
    # the others' maximum: the largest value, and for the largest cluster itself the largest of the rest
    top = np.argmax(g, axis=-1)[..., None]
    mask = np.arange(n) == top
    second = np.max(np.where(mask, -np.inf, g), axis=-1, keepdims=True)
    return np.where(mask, second, take_last(g, top))


def _prospective(
    pr: RoundProblem, delta: IntArray, beta: FloatArray, power: FloatArray
) -> tuple[FloatArray, FloatArray]:
    on = delta > 0
    share = 1.0 / (on.sum(axis=-1, keepdims=True) + 1.0)
    beta = np.where(on, beta, np.where(pr.available, share, 0.0))
    power = np.where(on, power, np.where(pr.available, pr.max_power_w, 0.0))
    return beta, power


@quiet
def current_links(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray, floor: FloatArray
) -> SegmentCosts:
    """The segment data (rows = all leading dims × clusters) under the current-links model."""
    beta, power = _prospective(pr, delta, beta, power)
    u = time_per_bit(pr, beta, power)
    u = np.where(np.isfinite(u), u, 1e30)
    m = micro.astype(np.float64)[..., None]
    it, p_bits, b_bits = pr.iterations, pr.payload_bits, pr.block_bits
    d = np.arange(1, pr.num_blocks + 1, dtype=np.float64)
    fixed = pr.V * it * 2 * p_bits * u + pr.queues * power * u * 2 * it * m * p_bits
    per_block = pr.V * it * 3 * pr.compute_s + pr.queues * (m * pr.compute_energy_j + power * u * b_bits)
    cost = fixed[..., None] + per_block[..., None] * d
    caps = np.where(pr.available, pr.memory_caps(micro), 0)
    return _pack(pr, micro, cost, (b_bits * u)[..., None] * d, p_bits * u, floor, caps, pr.compute_s)


GATHER_TARGETS = (0.5, 0.7, 0.85, 1.0, 1.2, 1.5, 2.0, 3.0)


@quiet
def without_each(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray, floor: FloatArray
) -> SegmentCosts:
    """Current links with one device left out (its cap 0): rows (..., N, K), the last axis the excluded."""
    sc = current_links(pr, delta, micro, beta, power, floor)
    k = pr.shape[1]
    rep = SegmentCosts(*(np.repeat(getattr(sc, f), k, axis=0) for f in SegmentCosts.__dataclass_fields__))
    caps = rep.caps.reshape(-1, k, k).copy()
    caps[:, np.arange(k), np.arange(k)] = 0
    return SegmentCosts(**{**rep.__dict__, "caps": caps.reshape(-1, k)})


@quiet
def equal_shares(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray, floor: FloatArray
) -> SegmentCosts:
    """Every available device on an equal share 1/m at p_max, for m = 1, 2, K: rows (..., N, 3)."""
    k = pr.shape[1]
    counts = np.array(sorted({c for c in (1, 2, k) if 1 <= c <= k}), dtype=np.float64)
    parts = []
    for m in counts:
        share = np.broadcast_to(np.where(pr.available, 1.0 / m, 0.0), beta.shape)
        scheduled = np.broadcast_to(pr.available.astype(np.int64), delta.shape)
        parts.append(
            current_links(pr, scheduled, micro, share, np.where(share > 0, pr.max_power_w, 0.0), floor)
        )
    rows = parts[0].constant.shape[0]
    return SegmentCosts(
        *(
            np.stack([getattr(p, f) for p in parts], axis=1).reshape(
                (rows * len(parts), *getattr(parts[0], f).shape[1:])
            )
            for f in SegmentCosts.__dataclass_fields__
        )
    )


@quiet
def priced_links(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    beta: FloatArray,
    power: FloatArray,
    floor: FloatArray,
    weight: float = 1.0,
    targets: tuple[float, ...] = GATHER_TARGETS,
) -> SegmentCosts:
    """The segment data under the priced-links model, one row per gather target (..., N, G) flattened.

    ``weight`` scales the cluster's own pipeline time (w < 1: a cluster below the pipeline maximum). The
    price bracket comes from the bandwidth step (:func:`price_inputs`); μ, the targets, u_k(d), the SNRs
    and the costs from the compiled :func:`kernels.priced.priced_rows`."""
    u, zeta, terms, bracket = price_inputs(pr, delta, micro, beta, power, floor, weight)
    # every (cluster row, gather target, device, TEB) element in one compiled kernel: rows (..., N, G)
    lead, k, g_count = micro.shape, pr.shape[1], len(targets)
    rows = int(np.prod(lead))
    device = np.stack([pr.gain, pr.queues, pr.compute_s, pr.compute_energy_j, pr.max_power_w])
    it, p_bits, b_bits = pr.iterations, pr.payload_bits, pr.block_bits
    scalars = np.array([weight * pr.V * it, pr.V, 2 * it, p_bits, b_bits, pr.bandwidth_hz, pr.noise_w_per_hz])
    cost, gather, link, charge = priced_rows(
        u.reshape(rows, k),
        zeta.reshape(rows, k),
        delta.reshape(rows, k),
        bracket.reshape(rows, 2),
        np.broadcast_to(terms.a, lead).reshape(rows),
        micro.astype(np.float64).reshape(rows),
        np.broadcast_to(floor, lead).reshape(rows),
        np.array(targets, dtype=np.float64),
        device,
        scalars,
        pr.num_blocks,
    )
    # rows (..., N, G) flattened, as _pack lays them out; the gather target is charged per row (the DP's
    # own gather term is off: c2 = 0)
    out_rows = rows * g_count
    caps = np.where(pr.available, pr.memory_caps(micro), 0).reshape(rows, k)
    return SegmentCosts(
        cost=cost,
        gather_s=gather,
        caps=np.repeat(caps, g_count, axis=0),
        compute_s=np.tile(np.repeat(pr.compute_s, g_count, axis=0), (rows // pr.shape[0], 1)),
        link_s=link,
        c1=np.repeat(weight * (pr.V * it * (micro.reshape(rows) - 1.0)), g_count),
        c2=np.zeros(out_rows),
        stage_f=np.full(out_rows, pr.chain_max_forward_s),
        stage_b=np.full(out_rows, pr.chain_max_backward_s),
        gather_floor=np.zeros(out_rows),
        constant=charge,
    )


@quiet
def price_inputs(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    beta: FloatArray,
    power: FloatArray,
    floor: FloatArray,
    weight: float,
) -> tuple[FloatArray, FloatArray, ClusterTerms, FloatArray]:
    """What the priced links are priced from: u_k and ζ_k (..., N, K) at the current SNRs (prospective
    links for the devices not scheduled), the cluster terms and the bandwidth step's price range
    (..., N, 2)."""
    on = delta > 0
    beta, power = _prospective(pr, delta, beta, power)
    available = np.broadcast_to(pr.available, beta.shape)
    snr = np.where(
        available, power * pr.gain / (np.maximum(beta, 1e-300) * pr.bandwidth_hz * pr.noise_w_per_hz), 1.0
    )
    zeta = 1.0 / (pr.bandwidth_hz * np.log2(1.0 + np.maximum(snr, 1e-12)))
    u = np.where(on, zeta / np.maximum(beta, 1e-300), 0.0)
    ones = np.ones(micro.shape)
    terms = cluster_terms(pr, delta, micro.astype(np.float64), weight * ones, ones, floor)
    _, bracket = bandwidth_step(pr, terms, delta, np.zeros(beta.shape), np.where(on, 1.0 / zeta, 1.0))
    return u, zeta, terms, bracket


def _pack(
    pr: RoundProblem,
    micro: IntArray,
    cost: FloatArray,
    gather: FloatArray,
    link: FloatArray,
    floor: FloatArray,
    caps: IntArray,
    compute_s: FloatArray,
) -> SegmentCosts:
    """Rows = every leading index of ``micro``; device arrays (..., K), per-TEB arrays (..., K, L)."""
    k, L = pr.shape[1], pr.num_blocks
    lead = micro.shape
    rows = int(np.prod(lead))
    return SegmentCosts(
        cost=np.broadcast_to(cost, (*lead, k, L)).reshape(rows, k, L),
        gather_s=np.broadcast_to(gather, (*lead, k, L)).reshape(rows, k, L),
        caps=np.broadcast_to(caps, (*lead, k)).reshape(rows, k),
        compute_s=np.broadcast_to(compute_s, (*lead, k)).reshape(rows, k),
        link_s=np.broadcast_to(link, (*lead, k)).reshape(rows, k),
        c1=np.asarray(pr.V * pr.iterations * (micro - 1.0), dtype=np.float64).reshape(rows),
        c2=np.full(rows, pr.V),
        stage_f=np.full(rows, pr.chain_max_forward_s),
        stage_b=np.full(rows, pr.chain_max_backward_s),
        gather_floor=np.broadcast_to(floor, lead).reshape(rows),
        constant=np.zeros(rows),
    )
