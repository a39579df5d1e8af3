"""Seeded draws of sample indices for (micro-)batches.

The caller names the draw with seed words (e.g. ``(seed, round, cluster, iteration)``) so any batch
can be reproduced on its own, in any process, without replaying earlier draws.
"""

from __future__ import annotations

import numpy as np
import torch


def batch_indices(num_available: int, num_samples: int, seed_words: tuple[int, ...]) -> torch.Tensor:
    """(num_samples,) int64 indices into ``range(num_available)``.

    Distinct when ``num_samples <= num_available``; drawn with replacement otherwise (a shard smaller
    than a batch). The generator is seeded from ``numpy.random.SeedSequence(seed_words)``.
    """
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    if num_available < 1 and num_samples > 0:
        raise ValueError(f"cannot draw {num_samples} samples from an empty shard")
    rng = np.random.default_rng(np.random.SeedSequence(list(seed_words)))
    replace = num_samples > num_available
    drawn = rng.choice(num_available, size=num_samples, replace=replace) if num_samples else np.empty(0)
    return torch.from_numpy(drawn.astype(np.int64))
