"""Test policies: ``uniform`` that takes a while per round, so a run can be cancelled or killed
mid-way (``SlowUniform``), or lasts long enough to put many clients on it (``PacedUniform``).
The test deployments register them as an operator would (tests/backend/builders.py TEST_POLICIES)."""

from __future__ import annotations

import time

from collapipe_core.decision import Decision
from collapipe_core.scheduler import get_policy
from collapipe_core.state import RoundState

DECIDE_S = 0.05
PACED_DECIDE_S = 0.25


class SlowUniform:
    name = "slow-uniform"

    def __init__(self) -> None:
        self._uniform = get_policy("uniform")

    def decide(self, state: RoundState) -> Decision:
        time.sleep(DECIDE_S)
        return self._uniform.decide(state)


class PacedUniform(SlowUniform):
    """``uniform`` at about four rounds a second (a 100-round analytic run lasts ~25 s)."""

    name = "paced-uniform"

    def decide(self, state: RoundState) -> Decision:
        time.sleep(PACED_DECIDE_S - DECIDE_S)
        return super().decide(state)
