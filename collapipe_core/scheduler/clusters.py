"""How the clusters are coupled: the links of every cluster for a menu of weights, and the choice of one
option per cluster that minimises the round's objective.

Clusters share only the round latency's two maxima, max_n (R_n + I·T^pipe_n) and max_n A_n, and the
convergence term λ·σ²/(b·Σ_n M_n). A cluster that is not the bottleneck of a maximum gains nothing from
being faster there and should spend less energy instead: with Lagrange weights w_n, v_n ∈ [0, 1] on its
pipeline and gather times its links minimise w_n·V·(R_n + I·T^pipe_n) + v_n·V·A_n + Σ_k Q_k·E_k (the link
step, rows of single clusters); at the joint optimum the weights of the clusters at each maximum sum to one
and the others' are zero. Each cluster's links are solved for every pair (w, v) of a menu, then
:func:`select` chooses one option per cluster to minimise J
(:func:`~collapipe_core.costmodel.closed_form.round_objective`): when (W·N)³ ≤ 4,000,000 by enumerating the
levels (Π̄, Ā) of the two maxima among the options' values (under a level pair each cluster takes its
cheapest option within both: exact when every option has the same M, else with a few prices of a
micro-batch); beyond, the better of the levels nearest the lowest feasible ones and
simultaneous best responses (each cluster given the others' maxima, four sweeps, the best assignment kept).

:class:`LinkCache` solves each distinct single-cluster link problem of a round once.
"""

from __future__ import annotations

import numpy as np

from collapipe_core.costmodel.closed_form import costs, latency_factor, round_objective
from collapipe_core.costmodel.problem import RoundProblem
from collapipe_core.network import FloatArray
from collapipe_core.scheduler.arrays import IntArray, quiet
from collapipe_core.scheduler.links import allocate

WEIGHTS = (1.0, 0.5, 0.25, 0.1, 0.03, 0.0)
LEVELS_LIMIT = 4_000_000  # (levels² · options) elements of the level search over every level
SWEEPS = 4


class LinkCache:
    """The links (β, p) of single clusters solved in one round, by (cluster, δ_n, M_n, w_n, v_n, rounds)."""

    def __init__(self, pr: RoundProblem) -> None:
        self.problem = pr
        self._links: dict[bytes, tuple[FloatArray, FloatArray]] = {}  # one row's β, p (K,)
        self.requested = 0  # rows asked for
        self.solved = 0  # rows solved

    def links(
        self,
        cluster: IntArray,
        delta: IntArray,
        micro: IntArray,
        pipeline_weight: FloatArray,
        gather_weight: FloatArray,
        rounds: int,
        total_micro: FloatArray | IntArray,
    ) -> tuple[FloatArray, FloatArray]:
        """β, p (R, K) for rows: cluster (R,), δ (R, K), M, w, v (R,) in solutions training Σ M micro-batches
        (``total_micro`` (R,)): w and v are scaled by the penalty's weight of the latency there."""
        factor = latency_factor(self.problem, total_micro)
        w, v = pipeline_weight * factor, gather_weight * factor
        columns = np.column_stack([cluster, micro, w, v, np.full(cluster.shape, rounds), delta])
        keys = [row.tobytes() for row in columns.astype(np.float64)]
        new = np.array(list({k: i for i, k in enumerate(keys) if k not in self._links}.values()), dtype=int)
        if new.size:
            beta, power = allocate(self.problem, cluster[new], delta[new], micro[new], w[new], v[new], rounds)
            self._links.update(zip([keys[i] for i in new], zip(beta, power, strict=True), strict=True))
            self.solved += new.size
        self.requested += len(keys)
        return np.stack([self._links[k][0] for k in keys]), np.stack([self._links[k][1] for k in keys])


@quiet
def coupled_links(
    cache: LinkCache, delta: IntArray, micro: IntArray, rounds: int, weights: tuple[float, ...] = WEIGHTS
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """β, p (S, N, K) for δ (S, N, K), M (S, N): each cluster's links solved for every pair (w, v) ∈ weights²
    and one option per cluster chosen by :func:`select` (a lone cluster's: the weights (1, 1)); also the
    chosen weights w, v (S, N)."""
    pr = cache.problem
    w = np.array((1.0,) if delta.shape[1] == 1 else weights)
    pipe_w, gather_w = np.repeat(w, w.size), np.tile(w, w.size)  # the menu, (W,)
    s_count, n, k = delta.shape
    shape = (s_count, pipe_w.size, n)
    d = np.broadcast_to(delta[:, None], (*shape, k))
    m = np.broadcast_to(micro[:, None], shape)
    beta, power = cache.links(
        np.broadcast_to(np.arange(n), shape).reshape(-1),
        d.reshape(-1, k),
        m.reshape(-1),
        np.broadcast_to(pipe_w[:, None], shape).reshape(-1),
        np.broadcast_to(gather_w[:, None], shape).reshape(-1),
        rounds,
        np.broadcast_to(micro.sum(axis=1)[:, None, None], shape).reshape(-1),
    )
    beta, power = beta.reshape(d.shape), power.reshape(d.shape)
    c = costs(pr, d, m, pr.time_per_bit(beta, power), power)
    pick = select(pr, c.train_s, c.gather_s, np.sum(pr.queues * c.energy_j, axis=-1))  # (S, N)
    at = np.arange(s_count)[:, None], pick, np.arange(n)  # each row's pick of each cluster
    return (
        beta[at],
        power[at],
        w[pick // w.size],
        w[pick % w.size],
    )


@quiet
def select(
    pr: RoundProblem,
    pipe: FloatArray,
    gather: FloatArray,
    energy: FloatArray,
    micro: FloatArray | None = None,
) -> IntArray:
    """One option (S, N) per cluster minimising J (:func:`round_objective`); per option (S, W, N) its
    R_n + I·T^pipe_n, gather time, Σ_k Q_k·E_k and M_n (missing options: pipe = ∞; ``micro`` None: the same M
    for every option, the convergence term left out)."""
    m = np.ones(pipe.shape) if micro is None else micro
    index, (pipe, gather, energy, m) = _undominated(pipe, gather, energy, m)
    pick = _select(pr, pipe, gather, energy, m)
    return index[np.arange(pick.shape[0])[:, None], pick, np.arange(pick.shape[1])]


def _undominated(
    pipe: FloatArray, gather: FloatArray, energy: FloatArray, micro: FloatArray
) -> tuple[IntArray, list[FloatArray]]:
    """The options (S, W', N) no other option of the same cluster dominates (no worse in R + I·T^pipe, gather
    time, energy and −M, better in one; of equal ones the first), moved to the front, with their original
    indices; the slots left over are missing (pipe ∞). A dominated option is never needed: the one that
    dominates it gives a J no higher."""
    f = np.stack([pipe, gather, energy, -micro], axis=-1)  # (S, W, N, 4)
    no_worse = np.all(f[:, :, None] <= f[:, None, :], axis=-1)  # (S, W, W, N): option i no worse than j
    better = np.any(f[:, :, None] < f[:, None, :], axis=-1)
    w = pipe.shape[1]
    earlier_equal = np.tril(np.ones((w, w), dtype=bool), -1)[None, :, :, None] & no_worse & ~better
    beaten = np.any((no_worse & better) | earlier_equal.transpose(0, 2, 1, 3), axis=1) | ~np.isfinite(pipe)
    order = np.argsort(beaten, axis=1, kind="stable")  # kept options first
    width = max(int(np.max(np.sum(~beaten, axis=1))), 1)
    index = order[:, :width]
    at = np.arange(pipe.shape[0])[:, None, None], index, np.arange(pipe.shape[2])  # (S, W', N)
    kept = ~beaten[at]
    out = [x[at] for x in (pipe, gather, energy, micro)]
    out[0] = np.where(kept, out[0], np.inf)
    return index, out


def _select(
    pr: RoundProblem, pipe: FloatArray, gather: FloatArray, energy: FloatArray, m: FloatArray
) -> IntArray:
    s_count, w, n = pipe.shape
    if w == 1:  # one undominated option per cluster
        return np.zeros((s_count, n), dtype=np.int64)
    if (w * n) ** 2 * w * n <= LEVELS_LIMIT:  # every option's values as levels
        return _levels(pr, pipe, gather, energy, m, pipe.reshape(s_count, -1), gather.reshape(s_count, -1))
    # many clusters: the levels nearest the lowest feasible ones, and best responses; the better
    window = max(int(np.sqrt(LEVELS_LIMIT / (w * n))), 2)
    near = [_lowest_levels(x, window) for x in (pipe, gather)]
    picks = [_levels(pr, pipe, gather, energy, m, *near), _best_responses(pr, pipe, gather, energy, m)]
    rows, columns = np.arange(pipe.shape[0])[:, None], np.arange(n)[None, :]
    values = [round_objective(pr, *(x[rows, p, columns] for x in (pipe, gather, energy, m))) for p in picks]
    return np.where((values[0] <= values[1])[:, None], picks[0], picks[1])


def _lowest_levels(x: FloatArray, count: int) -> FloatArray:
    """The ``count`` smallest distinct values (S, count) of the options (S, W, N) at or above the lowest
    feasible level max_n min_w x (below it some cluster has no option); ∞-padded."""
    lowest = np.max(np.min(x, axis=1), axis=1, keepdims=True)
    flat = np.sort(
        np.where(x.reshape(x.shape[0], -1) >= lowest * (1 - 1e-12), x.reshape(x.shape[0], -1), np.inf), axis=1
    )
    repeat = np.concatenate([np.zeros((flat.shape[0], 1), dtype=bool), flat[:, 1:] == flat[:, :-1]], axis=1)
    return np.sort(np.where(repeat, np.inf, flat), axis=1)[:, :count]


def _levels(
    pr: RoundProblem,
    pipe: FloatArray,
    gather: FloatArray,
    energy: FloatArray,
    micro: FloatArray,
    levels_p: FloatArray,
    levels_g: FloatArray,
) -> IntArray:
    """Exact for the maxima over the given levels (S, P), (S, G): for each pair of levels (Π̄, Ā) each
    cluster takes, among its options within both, the least E_n − ν·M_n, for a few prices ν of a
    micro-batch around the convergence term's marginal value; the selection of least J is returned."""
    s_count, _w, n = pipe.shape
    ok = (pipe[:, None, None] <= levels_p[:, :, None, None, None] * (1 + 1e-12)) & (
        gather[:, None, None] <= levels_g[:, None, :, None, None] * (1 + 1e-12)
    )  # (S, P, G, W, N)
    gain = pr.convergence_gain
    total = np.sum(micro[:, 0], axis=1)  # the first option's M: the current ones
    best_pick, best_value = np.zeros((s_count, n), dtype=np.int64), np.full(s_count, np.inf)
    same_micro = bool(np.all(micro == micro[:, :1]))
    at_row, at_cluster = np.arange(s_count)[:, None, None, None], np.arange(n)  # against choice (S, P, G, N)
    for scale in (0.0,) if same_micro else (0.0, 0.5, 1.0, 2.0):
        nu = scale * gain / (total * (total + 1.0))
        cost = np.where(ok, (energy - nu[:, None, None] * micro)[:, None, None], np.inf)
        choice = np.argmin(cost, axis=3)  # (S, P, G, N)
        picked = [x[at_row, choice, at_cluster] for x in (pipe, gather, energy, micro)]
        value = round_objective(pr, *picked).reshape(s_count, -1)  # (S, P·G)
        at = np.argmin(value, axis=1)
        better = value[np.arange(s_count), at] < best_value
        flat = choice.reshape(s_count, -1, n)[np.arange(s_count), at]
        best_pick = np.where(better[:, None], flat, best_pick)
        best_value = np.where(better, value[np.arange(s_count), at], best_value)
    return best_pick


def _best_responses(
    pr: RoundProblem, pipe: FloatArray, gather: FloatArray, energy: FloatArray, micro: FloatArray
) -> IntArray:
    """Simultaneous best responses from option 0: each cluster its best option given the others' maxima and
    micro-batches, SWEEPS times; the best selection seen."""
    s_count, _, n = pipe.shape
    rows, columns = np.arange(s_count)[:, None], np.arange(n)[None, :]
    pick = np.zeros((s_count, n), dtype=np.int64)

    def value(pick: IntArray) -> FloatArray:
        return round_objective(pr, *(x[rows, pick, columns] for x in (pipe, gather, energy, micro)))

    best_pick, best = pick, value(pick)
    for _ in range(SWEEPS):
        now = [x[rows, pick, columns] for x in (pipe, gather, energy, micro)]
        others_m = now[3].sum(axis=1, keepdims=True) - now[3]
        cost = (
            pr.V
            * (
                np.maximum(pipe, others_max(now[0])[:, None])
                + np.maximum(gather, others_max(now[1])[:, None])
            )
            + pr.convergence_gain / (micro + others_m[:, None])
            + energy
        )
        pick = np.argmin(cost, axis=1)
        new = value(pick)
        better = new < best
        best = np.where(better, new, best)
        best_pick = np.where(better[:, None], pick, best_pick)
    return best_pick


def others_max(x: FloatArray) -> FloatArray:
    """For each cluster the largest value of the other clusters (..., N); −∞ with one cluster."""
    if x.shape[-1] == 1:
        return np.full(x.shape, -np.inf)
    top = np.argmax(x, axis=-1)[..., None]
    first = np.max(x, axis=-1, keepdims=True)  # x at top
    is_top = np.arange(x.shape[-1]) == top
    second = np.max(np.where(is_top, -np.inf, x), axis=-1, keepdims=True)
    out: FloatArray = np.where(is_top, second, first)
    return out
