"""Fixtures shared by the core tests."""

from __future__ import annotations

import pytest

from collapipe_core.config import ExperimentConfig
from tests.core.builders import tiny_config


@pytest.fixture
def tiny() -> ExperimentConfig:
    return tiny_config()
