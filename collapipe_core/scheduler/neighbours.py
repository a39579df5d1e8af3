"""DSSDA's last block: a local search over moves of one cluster's segments and micro-batch count.

A neighbour of (δ, M) changes one cluster n: t TEBs move from device i to device j
(t ∈ {1, ⌈δ_i/2⌉, δ_i − 1, δ_i}), or nothing moves, and M_n takes any value that fits in memory
(M ± 2 when the limit is large). The segment DP proposes from link models; a move is judged with its
links re-solved, so it catches what the models misjudge (a device worth dropping, a whole segment worth
moving, a different M that memory only allows elsewhere).

Each neighbour is screened with the changed cluster's own links (a small weight menu) and the other
clusters unchanged; the SCREENED best are scored with links coupled across clusters (the weight menu of
:mod:`~collapipe_core.scheduler.coupling`, the changed cluster's options computed on its own); the best
is taken if it lowers the objective. With several clusters, the best few are also tried with every
cluster's M re-chosen jointly (:mod:`~collapipe_core.scheduler.microbatches`), since one cluster's
move can make another cluster's M change worthwhile.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.coupling import Options, options, select
from collapipe_core.scheduler.microbatches import best_microbatches, memory_limit
from collapipe_core.scheduler.problem import IntArray, RoundProblem, costs, quiet

SCREENED = 8
SCREEN_WEIGHTS = (1.0, 0.25, 0.0)
MAX_NEIGHBOURS = 150


def moves(pr: RoundProblem, delta: IntArray, micro: IntArray) -> tuple[IntArray, IntArray, IntArray]:
    """(owner (Q,), its new δ (Q, K), its new M (Q,)) for every neighbour of δ (N, K), M (N,)."""
    n, k = pr.shape
    owner, segs = [], []
    for c in range(n):
        owner.append(c)
        segs.append(delta[c])
        for i in range(k):
            has = int(delta[c, i])
            for j in range(k):
                if j == i or has == 0 or not pr.available[c, j]:
                    continue
                for t in sorted({1, (has + 1) // 2, has - 1, has} - {0}):
                    d = delta[c].copy()
                    d[i] -= t
                    d[j] += t
                    owner.append(c)
                    segs.append(d)
    own = np.array(owner)
    seg = np.array(segs)
    full = np.broadcast_to(delta, (seg.shape[0], *delta.shape)).copy()
    full[np.arange(seg.shape[0]), own] = seg
    limit = np.minimum(memory_limit(pr, full)[np.arange(seg.shape[0]), own], pr.microbatch_limit)
    m_all = np.arange(1, pr.microbatch_limit + 1)
    if seg.shape[0] * m_all.size > MAX_NEIGHBOURS:
        m_all = np.arange(-2, 3)  # offsets around the current M
        values = np.clip(micro[own][:, None] + m_all[None, :], 1, pr.microbatch_limit)
    else:
        values = np.broadcast_to(m_all, (seg.shape[0], m_all.size))
    ok = values <= limit[:, None]
    q, col = np.nonzero(ok)
    return own[q], seg[q], values[q, col]


def total(
    pr: RoundProblem, pipe: FloatArray, gather: FloatArray, energy: FloatArray, micro: FloatArray
) -> FloatArray:
    """The objective from per-cluster figures (..., N)."""
    convergence = pr.gradient_variance / (pr.microbatch_size * micro.sum(axis=-1))
    latency = pipe.max(axis=-1) + gather.max(axis=-1) + pr.upload_s
    return np.asarray(pr.V * (latency + pr.lambda_ * convergence) + energy.sum(axis=-1), dtype=np.float64)


def _own_options(
    pr: RoundProblem, owner: IntArray, seg: IntArray, mic: IntArray, weights: tuple[float, ...], rounds: int
) -> Options:
    """Options of each neighbour's changed cluster, solved on that cluster alone; arrays (Q, W, ...)."""
    q, k = seg.shape
    menu = len(weights) ** 2
    out = {
        f: np.zeros((q, menu, *tail))
        for f, tail in (("beta", (k,)), ("power", (k,)), ("pipe", ()), ("gather", ()), ("energy", ()))
    }
    for c in np.unique(owner):
        rows = np.flatnonzero(owner == c)
        opt = options(pr.cluster(int(c)), seg[rows][:, None, :], mic[rows][:, None], weights, rounds)
        for f in out:
            value = getattr(opt, f)  # (rows, W, 1, ...)
            out[f][rows] = value[:, :, 0]
    return Options(**out)


def _as_options(
    pr: RoundProblem, delta: IntArray, micro: IntArray, beta: FloatArray, power: FloatArray
) -> Options:
    """Given links as a one-option menu (1, 1, N, ...)."""
    rate = pr.rate_bps(beta, power)
    with np.errstate(divide="ignore"):
        u = np.where(rate > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
    c = costs(pr, delta, micro, u, power)
    energy = np.sum(pr.queues * c.energy_j, axis=-1)
    return Options(
        beta[None, None],
        power[None, None],
        (pr.iterations * c.pipeline_s)[None, None],
        c.gather_s[None, None],
        energy[None, None],
    )


@quiet
def best_move(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    weights: tuple[float, ...],
    current: tuple[FloatArray, FloatArray],
    rounds: int = 2,
) -> tuple[IntArray, IntArray, FloatArray, FloatArray, float, float]:
    """The best neighbour of δ (N, K), M (N,): (δ, M, β, p, its objective, the current objective).

    Both objectives use the coupled links; with one cluster the menu is just (1, 1) and the current
    links ``current`` = (β, p) are used as they are."""
    n, _k = pr.shape
    if n == 1:
        now = _as_options(pr, delta, micro, *current)
    else:
        now = options(pr, delta[None], micro[None], weights, rounds)  # (1, W, N, ...)
    pick_now = select(pr.V, now.pipe, now.gather, now.energy)[0]
    cols = np.arange(n)
    now_value = float(
        total(
            pr,
            now.pipe[0, pick_now, cols],
            now.gather[0, pick_now, cols],
            now.energy[0, pick_now, cols],
            micro.astype(np.float64),
        )
    )
    owner, seg, mic = moves(pr, delta, micro)
    if owner.size == 0:
        return delta, micro, now.beta[0, pick_now, cols], now.power[0, pick_now, cols], now_value, now_value
    # screening: the changed cluster's own options (a small menu), the others as they are now
    small = SCREEN_WEIGHTS if n > 1 else (1.0,)
    plain = _own_options(pr, owner, seg, mic, small, rounds)  # (Q, W', ...)
    base = [x[0, pick_now, cols] for x in (now.pipe, now.gather, now.energy)]
    m_all = np.broadcast_to(micro, (owner.size, n)).copy()
    m_all[np.arange(owner.size), owner] = mic
    w_small = plain.pipe.shape[1]
    figures = []
    for x, own in zip(base, (plain.pipe, plain.gather, plain.energy), strict=True):
        f = np.broadcast_to(x, (owner.size, w_small, n)).copy()
        f[np.arange(owner.size), :, owner] = own
        figures.append(f)
    screen = np.min(
        total(pr, figures[0], figures[1], figures[2], m_all[:, None, :].astype(np.float64)), axis=1
    )
    top = np.argsort(screen, kind="stable")[:SCREENED]
    if n == 1:  # one cluster: the screening links are the final ones
        b = int(top[0])
        return seg[b][None], mic[b : b + 1], plain.beta[b], plain.power[b], float(screen[b]), now_value
    # the best few with coupled links: the changed cluster's options, the others' options from now
    opt = _own_options(pr, owner[top], seg[top], mic[top], weights, rounds)
    stacked = []
    for name in ("pipe", "gather", "energy"):
        arr = np.broadcast_to(
            getattr(now, name)[0], (top.size, *getattr(now, name).shape[1:])
        ).copy()  # (T, W, N)
        arr[np.arange(top.size), :, owner[top]] = getattr(opt, name)
        stacked.append(arr)
    pick = select(pr.V, *stacked)  # (T, N)
    t_idx = np.arange(top.size)[:, None]
    value = total(
        pr,
        stacked[0][t_idx, pick, cols],
        stacked[1][t_idx, pick, cols],
        stacked[2][t_idx, pick, cols],
        m_all[top].astype(np.float64),
    )
    full_delta = np.broadcast_to(delta, (top.size, *delta.shape)).copy()
    full_delta[np.arange(top.size), owner[top]] = seg[top]
    full_micro = m_all[top]
    beta = np.take_along_axis(now.beta[0][None], pick[:, None, :, None], axis=1)[:, 0].copy()  # (T, N, K)
    power = np.take_along_axis(now.power[0][None], pick[:, None, :, None], axis=1)[:, 0].copy()
    t_range = np.arange(top.size)
    beta[t_range, owner[top]] = opt.beta[t_range, pick[t_range, owner[top]]]
    power[t_range, owner[top]] = opt.power[t_range, pick[t_range, owner[top]]]
    if n > 1:  # the clusters' M are coupled (G(Σ M), the maximum): the joint M step on each, links re-solved
        rate = pr.rate_bps(beta, power)
        with np.errstate(divide="ignore"):
            u = np.where(rate > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
        limit = np.maximum(np.minimum(memory_limit(pr, full_delta), pr.microbatch_limit), 1)
        joint = best_microbatches(pr, full_delta, u, power, limit)
        jo = options(pr, full_delta, joint, weights, rounds)
        jp = select(pr.V, jo.pipe, jo.gather, jo.energy)  # (T, N)
        jv = total(
            pr,
            jo.pipe[t_idx, jp, cols],
            jo.gather[t_idx, jp, cols],
            jo.energy[t_idx, jp, cols],
            joint.astype(np.float64),
        )
        better = jv < value
        value = np.where(better, jv, value)
        full_micro = np.where(better[:, None], joint, full_micro)
        sel = jp[:, None, :, None]
        beta = np.where(better[:, None, None], np.take_along_axis(jo.beta, sel, axis=1)[:, 0], beta)
        power = np.where(better[:, None, None], np.take_along_axis(jo.power, sel, axis=1)[:, 0], power)
    b = int(np.argmin(value))
    return full_delta[b], full_micro[b], beta[b], power[b], float(value[b]), now_value
