"""Which rank failed first, and the error the run fails with.

When one rank fails, its neighbours fail too, but only with "connection closed by peer" or a timeout,
and then their neighbours (notes/torch-pipelining-cpu.md, pitfall 10). The driver collects what every
rank reported for a short grace period and names the rank most likely to have failed first:

1. a rank that raised an error of its own (not a lost or timed-out peer);
2. a rank that died without reporting (killed, crashed, out of memory);
3. a rank that neither reported nor died (hung);
4. otherwise the earliest peer failure.

Within a class the earliest failure wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

FailureKind = Literal["error", "died", "unresponsive", "peer"]
_PRIORITY: dict[FailureKind, int] = {"error": 0, "died": 1, "unresponsive": 2, "peer": 3}


@dataclass(frozen=True)
class RankFailure:
    rank: int
    participant: str  # "c0-d1", "c0-cu", ...
    kind: FailureKind
    at: float  # time.time() of the failure (or of its detection)
    text: str  # the rank's traceback, or what the driver saw

    def summary(self) -> str:
        what = {
            "error": "failed",
            "died": "died",
            "unresponsive": "stopped responding",
            "peer": "lost a peer",
        }[self.kind]
        return f"rank {self.rank} ({self.participant}) {what}: {_last_line(self.text)}"

    def brief(self) -> str:
        """One short clause, for the ranks that failed after the first."""
        text = self.text.lower()
        reason = {"error": "failed", "died": "died", "unresponsive": "stopped responding"}.get(self.kind)
        if reason is None:
            reason = "timed out on a peer" if "timed out" in text or "timeout" in text else "lost a peer"
        return f"rank {self.rank} ({self.participant}) {reason}"


def first_failure(failures: Sequence[RankFailure]) -> RankFailure:
    """The failure to blame (see the module docstring); ``failures`` must not be empty."""
    if not failures:
        raise ValueError("no failures to choose from")
    return min(failures, key=lambda f: (_PRIORITY[f.kind], f.at, f.rank))


class DistributedRoundError(RuntimeError):
    """A round of the distributed executor failed; ``failure`` names the rank that failed first."""

    def __init__(self, round_index: int, failure: RankFailure, others: Sequence[RankFailure] = ()) -> None:
        self.round_index = round_index
        self.failure = failure
        self.others = tuple(others)
        lines = [f"round {round_index}: {failure.summary()}"]
        if len(failure.text.strip().splitlines()) > 1:  # a traceback
            lines.append(_indent(failure.text.strip()))
        if self.others:
            lines.append("after it: " + "; ".join(o.brief() for o in self.others))
        super().__init__("\n".join(lines))


class DistributedStartupError(RuntimeError):
    """The ranks could not be started or did not join the process group."""


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
