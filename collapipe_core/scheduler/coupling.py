"""How DSSDA's link step handles the coupling between clusters.

Clusters share nothing but the round latency's two maxima, T = max_n I·T^pipe_n + max_n A_n, and the
convergence term (which the link step does not change). A cluster that is not the bottleneck of a
maximum gains nothing from being faster there and should spend less energy instead. With Lagrange
weights w_n, v_n ∈ [0, 1] on a cluster's pipeline and gather times, its links minimise
w_n·V·I·T^pipe_n + v_n·V·A_n + Σ_k Q_k·E_k (:func:`allocation.allocate_links`); at the joint optimum
the weights of the clusters at each maximum sum to one and the others are zero.

Every cluster's links are solved for a menu of weight pairs (w, v) ∈ WEIGHTS² at once; then one option
per cluster is chosen to minimise the true objective V·(max_n I·T^pipe_n + max_n A_n) + Σ_n Q·E_n:
exactly — over every combination when there are few (W^N ≤ PRODUCT_LIMIT), else for up to
EXACT_CLUSTERS clusters by enumerating the levels (Π̄, Ā) of the two maxima among the options' values
(under a level pair each cluster takes its cheapest option within both levels) — and by simultaneous
best responses (each cluster given the others' maxima) beyond that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collapipe_core.network import FloatArray
from collapipe_core.scheduler.allocation import allocate_links, cluster_terms
from collapipe_core.scheduler.linkmemo import LinkMemo
from collapipe_core.scheduler.problem import IntArray, RoundProblem, costs, quiet, take_last

WEIGHTS = (1.0, 0.5, 0.25, 0.1, 0.03, 0.0)
EXACT_CLUSTERS = 4
PRODUCT_LIMIT = 20_000
SWEEPS = 4


@dataclass(frozen=True, eq=False)
class Options:
    """Each cluster's links under each weight pair of the menu, and what they cost."""

    beta: FloatArray  # (..., W, N, K)
    power: FloatArray  # (..., W, N, K)
    pipe: FloatArray  # (..., W, N) I·T^pipe_n
    gather: FloatArray  # (..., W, N)
    energy: FloatArray  # (..., W, N) Σ_k Q_k·E_k


@quiet
def options(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    weights: tuple[float, ...],
    rounds: int = 2,
    memo: LinkMemo | None = None,
) -> Options:
    """Links of every cluster of δ (..., N, K), M (..., N) for each pair (w, v) ∈ weights²."""
    w = np.array(weights)
    pw = np.repeat(w, w.size)  # (W,) menu of (w, v) pairs
    gw = np.tile(w, w.size)
    lead = delta.shape[:-2]
    menu = pw.size
    d = np.broadcast_to(delta[..., None, :, :], (*lead, menu, *delta.shape[-2:]))
    m = np.broadcast_to(micro.astype(np.float64)[..., None, :], (*lead, menu, micro.shape[-1]))
    shape = m.shape
    if memo is not None:
        cluster = np.broadcast_to(np.arange(shape[-1]), shape).reshape(-1)
        flat = memo.links(
            cluster,
            d.reshape(-1, d.shape[-1]),
            np.broadcast_to(micro[..., None, :], shape).reshape(-1),
            np.broadcast_to(pw[:, None], shape).reshape(-1),
            np.broadcast_to(gw[:, None], shape).reshape(-1),
            rounds,
        )
        beta, power = (x.reshape(d.shape) for x in flat)
    else:
        pipe_w, gather_w = np.broadcast_to(pw[:, None], shape), np.broadcast_to(gw[:, None], shape)
        terms = cluster_terms(pr, d, m, pipe_w, gather_w, np.zeros(shape))
        beta, power, _ = allocate_links(pr, d, m, terms, rounds)  # (..., W, N, K)
    rate = pr.rate_bps(beta, power)
    u = np.where(rate > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
    c = costs(pr, d, np.broadcast_to(micro[..., None, :], shape), u, power)
    energy = np.sum(pr.queues * c.energy_j, axis=-1)
    return Options(beta, power, pr.iterations * c.pipeline_s, c.gather_s, energy)


@quiet
def coupled_links(
    pr: RoundProblem,
    delta: IntArray,
    micro: IntArray,
    rounds: int = 2,
    weights: tuple[float, ...] = WEIGHTS,
    memo: LinkMemo | None = None,
) -> tuple[FloatArray, FloatArray]:
    """β, p (..., N, K) for fixed δ (..., N, K) and M (..., N); ``rounds`` of the link descent.

    With a ``memo`` each distinct cluster link problem of the round is solved once."""
    mf = micro.astype(np.float64)
    if pr.shape[0] == 1 or len(weights) == 1:
        ones = np.ones(mf.shape)
        if memo is not None:
            cluster = np.broadcast_to(np.arange(pr.shape[0]), mf.shape).reshape(-1)
            flat = np.ones(cluster.shape)
            b, p = memo.links(cluster, delta.reshape(-1, pr.shape[1]), micro.reshape(-1), flat, flat, rounds)
            return b.reshape(delta.shape), p.reshape(delta.shape)
        terms = cluster_terms(pr, delta, mf, ones, ones, np.zeros(mf.shape))
        beta, power, _ = allocate_links(pr, delta, mf, terms, rounds)
        return beta, power
    opt = options(pr, delta, micro, weights, rounds, memo)
    pick = select(pr.V, opt.pipe, opt.gather, opt.energy)  # (..., N)
    sel = pick[..., None, :, None]
    return (
        np.take_along_axis(opt.beta, sel, axis=-3)[..., 0, :, :],
        np.take_along_axis(opt.power, sel, axis=-3)[..., 0, :, :],
    )


def select(v: float, pipe: FloatArray, gather: FloatArray, energy: FloatArray) -> IntArray:
    """One option (..., N) per cluster minimising V·(max pipe + max gather) + Σ energy; inputs (..., W, N)."""
    lead = pipe.shape[:-2]
    w, n = pipe.shape[-2:]
    flat = [x.reshape((-1, w, n)) for x in (pipe, gather, energy)]
    if w**n <= PRODUCT_LIMIT:
        pick = _product(v, *flat)
    elif n <= EXACT_CLUSTERS:
        pick = _exact(v, *flat)
    else:
        pick = _sweeps(v, *flat)
    return pick.reshape((*lead, n))


def _product(v: float, pipe: FloatArray, gather: FloatArray, energy: FloatArray) -> IntArray:
    """Every combination of options (W^N of them), for few clusters."""
    _b, w, n = pipe.shape
    combos = np.stack(np.unravel_index(np.arange(w**n), (w,) * n), axis=1)  # (W^N, N)
    cols = np.arange(n)[None, :]
    p = pipe[:, combos, cols]  # (B, W^N, N)
    g = gather[:, combos, cols]
    e = energy[:, combos, cols]
    value = v * (p.max(axis=2) + g.max(axis=2)) + e.sum(axis=2)
    return np.asarray(combos[np.argmin(value, axis=1)], dtype=np.int64)


def _value(v: float, pipe: FloatArray, gather: FloatArray, energy: FloatArray, pick: IntArray) -> FloatArray:
    idx = pick[:, None, :]
    take = [np.take_along_axis(x, idx, axis=1)[:, 0] for x in (pipe, gather, energy)]
    return np.asarray(v * (take[0].max(axis=1) + take[1].max(axis=1)) + take[2].sum(axis=1), dtype=np.float64)


def _exact(v: float, pipe: FloatArray, gather: FloatArray, energy: FloatArray) -> IntArray:
    b, _w, _n = pipe.shape
    levels_p = pipe.reshape(b, -1)  # (B, P)
    levels_g = gather.reshape(b, -1)  # (B, G)
    ok_p = pipe[:, None, :, :] <= levels_p[:, :, None, None] * (1 + 1e-12)  # (B, P, W, N)
    ok_g = gather[:, None, :, :] <= levels_g[:, :, None, None] * (1 + 1e-12)  # (B, G, W, N)
    ok = ok_p[:, :, None] & ok_g[:, None, :]  # (B, P, G, W, N)
    e = np.where(ok, energy[:, None, None], np.inf)
    choice = np.argmin(e, axis=3)  # (B, P, G, N)
    best_e = np.min(e, axis=3).sum(axis=3)  # (B, P, G)
    total = v * (levels_p[:, :, None] + levels_g[:, None, :]) + best_e
    flat = np.argmin(total.reshape(b, -1), axis=1)
    ip, ig = np.unravel_index(flat, total.shape[1:])
    return np.asarray(choice[np.arange(b), ip, ig], dtype=np.int64)


def _sweeps(v: float, pipe: FloatArray, gather: FloatArray, energy: FloatArray) -> IntArray:
    """Simultaneous best responses: each cluster takes its best option given the other clusters' maxima
    (computed with the top-two trick), SWEEPS times; the best assignment seen is kept."""
    b, _w, n = pipe.shape
    rows = np.arange(b)[:, None]
    cols = np.arange(n)[None, :]
    pick = np.zeros((b, n), dtype=np.int64)  # option 0: weights (1, 1)
    best_pick, best = pick, _value(v, pipe, gather, energy, pick)
    for _ in range(SWEEPS):
        cur_p, cur_g = pipe[rows, pick, cols], gather[rows, pick, cols]  # (B, N)
        others_p = _others_max(cur_p)
        others_g = _others_max(cur_g)
        cost = (
            v * (np.maximum(pipe, others_p[:, None, :]) + np.maximum(gather, others_g[:, None, :])) + energy
        )
        pick = np.argmin(cost, axis=1)
        value = _value(v, pipe, gather, energy, pick)
        better = value < best
        best = np.where(better, value, best)
        best_pick = np.where(better[:, None], pick, best_pick)
    return best_pick


def _others_max(x: FloatArray) -> FloatArray:
    """For each column, the maximum over the other columns (B, N)."""
    order = np.argsort(-x, axis=1)
    first = take_last(x, order[:, :1])
    second = take_last(x, order[:, 1:2]) if x.shape[1] > 1 else np.full_like(first, -np.inf)
    return np.where(np.arange(x.shape[1])[None, :] == order[:, :1], second, first)
