"""The ``distributed`` executor: one torch.distributed rank per CU, device and edge server.

- :mod:`.plan` — rank layout, each round's pipelines, optimizer-state slicing (pure);
- :mod:`.executor` — :class:`DistributedExecutor`, the driver side (same semantics as ``simulated``);
- :mod:`.launch` — starting the ranks, the rendezvous store, collecting reports, failures;
- :mod:`.worker` — one rank (``python -m collapipe_core.pipeline.distributed.worker``);
- :mod:`.stages` — a rank's ``PipelineStage`` with static shapes, and the torch schedule;
- :mod:`.measure` — per-rank time split and peak memory; :mod:`.link` — optional link emulation;
- :mod:`.failures` — which rank failed first; :mod:`.protocol` — driver ↔ rank messages on the store.

docs/distributed.md describes the design, the measured figures and multi-host launches.
"""

from collapipe_core.pipeline.distributed.executor import DistributedExecutor, DistributedOptions
from collapipe_core.pipeline.distributed.failures import (
    DistributedRoundError,
    DistributedStartupError,
    RankFailure,
)

__all__ = [
    "DistributedExecutor",
    "DistributedOptions",
    "DistributedRoundError",
    "DistributedStartupError",
    "RankFailure",
]
