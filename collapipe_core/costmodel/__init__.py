"""The cost model: per-part costs of the model, the modeled round (latency, energy, memory) in closed
form, and the discrete-event pipeline timeline. Pure functions only."""

from collapipe_core.costmodel.evaluate import evaluate
from collapipe_core.costmodel.evaluation import Evaluation
from collapipe_core.costmodel.problem import (
    RoundProblem,
    build_problem,
    device_memory_bytes,
    in_flight_microbatches,
    link_rate_bps,
)
from collapipe_core.costmodel.profile import ModelProfile, build_profile

__all__ = [
    "Evaluation",
    "ModelProfile",
    "RoundProblem",
    "build_problem",
    "build_profile",
    "device_memory_bytes",
    "evaluate",
    "in_flight_microbatches",
    "link_rate_bps",
]
