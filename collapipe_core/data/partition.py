"""Splitting a dataset into a held-out set and one training shard per cluster, IID or label-skewed.

1. A seeded shuffle sets aside ``eval_samples`` samples; they never appear in a training shard.
2. IID (``dirichlet_alpha=None``): consecutive slices of the shuffled rest, ``samples_per_cluster`` each.
3. Non-IID: every sample has a group key (its label, or e.g. the first letter of a word). For each
   group g we draw cluster proportions p_g ~ Dirichlet(alpha·1_N) (classic label skew), so cluster c
   wants group g in proportion to p_g[c]·supply_g. Each cluster's wishes are rounded to exactly
   ``samples_per_cluster`` samples (largest remainder).
4. When the clusters together want more of a group than it holds, the group is shared out in
   proportion to the wishes and each short cluster tops up from the groups that still have samples,
   in proportion to its own wishes over them (or to their remaining supply if it wanted none of
   them). No sample is ever used twice; the skew is softened only as much as the supply forces.
Small alpha -> each cluster sees few groups; large alpha -> every cluster looks like the whole.

:func:`split_samples` does all steps; :func:`hold_out` (step 1) and :func:`split_pool` (steps 2-4) are
also called apart when the held-out rows must be known first (user files hold rows out before
training a tokenizer) or come from another file.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collapipe_core.data.seeding import stream_rng

Indices = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Split:
    """Row indices into the dataset: the held-out set and one training shard per cluster."""

    eval: Indices  # (eval_samples,)
    clusters: tuple[Indices, ...]  # num_clusters x (samples_per_cluster,)


def apportion(weights: Floats, total: int) -> Indices:
    """Integers proportional to ``weights`` that sum to ``total`` (largest remainder; ties by position)."""
    quotas = weights / weights.sum() * total
    counts: Indices = np.floor(quotas).astype(np.int64)
    order = np.argsort(-(quotas - counts), kind="stable")
    counts[order[: total - int(counts.sum())]] += 1
    return counts


def fit_supply(wanted: Floats, supply: Indices, samples_per_cluster: int) -> Indices:
    """Integer (clusters, groups) counts: rows sum to samples_per_cluster, columns stay within supply.

    ``wanted`` (clusters, groups) are each cluster's group proportions. Needs sum(supply) >= the
    total; every pass fills at least one group to the brim, so it ends within groups+1 passes.
    """
    counts = np.stack([apportion(row, samples_per_cluster) for row in wanted])
    for _ in range(supply.size + 1):
        over = np.flatnonzero(counts.sum(axis=0) > supply)
        if over.size == 0:
            return counts
        for group in over:  # share the group out in proportion to what each cluster asked for
            counts[:, group] = apportion(counts[:, group].astype(np.float64), int(supply[group]))
        spare = supply - counts.sum(axis=0)
        for cluster in np.flatnonzero(counts.sum(axis=1) < samples_per_cluster):
            shortfall = samples_per_cluster - int(counts[cluster].sum())
            weights = np.where(spare > 0, wanted[cluster], 0.0)
            if weights.sum() <= 0:
                weights = spare.astype(np.float64)
            counts[cluster] += apportion(weights, shortfall)
    raise AssertionError("fit_supply did not converge; supply must cover every cluster")


def hold_out(num_samples: int, eval_samples: int, seed: int) -> tuple[Indices, Indices]:
    """(held-out rows, the other rows in shuffled order): one seeded shuffle of ``range(num_samples)``."""
    if eval_samples > num_samples:
        raise ValueError(f"cannot hold out {eval_samples} of {num_samples} samples")
    order = stream_rng(seed, "eval-split").permutation(num_samples)
    return order[:eval_samples], order[eval_samples:]


def split_samples(
    keys: Indices,
    *,
    eval_samples: int,
    num_clusters: int,
    samples_per_cluster: int,
    dirichlet_alpha: float | None,
    seed: int,
) -> Split:
    """Held-out and per-cluster row indices for samples whose group keys are ``keys`` (n,)."""
    needed = eval_samples + num_clusters * samples_per_cluster
    if needed > keys.size:
        raise ValueError(f"{keys.size} samples cannot be split into {needed}")
    eval_rows, pool = hold_out(keys.size, eval_samples, seed)
    clusters = split_pool(
        keys,
        pool,
        num_clusters=num_clusters,
        samples_per_cluster=samples_per_cluster,
        dirichlet_alpha=dirichlet_alpha,
        seed=seed,
    )
    return Split(eval_rows, clusters)


def split_pool(
    keys: Indices,
    pool: Indices,
    *,
    num_clusters: int,
    samples_per_cluster: int,
    dirichlet_alpha: float | None,
    seed: int,
) -> tuple[Indices, ...]:
    """One shard of row indices per cluster, drawn from ``pool`` (shuffled rows of ``keys``) (steps 2-4)."""
    if num_clusters * samples_per_cluster > pool.size:
        raise ValueError(f"{pool.size} samples cannot fill {num_clusters} x {samples_per_cluster}")
    if dirichlet_alpha is None:
        iid = pool[: num_clusters * samples_per_cluster].reshape(num_clusters, samples_per_cluster)
        return tuple(iid)

    groups, pool_group = np.unique(keys[pool], return_inverse=True)
    supply = np.bincount(pool_group, minlength=groups.size)
    rng = stream_rng(seed, "dirichlet")
    per_group = rng.dirichlet(np.full(num_clusters, dirichlet_alpha), size=groups.size)  # (groups, clusters)
    wanted = per_group.T * supply  # (clusters, groups)
    empty = wanted.sum(axis=1) <= 0  # every draw underflowed to 0 (alpha << 1): take the global mix
    wanted[empty] = supply
    counts = fit_supply(wanted / wanted.sum(axis=1, keepdims=True), supply, samples_per_cluster)

    shards: list[list[Indices]] = [[] for _ in range(num_clusters)]
    for group in range(groups.size):
        members = pool[pool_group == group]  # already in shuffled order
        ends = np.cumsum(counts[:, group])
        for cluster in range(num_clusters):
            shards[cluster].append(members[ends[cluster] - counts[cluster, group] : ends[cluster]])
    mix = stream_rng(seed, "shard-order")  # interleave groups so a shard is not sorted by label
    return tuple(mix.permutation(np.concatenate(parts)) for parts in shards)
