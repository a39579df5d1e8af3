"""The compiled priced-links model against its numpy formulation (kept below as the reference), and the
link SNR against its defining equation and power cap."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from collapipe_core.network import FloatArray
from collapipe_core.scheduler import proposals
from collapipe_core.scheduler.allocation import solve_foc
from collapipe_core.scheduler.kernels import priced
from collapipe_core.scheduler.problem import IntArray, RoundProblem, build_problem
from collapipe_core.scheduler.segments import SegmentCosts
from tests.core.scheduler.instances import random_instance, random_round

LEAN_TARGETS = (0.7, 1.0, 1.4)  # descent.LEAN's gather targets


# --- reference: the numpy formulation the kernel replaced (proposals.priced_links and link_snr before;
# its Newton is allocation.solve_foc, which runs until every element of the array has converged) ---


def reference_priced_links(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    beta: FloatArray,
    power: FloatArray,
    floor: FloatArray,
    weight: float,
    targets: tuple[float, ...],
) -> SegmentCosts:
    """The priced-links segment data as numpy computed it on (..., N, G, K, L) arrays."""
    u, zeta, terms, bracket = proposals.price_inputs(pr, delta, micro, beta, power, floor, weight)
    mf = micro.astype(np.float64)
    g_count = len(targets)
    mu = np.sqrt(np.maximum(bracket[..., 0], 0.0) * np.maximum(bracket[..., 1], 0.0))[..., None, None, None]
    z1 = u.max(axis=-1)[..., None, None, None]
    z2 = (delta * u).max(axis=-1)[..., None, None, None] * np.array(targets)[:, None, None]
    d = np.arange(1, pr.num_blocks + 1, dtype=np.float64)
    interior = np.sqrt(mu * zeta[..., None, :, None] / np.maximum(terms.a[..., None, None, None], 1e-300))
    ud = np.minimum(np.minimum(z1, z2 / d), interior)
    ud = np.where(np.isfinite(ud) & (ud > 0), ud, np.broadcast_to(z1, ud.shape))
    m = mf[..., None, None, None]
    it, p_bits, b_bits = pr.iterations, pr.payload_bits, pr.block_bits
    bits = 2 * it * m * p_bits + d * b_bits
    gain = pr.gain[:, None, :, None]
    energy = pr.queues[:, None, :, None] * bits * pr.noise_w_per_hz / gain
    x = reference_link_snr(pr, ud, mu, energy, pr.max_power_w[:, None, :, None] * gain)
    ell = np.log2(1.0 + x)
    cost = (
        weight * pr.V * it * (3 * pr.compute_s[:, None, :, None] * d + 2 * p_bits * ud)
        + pr.queues[:, None, :, None] * m * d * pr.compute_energy_j[:, None, :, None]
        + energy * x / ell
        + mu / (pr.bandwidth_hz * ell * ud)
    )
    charge = pr.V * np.maximum(floor[..., None], b_bits * z2[..., 0, 0])
    link = np.broadcast_to(p_bits * z1[..., 0], (*beta.shape[:-1], g_count, beta.shape[-1]))
    wide_micro = np.broadcast_to(micro[..., None], (*micro.shape, g_count))
    caps = np.where(pr.available, pr.memory_caps(micro), 0)[..., None, :]
    compute = pr.compute_s[:, None, :]
    gather = b_bits * d * ud
    packed = proposals._pack(pr, wide_micro, cost, gather, link, np.zeros(charge.shape), caps, compute)
    # the gather target is charged per row (the DP's own gather term is off: c2 = 0)
    return dataclasses.replace(
        packed,
        c1=np.asarray(weight * packed.c1, dtype=np.float64),
        c2=np.zeros_like(packed.c2),
        constant=np.broadcast_to(charge, wide_micro.shape).reshape(-1),
    )


def reference_link_snr(
    pr: RoundProblem, u: FloatArray, mu: FloatArray, weight: FloatArray, pmax_gain: FloatArray
) -> FloatArray:
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(weight > 0, mu / (pr.bandwidth_hz * u * weight), np.inf)
    if np.all(y == np.inf):
        x = np.full(y.shape, solve_foc(np.full(1, 1e300))[0])
    else:
        x = solve_foc(np.minimum(y, 1e300))
    c = pmax_gain * u / pr.noise_w_per_hz
    cap = np.maximum(c, 1.0)
    for _ in range(40):
        cap = c * np.log2(1.0 + cap)
    over = x / np.log2(1.0 + np.maximum(x, 1e-300)) > c
    return np.maximum(np.where(over | ~np.isfinite(x), cap, x), 1e-9)


# --- random problems and states ---


def random_state(
    pr: RoundProblem, rng: np.random.Generator, lead: tuple[int, ...]
) -> tuple[IntArray, IntArray, FloatArray, FloatArray, FloatArray]:
    """δ (a composition of L over available devices, within their memory caps where possible), M, β
    (shares of the scheduled devices, Σ ≤ 1), p ∈ (0, p_max] and gather floors (some 0), with leading
    dims ``lead``."""
    n, k = pr.shape
    micro = rng.integers(1, pr.microbatch_limit + 1, (*lead, n))
    caps = np.where(pr.available, np.maximum(pr.memory_caps(micro), 1), 0)
    delta = np.zeros((*lead, n, k), dtype=np.int64)
    for index in np.ndindex(*lead, n):
        free = caps[index].copy()
        for _ in range(pr.num_blocks):
            choices = np.flatnonzero(free > 0)
            if choices.size == 0:
                choices = np.flatnonzero(pr.available[index[-1]])
            device = rng.choice(choices)
            delta[(*index, device)] += 1
            free[device] -= 1
    on = delta > 0
    share = rng.uniform(0.05, 1.0, delta.shape) * on
    beta = share / share.sum(axis=-1, keepdims=True) * rng.uniform(0.6, 1.0, (*lead, n, 1))
    power = rng.uniform(0.02, 1.0, delta.shape) * pr.max_power_w * on
    floor = rng.uniform(0.0, 2.0, (*lead, n)) * (rng.random((*lead, n)) < 0.7) * (pr.block_bits / 1e7)
    return delta, micro, beta, power, floor


def problems() -> list[RoundProblem]:
    out = []
    for seed in range(24):
        pr = build_problem(random_instance(seed))
        out.append(pr if seed % 3 else pr.with_queues(np.zeros(pr.shape)))
    for seed in range(6):
        for clusters, devices in ((3, 4), (2, 5)):
            pr = build_problem(random_round(seed, clusters, devices))
            out.append(pr if seed % 3 else pr.with_queues(np.zeros(pr.shape)))
    return out


def assert_same_segment_costs(mine: SegmentCosts, reference: SegmentCosts) -> None:
    for field in SegmentCosts.__dataclass_fields__:
        a, b = np.asarray(getattr(mine, field)), np.asarray(getattr(reference, field))
        assert a.shape == b.shape and a.dtype == b.dtype, field
        if a.dtype.kind in "iub":
            assert np.array_equal(a, b), field
        else:
            close = np.isclose(a, b, rtol=1e-12, atol=0) | (a == b) | (np.isnan(a) & np.isnan(b))
            assert close.all(), (field, a[~close][:5], b[~close][:5])


@pytest.mark.parametrize("lead", [(), (2,), (2, 3)], ids=["no-lead", "starts", "starts-candidates"])
def test_priced_links_equals_the_numpy_formulation(lead: tuple[int, ...]) -> None:
    rng = np.random.default_rng([len(lead), 0x9B1CED])
    checked = 0
    for pr in problems():
        delta, micro, beta, power, floor = random_state(pr, rng, lead)
        for weight in (1.0, 0.4):
            for targets in (LEAN_TARGETS, proposals.GATHER_TARGETS):
                args = (pr, delta, micro, beta, power, floor, weight, targets)
                assert_same_segment_costs(proposals.priced_links(*args), reference_priced_links(*args))
                checked += 1
    assert checked == 4 * len(problems())


def test_priced_links_rows_are_leading_dims_then_cluster_then_target() -> None:
    pr = build_problem(random_round(3, 3, 4))
    rng = np.random.default_rng(5)
    delta, micro, beta, power, floor = random_state(pr, rng, (2, 3))
    whole = proposals.priced_links(pr, delta, micro, beta, power, floor, targets=LEAN_TARGETS)
    one = proposals.priced_links(
        pr, delta[1, 2], micro[1, 2], beta[1, 2], power[1, 2], floor[1, 2], targets=LEAN_TARGETS
    )
    rows = pr.shape[0] * len(LEAN_TARGETS)
    start = (1 * 3 + 2) * rows
    for field in SegmentCosts.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(whole, field)[start : start + rows], getattr(one, field))


def test_link_snr_solves_its_first_order_condition_or_sits_at_the_power_cap() -> None:
    rng = np.random.default_rng(17)
    bandwidth_hz, noise = 1e6, 1e-20
    for _ in range(3000):
        u = 10 ** rng.uniform(-8, -5)  # s per bit
        mu = 10 ** rng.uniform(-6, 2) * (rng.random() < 0.95)
        weight = 10 ** rng.uniform(-12, -4) * (rng.random() < 0.8)
        c = 10 ** rng.uniform(0.5, 5)  # p_max·h·u/N0: the cap's x/log2(1 + x)
        pmax_gain = c * noise / u
        x = priced.link_snr(u, mu, weight, pmax_gain, bandwidth_hz, noise)
        assert x >= 1e-9
        ell = math.log2(1.0 + x)
        assert x / ell <= c * (1 + 1e-9)  # power within p_max
        foc = (1.0 + x) * math.log1p(x) - x
        y = mu / (bandwidth_hz * u * weight) if weight > 0 else math.inf
        if x == 1e-9:  # the floor: the first-order condition's root lies below it
            assert foc >= y * (1 - 1e-9)
        elif x / ell < c * (1 - 1e-9):  # below the cap: the first-order condition holds
            assert foc == pytest.approx(y, rel=1e-9, abs=1e-300)
        else:  # at the cap x = c·log2(1 + x), and the unconstrained optimum lies beyond it
            assert x == pytest.approx(c * ell, rel=1e-9)
            assert foc <= y * (1 + 1e-9) or y > 1e300


def test_solve_foc_matches_the_numpy_newton_within_its_conditioning() -> None:
    """Within 1e-12 relative for y ≥ 1e-2. Below, e^w·(w − 1) + 1 cancels (x ≈ √(2y)): both Newtons pin x
    down only to ~1e-16/y relative, and which of its noisy last iterates each returns depends on libm's
    exp and on when it stops (numpy: when every element of the batch has converged)."""
    y = np.concatenate(
        [[0.0, 1e-300, 1e-12, 1.0, 1e300], 10 ** np.random.default_rng(3).uniform(-10, 30, 2000)]
    )
    mine = np.array([priced.solve_foc(v) for v in y])
    reference = solve_foc(y)
    assert mine[0] == reference[0] == 0.0
    rel = np.abs(mine[1:] - reference[1:]) / reference[1:]
    assert np.all(rel <= np.where(y[1:] >= 1e-2, 1e-12, np.maximum(1e-12, 1e-15 / y[1:])))


def test_after_its_warm_up_the_priced_links_compile_nothing() -> None:
    priced.warm_up()
    compiled = list(priced._priced_rows.signatures)
    assert len(compiled) == 1
    pr = build_problem(random_round(1, 3, 4))
    delta, micro, beta, power, floor = random_state(pr, np.random.default_rng(2), (2, 3))
    proposals.priced_links(pr, delta, micro, beta, power, floor, targets=LEAN_TARGETS)
    proposals.priced_links(pr, delta[0, 0], micro[0, 0], beta[0, 0], power[0, 0], floor[0, 0], 0.5)
    assert list(priced._priced_rows.signatures) == compiled
