"""The cost model: per-part costs of the model, the modeled round (latency, energy, memory) and the
discrete-event pipeline timeline. Pure functions only."""

from collapipe_core.costmodel.evaluate import (
    Evaluation,
    device_memory_bytes,
    evaluate,
    in_flight_microbatches,
    link_rate_bps,
)
from collapipe_core.costmodel.profile import ModelProfile, build_profile

__all__ = [
    "Evaluation",
    "ModelProfile",
    "build_profile",
    "device_memory_bytes",
    "evaluate",
    "in_flight_microbatches",
    "link_rate_bps",
]
