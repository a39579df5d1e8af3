from __future__ import annotations

import pytest
import torch

from collapipe_core.federated.fedavg import fedavg


def test_weights_by_data_size() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor(0.0)}
    b = {"w": torch.tensor([3.0, 6.0]), "b": torch.tensor(4.0)}
    out = fedavg([a, b], [100, 300])
    assert torch.allclose(out["w"], torch.tensor([2.5, 5.0]))
    assert out["b"].item() == pytest.approx(3.0)


def test_equal_sizes_give_the_plain_mean_and_keep_dtype() -> None:
    states = [{"w": torch.full((2,), float(i), dtype=torch.float32)} for i in range(4)]
    out = fedavg(states, [5, 5, 5, 5])
    assert out["w"].dtype == torch.float32
    assert torch.allclose(out["w"], torch.full((2,), 1.5))


def test_refuses_mismatched_inputs() -> None:
    with pytest.raises(ValueError, match="one data size per state"):
        fedavg([{"w": torch.zeros(1)}], [1, 2])
    with pytest.raises(ValueError, match="different parameters"):
        fedavg([{"w": torch.zeros(1)}, {"v": torch.zeros(1)}], [1, 1])
    with pytest.raises(ValueError, match="positive total"):
        fedavg([{"w": torch.zeros(1)}], [0])
