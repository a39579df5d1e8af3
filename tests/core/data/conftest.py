"""Config builders shared by the data tests (a fixture, so no test imports conftest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from collapipe_core.config import DataConfig, ExperimentConfig, ModelConfig, NetworkConfig

KINDS = {
    "cmudict": "seq2seq",
    "synthetic-reverse": "seq2seq",
    "django-langid": "classifier",
    "synthetic-parity": "classifier",
}

MakeConfig = Callable[..., ExperimentConfig]


def _make_config(
    dataset: str = "synthetic-reverse",
    *,
    seed: int = 0,
    num_clusters: int = 2,
    model: dict[str, Any] | None = None,
    **data: Any,
) -> ExperimentConfig:
    """A small experiment config for ``dataset`` with the matching model kind."""
    data.setdefault("samples_per_cluster", 64)
    data.setdefault("eval_samples", 32)
    return ExperimentConfig(
        seed=seed,
        model=ModelConfig(**{"kind": KINDS[dataset], **(model or {})}),
        data=DataConfig(dataset=dataset, **data),
        network=NetworkConfig(num_clusters=num_clusters),
    )


@pytest.fixture
def make_config() -> MakeConfig:
    return _make_config
