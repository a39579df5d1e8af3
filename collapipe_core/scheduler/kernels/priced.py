"""The priced-links model of the segment step, compiled (the model: ``scheduler/proposals.py``).

:func:`priced_rows` fills, for every (row, gather target), the per-TEB cost c_k(d) and gather time
γ_k(d), each device's link time and the row's gather charge; :func:`link_snr` is its SNR per link and
:func:`solve_foc` the first-order condition's Newton solve (that of ``allocation.solve_foc``). As numpy
these were some 60 calls on (rows, targets, devices, TEBs) arrays with two 40-step loops over all of
them; here every element is a scalar loop with the numpy formulation's arithmetic in the same order.
Two things make it cheaper without changing a value: the Newton and power-cap steps of one device's
elements run interleaved (independent, so the CPU overlaps them), and the power cap, a function of
c = p_max·h·u/N0 alone, is solved once per distinct c in a call (a memo).

Agreement with the numpy formulation (tests/core/scheduler/kernels/test_priced.py): every output within
1e-12 relative. libm's log2/exp/log1p/expm1 may differ from numpy's SIMD ones in the last ulp, and Newton
stops per element (numpy: once every element has converged); for the first-order condition's small
right-hand sides y that moves x by up to ~1e-16/y relative (its evaluation cancels there, in both), but
the cost is stationary in x at that optimum, so the costs still agree within 1e-12.
"""

from __future__ import annotations

import math

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.kernels.arrays import floats, ints
from collapipe_core.scheduler.kernels.scalars import INF, fmax, fmin, jit
from collapipe_core.scheduler.problem import IntArray

# digests of the files whose jit helpers this one compiles in (why: scalars.py's docstring)
SCALARS_SHA256 = "c3b4f4258ac946f7"

NEWTON_STEPS = 40
CAP_STEPS = 40
_NO_WEIGHT_Y = 1e300  # y of a link without an energy weight (y = ∞, clipped)


def priced_rows(
    time_per_bit: FloatArray,
    zeta: FloatArray,
    delta: IntArray,
    bracket: FloatArray,
    a: FloatArray,
    micro: FloatArray,
    floor: FloatArray,
    targets: FloatArray,
    device: FloatArray,
    scalars: FloatArray,
    num_blocks: int,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """The priced-links segment data of R = rows·N cluster rows under G gather targets.

    time_per_bit (R, K) u_k (0 where δ_k = 0), zeta (R, K) ζ_k, delta (R, K); bracket (R, 2) the price
    range [μ_lo, μ_hi] of the bandwidth step; a, micro, floor (R,) the link-sum weight a, M and Γ_f;
    targets (G,); device (5, N, K): h_k, Q_k, a_k (compute), e_k (compute energy), p_max of cluster
    r mod N; scalars: w·V·I, V, 2·I, P, B, W, N0.

    Returns cost and gather (R·G, K, L) (row r·G + g, index d − 1), link (R·G, K) and charge (R·G,):

        μ = √(max(μ_lo, 0)·max(μ_hi, 0)),  z1 = max_k u_k,  z2 = target·max_k δ_k·u_k,
        u_k(d) = min(z1, z2/d, √(μ·ζ_k/max(a, 1e-300))), z1 where that is not finite and positive,
        A_k(d) = Q_k·(2·I·M·P + d·B)·N0/h_k,  x = link_snr(u_k(d), μ, A_k(d), p_max·h_k),  ℓ = log2(1 + x),
        c_k(d) = w·V·I·(3·a_k·d + 2·P·u_k(d)) + Q_k·M·d·e_k + A_k(d)·x/ℓ + μ/(W·ℓ·u_k(d)),
        γ_k(d) = B·d·u_k(d),  link = P·z1,  charge = V·max(Γ_f, B·z2).
    """
    rows, k = delta.shape
    g_count = targets.shape[0]
    cost = np.empty((rows * g_count, k, num_blocks))
    gather = np.empty((rows * g_count, k, num_blocks))
    link = np.empty((rows * g_count, k))
    charge = np.empty(rows * g_count)
    # writable contiguous float64/int64 inputs (kernels.arrays): one compiled signature
    row_terms, u, zeta, targets, device, scalars = floats(
        np.stack([bracket[:, 0], bracket[:, 1], a, micro, floor], axis=1),
        time_per_bit,
        zeta,
        targets,
        device,
        scalars,
    )
    (delta,) = ints(delta)
    _priced_rows(u, zeta, delta, row_terms, targets, device, scalars, cost, gather, link, charge)
    return cost, gather, link, charge


@jit
def _priced_rows(  # type: ignore[no-untyped-def]
    u, zeta, delta, row_terms, targets, device, scalars, cost, gather, link, charge
):
    rows, k = u.shape
    g_count = targets.shape[0]
    n = device.shape[1]
    num_blocks = cost.shape[2]
    time_weight, v, two_it, p_bits, b_bits, bandwidth_hz, noise = scalars
    two_p = 2 * p_bits
    # every link without an energy weight (y = ∞, read as 1e300) has this SNR before the power cap
    no_weight_x = solve_foc(_NO_WEIGHT_Y)
    no_weight_ratio = no_weight_x / math.log2(1.0 + fmax(no_weight_x, 1e-300))
    keys, memo_x, memo_ell = _cap_memo(rows * g_count * k * num_blocks)
    # one device's (TEB, target) elements e = j·G + g at a time
    size = num_blocks * g_count
    ud, y, x, ell = np.empty(size), np.empty(size), np.empty(size), np.empty(size)
    slot_of, pending = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    energy, fixed = np.empty(num_blocks), np.empty(num_blocks)
    for r in range(rows):
        cl = r % n
        mu_lo, mu_hi, a, m, floor = row_terms[r]
        mu = math.sqrt(fmax(mu_lo, 0.0) * fmax(mu_hi, 0.0))
        z1 = u[r, 0]
        top = delta[r, 0] * u[r, 0]
        for i in range(1, k):
            z1 = fmax(z1, u[r, i])
            top = fmax(top, delta[r, i] * u[r, i])
        safe_a = fmax(a, 1e-300)
        for g in range(g_count):
            out = r * g_count + g
            charge[out] = v * fmax(floor, b_bits * (top * targets[g]))
            for i in range(k):
                link[out, i] = p_bits * z1
        for i in range(k):
            gain, queue, energy_j = device[0, cl, i], device[1, cl, i], device[3, cl, i]
            three_a = 3 * device[2, cl, i]
            pmax_gain = device[4, cl, i] * gain
            interior = math.sqrt(mu * zeta[r, i] / safe_a)
            # time per bit u_k(d) and the first-order condition's y of every element
            count = 0
            for j in range(num_blocks):
                d = j + 1.0
                energy[j] = queue * (two_it * m * p_bits + d * b_bits) * noise / gain
                fixed[j] = queue * m * d * energy_j
                for g in range(g_count):
                    e = j * g_count + g
                    t = fmin(fmin(z1, top * targets[g] / d), interior)
                    ud[e] = t if (math.isfinite(t) and t > 0) else z1
                    y[e] = foc_y(ud[e], mu, energy[j], bandwidth_hz)
                    if y[e] == INF:
                        x[e] = no_weight_x
                    else:
                        y[e] = fmax(fmin(y[e], _NO_WEIGHT_Y), 0.0)
                        pending[count] = e
                        count += 1
            _solve_foc_side_by_side(y, x, pending, count)
            # the power cap where x/ℓ(x) > c (or x is not finite), new values of c queued in the memo
            count = 0
            for e in range(size):
                ratio = no_weight_ratio if y[e] == INF else x[e] / math.log2(1.0 + fmax(x[e], 1e-300))
                c = pmax_gain * ud[e] / noise
                slot_of[e] = -1
                if not (ratio > c or not math.isfinite(x[e])):
                    x[e] = fmax(x[e], 1e-9)
                    ell[e] = math.log2(1.0 + x[e])
                    continue
                slot = _find(keys, c)
                if slot < 0:  # a NaN c or a full neighbourhood: solved here, unstored
                    x[e], ell[e] = _capped(c)
                    continue
                slot_of[e] = slot
                if keys[slot] == _EMPTY:
                    keys[slot] = _key(c)
                    memo_x[slot], memo_ell[slot] = fmax(c, 1.0), c  # the iterate and c until solved
                    pending[count] = slot
                    count += 1
            _power_caps_side_by_side(memo_x, memo_ell, pending, count)
            for j in range(num_blocks):
                d = j + 1.0
                for g in range(g_count):
                    e = j * g_count + g
                    slot = slot_of[e]
                    xe, le = (memo_x[slot], memo_ell[slot]) if slot >= 0 else (x[e], ell[e])
                    out = r * g_count + g
                    cost[out, i, j] = (
                        time_weight * (three_a * d + two_p * ud[e])
                        + fixed[j]
                        + energy[j] * xe / le
                        + mu / (bandwidth_hz * le * ud[e])
                    )
                    gather[out, i, j] = b_bits * d * ud[e]


@jit
def _solve_foc_side_by_side(y, x, pending, count):  # type: ignore[no-untyped-def]
    """x[e] = solve_foc(y[e]) for the ``count`` elements e in ``pending`` (y already clipped to
    [0, 1e300]), their Newton steps interleaved (independent, so the CPU overlaps them); each element
    takes exactly the steps :func:`solve_foc` takes. ``pending`` is used as scratch."""
    for q in range(count):
        x[pending[q]] = _foc_start(y[pending[q]])  # x holds w = ln(1 + x) until solved
    for _ in range(NEWTON_STEPS):
        active = 0
        for q in range(count):
            e = pending[q]
            w, done = _foc_step(x[e], y[e])
            if done:
                x[e] = math.expm1(w)
            else:
                x[e] = w
                pending[active] = e
                active += 1
        count = active
        if count == 0:
            return
    for q in range(count):
        x[pending[q]] = math.expm1(x[pending[q]])


@jit
def _power_caps_side_by_side(cap, c, pending, count):  # type: ignore[no-untyped-def]
    """:func:`_capped` for the ``count`` slots in ``pending``, steps interleaved as in
    :func:`_solve_foc_side_by_side`: on entry cap[s] = max(c, 1) and c[s] = c, on exit the capped SNR x
    and log2(1 + x). Each slot takes exactly the steps :func:`power_cap` takes."""
    for _ in range(CAP_STEPS):
        active = 0
        for q in range(count):
            s = pending[q]
            nxt = _cap_step(cap[s], c[s])
            if nxt == cap[s]:
                cap[s], c[s] = _capped_at(nxt)
            else:
                cap[s] = nxt
                pending[active] = s
                active += 1
        count = active
        if count == 0:
            return
    for q in range(count):
        s = pending[q]
        cap[s], c[s] = _capped_at(cap[s])


@jit
def link_snr(u, mu, weight, pmax_gain, bandwidth_hz, noise):  # type: ignore[no-untyped-def]
    """SNR minimising weight·x/ℓ(x) + μ/(W·ℓ(x)·u) (energy plus priced bandwidth at time per bit u),
    i.e. (1 + x)·ln(1 + x) − x = y = μ/(W·u·weight) (:func:`foc_y`; y = ∞ read as 1e300), capped where
    the power p = N0·x/(h·ℓ(x)·u) reaches p_max (``pmax_gain`` = p_max·h): where x/ℓ(x) > c = p_max·h·u/N0
    (or x is not finite) x is :func:`power_cap` (c). At least 1e-9."""
    x = solve_foc(fmin(foc_y(u, mu, weight, bandwidth_hz), _NO_WEIGHT_Y))
    c = pmax_gain * u / noise
    if x / math.log2(1.0 + fmax(x, 1e-300)) > c or not math.isfinite(x):
        x = power_cap(c)
    return fmax(x, 1e-9)


@jit
def foc_y(u, mu, weight, bandwidth_hz):  # type: ignore[no-untyped-def]
    """The first-order condition's right-hand side μ/(W·u·weight), ∞ without an energy weight."""
    return mu / (bandwidth_hz * u * weight) if weight > 0 else INF


@jit
def power_cap(c):  # type: ignore[no-untyped-def]
    """The root of x = c·log2(1 + x) as x ← c·log2(1 + x) run 40 times from max(c, 1): the SNR at which
    the power reaches p_max. The iteration is monotone (it decreases from above towards the root); it
    stops once a step returns the value it was given, which every further step would return too, so the
    result is what the 40 steps give."""
    cap = fmax(c, 1.0)
    for _ in range(CAP_STEPS):
        nxt = _cap_step(cap, c)
        if nxt == cap:
            break
        cap = nxt
    return cap


@jit
def _cap_step(cap, c):  # type: ignore[no-untyped-def]
    return c * math.log2(1.0 + cap)


@jit
def _capped_at(cap):  # type: ignore[no-untyped-def]
    """The capped SNR x = max(cap, 1e-9) and log2(1 + x)."""
    x = fmax(cap, 1e-9)
    return x, math.log2(1.0 + x)


@jit
def _capped(c):  # type: ignore[no-untyped-def]
    return _capped_at(power_cap(c))


@jit
def solve_foc(y):  # type: ignore[no-untyped-def]
    """x ≥ 0 with (1 + x)·ln(1 + x) − x = y: Newton on w = ln(1 + x) from an upper bound, at most 40
    steps (:func:`_foc_start`, :func:`_foc_step`); x = expm1(w)."""
    y = fmax(y, 0.0)
    w = _foc_start(y)
    for _ in range(NEWTON_STEPS):
        w, done = _foc_step(w, y)
        if done:
            break
    return math.expm1(w)


@jit
def _foc_start(y):  # type: ignore[no-untyped-def]
    """The upper bound Newton starts from: x ≤ √(3y) while x ≤ 1, else ln(1 + x) ≤ max(2, ln(1 + y)) + 1."""
    small = math.sqrt(3.0 * y)
    return math.log1p(small) if small <= 1.0 else fmax(2.0, math.log1p(y)) + 1.0


@jit
def _foc_step(w, y):  # type: ignore[no-untyped-def]
    """One Newton step on w = ln(1 + x); done once |step| ≤ 1e-12·w."""
    ew = math.exp(w)
    step = (ew * (w - 1.0) + 1.0 - y) / fmax(w * ew, 1e-300)
    w = fmax(w - step, 0.0)
    return w, abs(step) <= 1e-12 * fmax(w, 1e-300)


# the memo of the power caps: open addressing on c's bit pattern, at most 8 probes
_EMPTY = -1  # a NaN's bit pattern: no key (NaN keys are never stored)
_PROBES = 8
_MEMO_MAX = 1 << 14
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64


@jit
def _cap_memo(elements):  # type: ignore[no-untyped-def]
    """An empty memo for about ``elements`` values of c: keys, x and log2(1 + x) by slot."""
    size = 64
    while size < 2 * elements and size < _MEMO_MAX:
        size *= 2
    return np.full(size, _EMPTY, dtype=np.int64), np.empty(size), np.empty(size)


@jit
def _key(c):  # type: ignore[no-untyped-def]
    return np.float64(c).view(np.int64)


@jit
def _find(keys, c):  # type: ignore[no-untyped-def]
    """c's slot (holding c or empty), −1 for a NaN c or when the 8 slots probed hold other values."""
    if c != c:
        return -1
    key = _key(c)
    mask = keys.shape[0] - 1
    slot = (((key ^ (key >> 29)) * _GOLDEN) >> 32) & mask
    for _ in range(_PROBES):
        if keys[slot] == key or keys[slot] == _EMPTY:
            return slot
        slot = (slot + 1) & mask
    return -1


def warm_up() -> None:
    """Compile (or load from the cache) :func:`priced_rows`'s kernel: one row of two devices, 3 TEBs."""
    device = np.ones((5, 1, 2))
    priced_rows(
        np.ones((1, 2)), np.ones((1, 2)), np.array([[2, 1]]), np.ones((1, 2)), np.ones(1), np.ones(1),
        np.zeros(1), np.ones(2), device, np.ones(7), 3,
    )  # fmt: skip
