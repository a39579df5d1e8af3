from __future__ import annotations

import pytest
import torch

from collapipe_core.data import batch_indices


def test_draws_distinct_indices_when_enough_are_available() -> None:
    drawn = batch_indices(100, 40, (0, 1, 2))
    assert drawn.dtype == torch.int64 and drawn.shape == (40,)
    assert len(set(drawn.tolist())) == 40 and int(drawn.min()) >= 0 and int(drawn.max()) < 100


def test_is_deterministic_in_the_seed_words() -> None:
    assert torch.equal(batch_indices(100, 10, (3, 4)), batch_indices(100, 10, (3, 4)))
    assert not torch.equal(batch_indices(100, 10, (3, 4)), batch_indices(100, 10, (3, 5)))


def test_draws_with_replacement_from_a_small_shard() -> None:
    drawn = batch_indices(3, 10, (1,))
    assert drawn.shape == (10,) and set(drawn.tolist()) <= {0, 1, 2}


def test_edge_cases() -> None:
    assert batch_indices(5, 0, (1,)).shape == (0,)
    with pytest.raises(ValueError, match="empty shard"):
        batch_indices(0, 2, (1,))
    with pytest.raises(ValueError, match="num_samples"):
        batch_indices(5, -1, (1,))
