"""Exact link allocation (β, p) for fixed segments and micro-batches: a batched log-barrier method.

This is the inner solve of :mod:`collapipe_core.scheduler.optimal`, written independently of DSSDA's
allocation steps so that it can check them. With s_k = ln β_k and t_k = ln x_k (x_k = p_k·h_k/(β_k·W·N0),
the link's SNR) every term of the objective is convex:

- u_k = 1/r_k = ln 2 / (β_k·W·ln(1 + x_k)) — ln u_k = const − s_k − ln ln(1 + e^{t_k}) is convex, so u_k is;
- the transmit energy p_k·u_k·bits_k = bits_k·N0/h_k · x_k/log2(1 + x_k) depends on t_k alone, convex;
- p_k ≤ p_max is s_k + t_k ≤ ln(p_max·h_k/(W·N0)); Σ_k β_k ≤ 1 is Σ_k e^{s_k} ≤ 1.

Epigraph variables z^F_n, z^B_n (forward/backward stage maxima), D_n (the redistribution's download),
Γ (largest gather time) and Π (largest R_n + I·T^pipe_n) turn the maxima into smooth constraints:

    min  w·(Π + Γ) + Σ_k Q_k·bits_k·(N0/h_k)·x_k/log2(1 + x_k)
    s.t. P·u_k ≤ z^F_n,  P·u_k ≤ z^B_n,  c^F_n ≤ z^F_n,  c^B_n ≤ z^B_n,  δ_k·B·u_k ≤ Γ,
         (δ_k·B + in_k·B_opt)·u_k ≤ D_n,
         R^0_n + D_n + I·(S0 + Σ_k 3·δ_k·a_k + 2·P·Σ_k u_k + (M_n − 1)·(z^F_n + z^B_n)) ≤ Π,
         Σ_k e^{s_k} ≤ 1,  s_k + t_k ≤ ln π_k,

with c^F_n = max(c_F, max_k δ_k·a_k), c^B_n = max(c_B, max_k 2·δ_k·a_k) and R^0_n = U + max_k
out_k·B_opt·u'_k the part of the redistribution the links do not change (in, out: the TEBs a device gains
and loses against the previous round's placement, :func:`~collapipe_core.scheduler.problem.moved_blocks`). w
is the penalty's weight of the latency at the candidate's M (``problem.penalty``: V, or V·(1 + B_noise/(b·Σ
M)) with the noise-scale term). It is solved by the standard barrier method (Newton steps with backtracking,
barrier weight ×30 per stage) to a duality gap of 1e-9 of the objective, many (δ, M) combinations at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.costmodel.closed_form import gained_blocks, penalty, redistribution
from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray

_LN2 = float(np.log(2.0))
_STEPS = 0.5 ** np.arange(24.0)


@dataclass(frozen=True, eq=False)
class _System:
    """One batch of candidates: constants, the variable layout and the constraint Jacobian's pattern.

    Variables (D = 2·N·K + 3·N + 2): s (N·K), t (N·K), z^F (N), z^B (N), D (N), Γ, Π.
    Constraint rows (R = 5·N·K + 4·N): P·u − z^F, P·u − z^B, δ·B·u − Γ, s + t − ln π (per device),
    c^F − z^F, c^B − z^B, R + I·T^pipe − Π, Σ e^s − 1 (per cluster), (δ·B + in·B_opt)·u − D (per device).
    """

    n: int
    k: int
    on: FloatArray  # (C, N·K) 1 where scheduled
    staged: FloatArray  # (C, N) 1 where M > 1 (else z^F, z^B and their rows are inactive)
    delta: FloatArray  # (C, N·K)
    payload: FloatArray  # (C, N·K) P: the payload of a micro-batch of the device's cluster at its M
    payload_n: FloatArray  # (C, N) the same per cluster
    download: FloatArray  # (C, N·K) δ·B + in·B_opt
    energy_weight: FloatArray  # (C, N·K) Q·bits·N0/h
    log_pi: FloatArray  # (N·K,)
    c_f: FloatArray  # (C, N)
    c_b: FloatArray  # (C, N)
    pipe_const: FloatArray  # (C, N) R^0 + I·(S0 + Σ 3δa)
    pipe_slope: FloatArray  # (C, N) I·(M − 1)
    latency_weight: FloatArray  # (C,) the penalty's weight of the latency at the candidate's M (V or more)
    constant: FloatArray  # (C,) objective terms that do not depend on (β, p)
    row_mask: FloatArray  # (C, R) 1 for active constraints
    frozen: FloatArray  # (C, D) 1 for variables that no active term depends on

    @property
    def dim(self) -> int:
        return 2 * self.n * self.k + 3 * self.n + 2

    def take(self, rows: IntArray) -> _System:
        """The candidates ``rows`` (or each repeated, for batched line searches)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        keep = {"n", "k", "log_pi"}
        return _System(**{name: value if name in keep else value[rows] for name, value in fields.items()})


def solve_links(
    problem: RoundProblem, delta: IntArray, micro: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Optimal β, p (C, N, K) and objective (C,) for each combination δ (C, N, K), M (C, N)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _solve_links(problem, delta, micro)


def _solve_links(
    problem: RoundProblem, delta: IntArray, micro: IntArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    pr = problem
    c_count, n, k = delta.shape
    sys = _system(pr, delta, micro)
    v = _start(pr, sys)
    num_constraints = sys.row_mask.sum(axis=1)
    tau = num_constraints / np.maximum(_objective(pr, sys, v), 1e-300)
    for _ in range(16):
        v = _center(pr, sys, v, tau)
        if np.all(num_constraints / tau <= 1e-9 * _objective(pr, sys, v)):
            break
        tau = tau * 30.0
    nk = n * k
    s, t = v[:, :nk].reshape(c_count, n, k), v[:, nk : 2 * nk].reshape(c_count, n, k)
    mask = delta > 0
    beta = np.where(mask, np.exp(s), 0.0)
    power = np.where(mask, beta * pr.bandwidth_hz * pr.noise_w_per_hz * np.exp(t) / pr.gain, 0.0)
    return beta, np.minimum(power, pr.max_power_w), _objective(pr, sys, v)


def _system(pr: RoundProblem, delta: IntArray, micro: IntArray) -> _System:
    c_count, n, k = delta.shape
    nk = n * k
    sched = delta > 0
    m = micro.astype(np.float64)
    mc = pr.micro_costs(micro)
    p_bits = np.broadcast_to(np.asarray(mc.payload_bits, dtype=np.float64), (c_count, n))
    tau = pr.link_latency_s
    x, back = delta * mc.compute_s, mc.backward_s(delta)
    bits = 2.0 * pr.iterations * m[..., None] * p_bits[..., None] + delta * pr.block_bits
    compute_energy = np.sum(
        pr.queues * np.where(sched, m[..., None] * delta * mc.energy_per_block_j(), 0.0), axis=(1, 2)
    )
    total = m.sum(axis=1)
    # penalty(T, ΣM) is affine in T at a fixed M: weight · T + its value at T = 0
    at_zero = penalty(pr, np.zeros(c_count), total)
    weight = penalty(pr, np.ones(c_count), total) - at_zero
    into, gained, held = transfers_of(pr, delta)
    # τ: the link stages are P·u + τ, so z^F, z^B stand for the stage maxima less τ; every transfer's τ
    # (two per scheduled device and micro-batch, and the stage maxima's) is a constant of the candidate
    stage_tau = 2.0 * tau * pr.iterations * (np.sum(sched, axis=2) + m - 1.0)
    on = sched.reshape(c_count, nk).astype(np.float64)
    staged = (micro > 1).astype(np.float64)
    staged_dev = np.repeat(staged, k, axis=1)
    ones_n = np.ones((c_count, n))
    row_mask = np.concatenate(
        [on * staged_dev, on * staged_dev, on, on, staged, staged, ones_n, ones_n, on], axis=1
    )
    frozen = np.concatenate([1 - on, 1 - on, 1 - staged, 1 - staged, np.zeros((c_count, n + 2))], axis=1)
    return _System(
        n=n,
        k=k,
        on=on,
        staged=staged,
        delta=delta.reshape(c_count, nk).astype(np.float64),
        payload=np.repeat(p_bits, k, axis=1),
        payload_n=p_bits,
        download=(delta * pr.block_bits + gained * pr.frozen_bits + into * pr.optimizer_bits).reshape(
            c_count, nk
        ),
        energy_weight=(pr.queues * bits * pr.noise_w_per_hz / pr.gain).reshape(c_count, nk),
        log_pi=np.log(pr.max_power_w * pr.gain / (pr.bandwidth_hz * pr.noise_w_per_hz)).reshape(nk),
        c_f=np.maximum(mc.chain_max_forward_s, np.max(np.where(sched, x, 0.0), axis=2)) - tau,
        c_b=np.maximum(mc.chain_max_backward_s, np.max(np.where(sched, back, 0.0), axis=2)) - tau,
        pipe_const=held[0]
        + pr.iterations * (mc.chain_sum_s + np.sum(np.where(sched, x + back, 0.0), axis=2))
        + stage_tau,
        pipe_slope=pr.iterations * (m - 1.0),
        latency_weight=weight,
        constant=weight * (pr.upload_s + tau) + at_zero + compute_energy + held[1],
        row_mask=row_mask,
        frozen=frozen,
    )


def _link_terms(pr: RoundProblem, s: FloatArray, t: FloatArray) -> tuple[FloatArray, ...]:
    """u = ln 2/(e^s·W·ln(1 + e^t)), q = d ln ln(1 + e^t)/dt, dq = dq/dt, g = x/log2(1 + x)."""
    soft = np.logaddexp(0.0, t)
    sig = 0.5 * (1.0 + np.tanh(0.5 * t))
    q = sig / soft
    dq = sig * (1.0 - sig) / soft - q * q
    u = _LN2 / (np.exp(s) * pr.bandwidth_hz * soft)
    g = _LN2 * np.exp(t) / soft
    return u, q, dq, g


def _split(sys: _System, v: FloatArray) -> tuple[FloatArray, ...]:
    nk, n = sys.n * sys.k, sys.n
    return (
        v[:, :nk],
        v[:, nk : 2 * nk],
        v[:, 2 * nk : 2 * nk + n],
        v[:, 2 * nk + n : 2 * nk + 2 * n],
        v[:, 2 * nk + 2 * n : 2 * nk + 3 * n],
        v[:, -2],
        v[:, -1],
    )


def _values(pr: RoundProblem, sys: _System, v: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(constraint values (C, R), objective (C,)); inactive rows read −1."""
    s, t, zf, zb, down, gamma, pi = _split(sys, v)
    u, _, _, g = _link_terms(pr, s, t)
    u = u * sys.on
    c_count, n, k = v.shape[0], sys.n, sys.k
    zf_dev, zb_dev = np.repeat(zf, k, axis=1), np.repeat(zb, k, axis=1)
    su = u.reshape(c_count, n, k).sum(axis=2)
    es = (np.exp(s) * sys.on).reshape(c_count, n, k).sum(axis=2)
    pipe = sys.pipe_const + down + pr.iterations * 2 * sys.payload_n * su + sys.pipe_slope * (zf + zb)
    raw = np.concatenate(
        [
            sys.payload * u - zf_dev,
            sys.payload * u - zb_dev,
            sys.delta * pr.block_bits * u - gamma[:, None],
            s + t - sys.log_pi,
            sys.c_f - zf,
            sys.c_b - zb,
            pipe - pi[:, None],
            es - 1.0,
            sys.download * u - np.repeat(down, k, axis=1),
        ],
        axis=1,
    )
    objective = (
        sys.latency_weight * (pi + gamma) + np.sum(sys.energy_weight * g * sys.on, axis=1) + sys.constant
    )
    return np.where(sys.row_mask > 0, raw, -1.0), objective


def _objective(pr: RoundProblem, sys: _System, v: FloatArray) -> FloatArray:
    return _values(pr, sys, v)[1]


def _barrier(pr: RoundProblem, sys: _System, v: FloatArray, tau: FloatArray) -> FloatArray:
    values, objective = _values(pr, sys, v)
    feasible = np.all(values < 0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.sum(np.log(np.where(values < 0, -values, 1.0)), axis=1)
    return np.where(feasible, tau * objective - logs, np.inf)


def _start(pr: RoundProblem, sys: _System) -> FloatArray:
    """A strictly feasible point: half the bandwidth shared equally, power e^{-1}·p_max, slack epigraphs."""
    c_count, n, k = sys.on.shape[0], sys.n, sys.k
    count = np.repeat(sys.on.reshape(c_count, n, k).sum(axis=2), k, axis=1)
    s = np.where(sys.on > 0, np.log(0.5 / np.maximum(count, 1.0)), 0.0)
    t = np.where(sys.on > 0, sys.log_pi - s - 1.0, 0.0)
    u = _link_terms(pr, s, t)[0] * sys.on
    link = (sys.payload * u).reshape(c_count, n, k).max(axis=2)
    zf = 1.5 * np.maximum(link, sys.c_f) + 1e-12
    zb = 1.5 * np.maximum(link, sys.c_b) + 1e-12
    gamma = 1.5 * np.max(sys.delta * pr.block_bits * u, axis=1) + 1e-12
    down = 1.5 * (sys.download * u).reshape(c_count, n, k).max(axis=2) + 1e-12
    su = u.reshape(c_count, n, k).sum(axis=2)
    pipe = sys.pipe_const + down + pr.iterations * 2 * sys.payload_n * su + sys.pipe_slope * (zf + zb)
    pi = 1.5 * np.max(pipe, axis=1) + 1e-12
    return np.concatenate([s, t, zf, zb, down, gamma[:, None], pi[:, None]], axis=1)


def _center(pr: RoundProblem, sys: _System, v: FloatArray, tau: FloatArray) -> FloatArray:
    """Damped Newton on τ·f0 + barrier until the Newton decrement is negligible (or steps vanish)."""
    active = np.ones(v.shape[0], dtype=bool)
    c_count, n_steps = v.shape[0], _STEPS.size
    repeated = sys.take(np.repeat(np.arange(c_count), n_steps))
    for _ in range(80):
        grad, hess = _derivatives(pr, sys, v, tau)
        step = -np.linalg.solve(hess, grad[..., None])[..., 0]
        decrement = -np.sum(grad * step, axis=1)
        # centred enough: the remaining decrement moves the objective by < 1e-10 of itself
        active &= decrement > np.maximum(1e-7, 1e-10 * tau * _objective(pr, sys, v))
        if not np.any(active):
            break
        phi = _barrier(pr, sys, v, tau)
        # backtracking with every step length 1, 1/2, ..., 2^-23 evaluated at once: the longest that
        # satisfies the Armijo condition (and keeps every constraint strictly satisfied) is taken
        trials = (v[:, None, :] + _STEPS[None, :, None] * step[:, None, :]).reshape(c_count * n_steps, -1)
        values = _barrier(pr, repeated, trials, np.repeat(tau, n_steps)).reshape(c_count, n_steps)
        good = values <= phi[:, None] - 0.25 * _STEPS[None, :] * decrement[:, None]
        first = np.argmax(good, axis=1)
        ok = active & good[np.arange(c_count), first]
        active &= ok
        v = v + np.where(ok, _STEPS[first], 0.0)[:, None] * step
    return v


def _derivatives(
    pr: RoundProblem, sys: _System, v: FloatArray, tau: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Gradient (C, D) and Hessian (C, D, D) of τ·f0 − Σ ln(−f_i)."""
    c_count, n, k, nk, dim = v.shape[0], sys.n, sys.k, sys.n * sys.k, sys.dim
    s, t = v[:, :nk], v[:, nk : 2 * nk]
    u, q, dq, g = _link_terms(pr, s, t)
    u_s, u_t = -u * sys.on, -u * q * sys.on
    u_ss, u_st, u_tt = u * sys.on, u * q * sys.on, u * (q * q - dq) * sys.on
    es = np.exp(s) * sys.on
    values, _ = _values(pr, sys, v)
    w = sys.row_mask / -values  # (C, R)
    jac = np.zeros((c_count, 5 * nk + 4 * n, dim))
    dev = np.arange(nk)
    cl = np.repeat(np.arange(n), k)
    si, ti, zfi, zbi, di, gi, pii = (
        dev,
        nk + dev,
        2 * nk + cl,
        2 * nk + n + cl,
        2 * nk + 2 * n + cl,
        dim - 2,
        dim - 1,
    )
    last = 4 * nk + 4 * n  # the download rows
    pipe_coef = pr.iterations * 2 * sys.payload
    for first, coef, z_col in (
        (0, sys.payload, zfi),
        (nk, sys.payload, zbi),
        (2 * nk, sys.delta * pr.block_bits, gi),
        (last, sys.download, di),
    ):
        rows = first + dev
        jac[:, rows, si] = coef * u_s
        jac[:, rows, ti] = coef * u_t
        jac[:, rows, z_col] = -1.0
    jac[:, 3 * nk + dev, si] = 1.0
    jac[:, 3 * nk + dev, ti] = 1.0
    base = 4 * nk
    jac[:, base + np.arange(n), 2 * nk + np.arange(n)] = -1.0
    jac[:, base + n + np.arange(n), 2 * nk + n + np.arange(n)] = -1.0
    pipe_rows = base + 2 * n + cl
    jac[:, pipe_rows, si] = pipe_coef * u_s
    jac[:, pipe_rows, ti] = pipe_coef * u_t
    jac[:, base + 2 * n + np.arange(n), 2 * nk + np.arange(n)] = sys.pipe_slope
    jac[:, base + 2 * n + np.arange(n), 2 * nk + n + np.arange(n)] = sys.pipe_slope
    jac[:, base + 2 * n + np.arange(n), pii] = -1.0
    jac[:, base + 2 * n + np.arange(n), 2 * nk + 2 * n + np.arange(n)] = 1.0
    jac[:, base + 3 * n + cl, si] = es
    jac[:, :, :] *= (sys.row_mask > 0)[:, :, None]
    grad = np.matmul(w[:, None, :], jac)[:, 0, :]
    grad[:, ti] += tau[:, None] * sys.energy_weight * g * (1.0 - q) * sys.on
    grad[:, [gi, pii]] += (tau * sys.latency_weight)[:, None]
    hess = np.matmul(jac.transpose(0, 2, 1) * (w * w)[:, None, :], jac)
    # second derivatives live in each device's (s, t) block: Σ_rows w·coef·∇²u, the bandwidth row, f0
    wu = (
        w[:, :nk] * sys.payload
        + w[:, nk : 2 * nk] * sys.payload
        + w[:, 2 * nk : 3 * nk] * sys.delta * pr.block_bits
        + w[:, base + 2 * n + cl] * pipe_coef
        + w[:, last : last + nk] * sys.download
    )
    hess[:, si, si] += wu * u_ss + w[:, base + 3 * n + cl] * es
    hess[:, si, ti] += wu * u_st
    hess[:, ti, si] += wu * u_st
    hess[:, ti, ti] += wu * u_tt + tau[:, None] * sys.energy_weight * g * ((1.0 - q) ** 2 - dq) * sys.on
    frozen = sys.frozen
    grad *= 1.0 - frozen
    hess *= (1.0 - frozen)[:, :, None] * (1.0 - frozen)[:, None, :]
    diag = np.arange(dim)
    hess[:, diag, diag] += frozen + 1e-14 * (1.0 + np.abs(hess[:, diag, diag]))
    return grad, hess


def transfers_of(
    pr: RoundProblem, delta: IntArray
) -> tuple[FloatArray, FloatArray, tuple[FloatArray, FloatArray]]:
    """For δ (C, N, K): in_k and g_k (C, N, K) and the redistribution's parts the links do not change: R^0_n
    (C, N) (with the download's τ) and the queue-weighted upload energy of moved optimizer state (C,)."""
    moves = redistribution(pr, delta, np.zeros(delta.shape))
    energy = np.sum(pr.queues * moves.upload_energy_j, axis=(1, 2))
    return moves.moved_in, gained_blocks(pr, delta), (moves.latency_s, energy)
