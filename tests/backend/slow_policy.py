"""A test policy: ``uniform`` that takes a while per round, so a run can be cancelled or killed mid-way."""

from __future__ import annotations

import time

from collapipe_core.decision import Decision
from collapipe_core.scheduler import get_policy
from collapipe_core.state import RoundState

DECIDE_S = 0.05


class SlowUniform:
    name = "slow-uniform"

    def __init__(self) -> None:
        self._uniform = get_policy("uniform")

    def decide(self, state: RoundState) -> Decision:
        time.sleep(DECIDE_S)
        return self._uniform.decide(state)
