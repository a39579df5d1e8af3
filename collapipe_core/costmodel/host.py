"""Memory a run needs on the host that executes it (modeled): what the service checks before launch.

The devices' memory is the system model's (``evaluate``); this is the *worker's*: the ``simulated``
executor trains every cluster's copy of the whole model in one process, and the ``distributed``
executor adds one process per CU, device and edge server. Training runs in fp32 (4 bytes per
element) whatever ``model.bytes_per_element`` models for the devices.

With P the model's parameters, N clusters, K devices per cluster, c the optimizer's copies of the
parameters (0 sgd, 1 momentum, 2 AdamW), b the largest micro-batch (the fixed b, or B at M = 1), X the
largest step (M_max·b, or B), L blocks and a a block's kept activations per sample (elements):

- simulated:   R + 4·P·(3 + N + (N + 1)·c) + 4·b·L·a
  (the model, its gradients and the global weights; N cluster copies at FedAvg; each cluster's
  saved optimizer state and the live one; one micro-batch's activations through every block);
- distributed: the simulated figure for the driver, plus N·(K + 2) ranks of R_rank each holding its
  stage: + N·(K + 2)·R_rank + 4·N·P·(2 + c) + 4·N·X·L·a
  (every micro-batch in flight, the GPipe bound).

R and R_rank are the measured resident size of a run process and of a rank before it allocates its
model (torch, the data and Python; docs/distributed.md). The analytic executor allocates no model.
"""

from __future__ import annotations

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel.profile import ModelProfile

TRAINING_BYTES_PER_ELEMENT = 4
RUN_PROCESS_BYTES = 512 * 2**20  # R: a run process with torch and its data loaded (~230 MiB measured)
RANK_PROCESS_BYTES = 384 * 2**20  # R_rank: a distributed rank with torch and gloo (~330 MiB measured)


def host_memory_bytes(config: ExperimentConfig, profile: ModelProfile) -> float:
    """Modeled peak memory of the process(es) that execute ``config`` on one host (formula above)."""
    if config.executor == "analytic":
        return float(RUN_PROCESS_BYTES)
    e = TRAINING_BYTES_PER_ELEMENT
    n, k = config.network.num_clusters, config.network.devices_per_cluster
    c = profile.optimizer_state_copies
    t, blocks = config.training, profile.num_blocks
    b, step = t.samples_per_microbatch(1), t.samples_per_step(config.scheduler.max_microbatches)
    activation_elements = profile.block_activation_bytes / profile.bytes_per_element
    params = float(profile.total_params)
    driver = RUN_PROCESS_BYTES + e * params * (3 + n + (n + 1) * c) + e * b * blocks * activation_elements
    if config.executor == "simulated":
        return driver
    ranks = n * (k + 2)
    return (
        driver
        + ranks * RANK_PROCESS_BYTES
        + e * n * params * (2 + c)
        + e * n * step * blocks * activation_elements
    )
