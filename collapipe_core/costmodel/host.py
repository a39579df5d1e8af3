"""Memory a run needs on the host that executes it (modeled): what the service checks before launch.

The devices' memory is the system model's (``evaluate``); this is the *worker's*: the ``simulated``
executor trains every cluster's copy of the model in one process, and the ``distributed`` executor adds one
process per CU, device and edge server. With W the model's weights as stored (frozen ones at
``training.precision``), Θ its trainable parameters' bytes (fp32: also their gradients and each optimizer
copy), N clusters, K devices per cluster, c the optimizer's copies (0 sgd, 1 momentum, 2 AdamW), b the
largest micro-batch (the fixed b, or B at M = 1), X the largest step (M_max·b, or B), L blocks and A a
block's bytes kept for backward per sample (measured at the precision; a_0 per micro-batch):

- simulated:   R + W + Θ·(2 + N + (N + 1)·c) + L·(b·A + a_0)
  (the model; its gradients and the global trainable weights; N cluster copies of the trainable state at
  FedAvg; each cluster's saved optimizer state and the live one; one micro-batch's activations through
  every block);
- distributed: the simulated figure for the driver, plus N·(K + 2) ranks of R_rank each holding its
  stage: + N·(K + 2)·R_rank + N·(W + Θ·(1 + c)) + N·L·(X·A + M_max·a_0)
  (every micro-batch in flight, the GPipe bound).

R and R_rank are the measured resident size of a run process and of a rank before it allocates its model
(torch, the data and Python; docs/distributed.md). The analytic executor allocates no model.
"""

from __future__ import annotations

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel.profile import ModelProfile

RUN_PROCESS_BYTES = 512 * 2**20  # R: a run process with torch and its data loaded (~230 MiB measured)
RANK_PROCESS_BYTES = 384 * 2**20  # R_rank: a distributed rank with torch and gloo (~330 MiB measured)


def host_memory_bytes(config: ExperimentConfig, profile: ModelProfile) -> float:
    """Modeled peak memory of the process(es) that execute ``config`` on one host (formula above)."""
    if config.executor == "analytic":
        return float(RUN_PROCESS_BYTES)
    n, k = config.network.num_clusters, config.network.devices_per_cluster
    c = profile.optimizer_state_copies
    t, blocks = config.training, profile.num_blocks
    b, step = t.samples_per_microbatch(1), t.samples_per_step(config.scheduler.max_microbatches)
    weights, trainable = profile.weight_bytes, profile.trainable_bytes
    kept, fixed = profile.block_activation_bytes, profile.block_activation_fixed_bytes
    driver = RUN_PROCESS_BYTES + weights + trainable * (2 + n + (n + 1) * c) + blocks * (b * kept + fixed)
    if config.executor == "simulated":
        return driver
    ranks = n * (k + 2)
    micro = config.scheduler.max_microbatches
    return (
        driver
        + ranks * RANK_PROCESS_BYTES
        + n * (weights + trainable * (1 + c))
        + n * blocks * (step * kept + micro * fixed)
    )
