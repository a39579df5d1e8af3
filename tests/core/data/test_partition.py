from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.data.partition import Split, apportion, fit_supply, hold_out, split_pool, split_samples


def _split(keys: np.ndarray, alpha: float | None, seed: int = 0, clusters: int = 4, per: int = 50) -> Split:
    return split_samples(
        keys,
        eval_samples=40,
        num_clusters=clusters,
        samples_per_cluster=per,
        dirichlet_alpha=alpha,
        seed=seed,
    )


def _mean_tv(keys: np.ndarray, shards: tuple[np.ndarray, ...]) -> float:
    """Mean total-variation distance between each shard's key distribution and the pooled one."""
    num_groups = int(keys.max()) + 1
    pooled = np.bincount(keys[np.concatenate(shards)], minlength=num_groups) / sum(map(len, shards))
    return float(
        np.mean(
            [0.5 * np.abs(np.bincount(keys[s], minlength=num_groups) / len(s) - pooled).sum() for s in shards]
        )
    )


def test_apportion_is_proportional_and_exact() -> None:
    assert apportion(np.array([1.0, 1.0, 2.0]), 8).tolist() == [2, 2, 4]
    assert apportion(np.array([1.0, 1.0, 1.0]), 10).sum() == 10


def test_fit_supply_respects_rows_and_supply() -> None:
    wanted = np.array([[0.9, 0.1, 0.0], [0.8, 0.2, 0.0], [0.0, 0.0, 1.0]])
    counts = fit_supply(wanted, supply=np.array([10, 40, 40]), samples_per_cluster=20)
    assert counts.sum(axis=1).tolist() == [20, 20, 20]
    assert (counts.sum(axis=0) <= [10, 40, 40]).all()
    assert counts[2].tolist() == [0, 0, 20]  # an unaffected cluster keeps its mix


@pytest.mark.parametrize("alpha", [None, 0.05, 1.0])
def test_eval_and_shards_are_disjoint_and_sized(alpha: float | None) -> None:
    keys = np.random.default_rng(0).integers(0, 5, size=600)
    split = _split(keys, alpha)
    assert split.eval.shape == (40,) and [s.shape for s in split.clusters] == [(50,)] * 4
    used = np.concatenate([split.eval, *split.clusters])
    assert len(np.unique(used)) == used.size


def test_is_deterministic_in_the_seed() -> None:
    keys = np.random.default_rng(0).integers(0, 5, size=600)
    a, b, c = _split(keys, 0.5), _split(keys, 0.5), _split(keys, 0.5, seed=1)
    assert all(np.array_equal(x, y) for x, y in zip(a.clusters, b.clusters, strict=True))
    assert not np.array_equal(a.eval, c.eval)


def test_small_alpha_skews_groups_and_large_alpha_or_iid_does_not() -> None:
    keys = np.random.default_rng(0).integers(0, 8, size=4000)

    def tv(alpha: float | None) -> float:
        return float(
            np.mean([_mean_tv(keys, _split(keys, alpha, seed, 8, 200).clusters) for seed in range(3)])
        )

    skewed, mild, iid = tv(0.05), tv(100.0), tv(None)
    assert skewed > 0.5 and mild < 0.1 and iid < 0.1


def test_a_group_that_runs_out_is_topped_up_from_the_others_without_repeats() -> None:
    keys = np.array([0] * 30 + [1] * 600)  # group 0 is far smaller than small-alpha clusters want
    split = _split(keys, 0.01, clusters=6, per=90)
    used = np.concatenate(split.clusters)
    assert len(np.unique(used)) == used.size == 540
    assert (keys[used] == 0).sum() <= 30


def test_single_cluster_works() -> None:
    keys = np.arange(100) % 3
    assert _split(keys, 0.1, clusters=1, per=60).clusters[0].shape == (60,)


def test_too_few_samples_is_an_error() -> None:
    with pytest.raises(ValueError, match="cannot be split"):
        _split(np.zeros(100, dtype=np.int64), None)


def test_hold_out_then_split_pool_is_split_samples() -> None:
    keys = np.random.default_rng(1).integers(0, 4, size=300)
    whole = _split(keys, 0.3)
    held, pool = hold_out(keys.size, 40, seed=0)
    shards = split_pool(keys, pool, num_clusters=4, samples_per_cluster=50, dirichlet_alpha=0.3, seed=0)
    assert np.array_equal(held, whole.eval)
    assert all(np.array_equal(a, b) for a, b in zip(shards, whole.clusters, strict=True))
    assert np.array_equal(np.sort(np.concatenate([held, pool])), np.arange(300))
    with pytest.raises(ValueError, match="cannot hold out 5 of 4"):
        hold_out(4, 5, seed=0)
