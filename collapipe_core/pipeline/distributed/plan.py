"""Who runs what: the rank layout and each round's pipelines, as pure functions of the decision.

Every participant is one rank, for the whole run, in cluster-major order::

    rank = n·(K + 2) + j      j = 0: the CU of cluster n, j = 1..K: device j−1, j = K + 1: the edge server

A round's decision picks, per cluster, the pipeline CU → scheduled devices (δ_k > 0, in device order)
→ edge server; devices with δ_k = 0 sit the round out. The pipeline's ranks are ascending, so the
rank order of the process group ``new_group(ranks)`` is the stage order.

1F1B in ``torch.distributed.pipelining`` needs at least as many micro-batches as stages
(M ≥ C = scheduled devices + 2); a cluster where M < C runs GPipe that round and says so
(``schedule_fallback``). Both schedules compute the same gradients, so only time and memory change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from collapipe_core.decision import Decision, plan_segments
from collapipe_core.network import device_id

Role = Literal["cu", "device", "edge"]
Schedule = Literal["gpipe", "1f1b"]


@dataclass(frozen=True)
class Layout:
    """The fixed rank layout of a run: N clusters of K devices, each cluster with a CU and an edge server."""

    num_clusters: int
    devices_per_cluster: int

    @property
    def ranks_per_cluster(self) -> int:
        return self.devices_per_cluster + 2

    @property
    def world_size(self) -> int:
        return self.num_clusters * self.ranks_per_cluster

    def cu_rank(self, cluster: int) -> int:
        return cluster * self.ranks_per_cluster

    def device_rank(self, cluster: int, device: int) -> int:
        return cluster * self.ranks_per_cluster + 1 + device

    def edge_rank(self, cluster: int) -> int:
        return cluster * self.ranks_per_cluster + self.devices_per_cluster + 1

    def leader_ranks(self) -> tuple[int, ...]:
        """The CUs of all clusters: the group FedAvg reduces over."""
        return tuple(self.cu_rank(n) for n in range(self.num_clusters))

    def locate(self, rank: int) -> tuple[int, Role, int]:
        """(cluster, role, device index or −1) of ``rank``."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside the world of {self.world_size} ranks")
        cluster, j = divmod(rank, self.ranks_per_cluster)
        if j == 0:
            return cluster, "cu", -1
        if j == self.ranks_per_cluster - 1:
            return cluster, "edge", -1
        return cluster, "device", j - 1

    def participant_id(self, rank: int) -> str:
        """The record key of ``rank``: "c0-cu", "c0-d2" (as ``network.device_id``), "c0-edge"."""
        cluster, role, device = self.locate(rank)
        return device_id(cluster, device) if role == "device" else f"c{cluster}-{role}"


@dataclass(frozen=True)
class ClusterPlan:
    """One cluster's pipeline this round."""

    cluster: int
    ranks: tuple[int, ...]  # stage order: CU, scheduled devices, edge server (ascending)
    block_ranges: Mapping[int, range]  # scheduled device rank -> its TEBs
    num_microbatches: int
    schedule: Schedule  # what runs (after the 1F1B fallback)
    schedule_fallback: bool  # 1F1B was asked for but M < number of stages

    @property
    def num_stages(self) -> int:
        return len(self.ranks)

    def stage_index(self, rank: int) -> int:
        return self.ranks.index(rank)


def effective_schedule(requested: Schedule, num_microbatches: int, num_stages: int) -> tuple[Schedule, bool]:
    """(schedule to run, whether it fell back): 1F1B needs M ≥ number of stages in torch 2.13."""
    if requested == "1f1b" and num_microbatches < num_stages:
        return "gpipe", True
    return requested, False


def plan_round(layout: Layout, decision: Decision, schedule: Schedule) -> tuple[ClusterPlan, ...]:
    """Every cluster's pipeline for ``decision``; refuses decisions the distributed executor cannot run."""
    if decision.mode != "pipeline":
        raise ValueError(
            f"the distributed executor runs pipeline decisions; this policy returned mode {decision.mode!r} "
            "(the 'fl' baseline's data-parallel rounds); run it with executor 'simulated'"
        )
    if len(decision.clusters) != layout.num_clusters:
        raise ValueError(
            f"decision covers {len(decision.clusters)} clusters, the network has {layout.num_clusters}"
        )
    plans = []
    for n, cluster in enumerate(decision.clusters):
        if len(cluster.num_blocks) != layout.devices_per_cluster:
            raise ValueError(
                f"cluster {n}: decision covers {len(cluster.num_blocks)} devices, "
                f"the network has {layout.devices_per_cluster}"
            )
        ranges = plan_segments(cluster.num_blocks)
        scheduled = {layout.device_rank(n, k): r for k, r in enumerate(ranges) if len(r) > 0}
        ranks = (layout.cu_rank(n), *scheduled, layout.edge_rank(n))
        runs, fell_back = effective_schedule(schedule, cluster.num_microbatches, len(ranks))
        plans.append(
            ClusterPlan(
                cluster=n,
                ranks=ranks,
                block_ranges=scheduled,
                num_microbatches=cluster.num_microbatches,
                schedule=runs,
                schedule_fallback=fell_back,
            )
        )
    return tuple(plans)


# -- optimizer state: the parent keeps one full state per cluster, ranks hold their stage's slice -----


def slice_optimizer_state(
    full: Mapping[str, Any] | None,
    param_names: Sequence[str],
    names: Sequence[str],
    aliases: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]] | None:
    """Per-parameter optimizer state of ``names``, keyed by parameter name (None: no state yet).

    ``full`` is ``optimizer.state_dict()`` of an optimizer over the whole model, whose parameter i is
    ``param_names[i]``. ``aliases`` maps a tied parameter's further names (the edge server's name of the
    LM head tied to the CU's embedding) to its name in ``param_names``.
    """
    if full is None:
        return None
    index = {name: i for i, name in enumerate(param_names)}
    index.update({alias: index[name] for alias, name in (aliases or {}).items()})
    state = full["state"]
    return {name: dict(state[index[name]]) for name in names if index[name] in state}


def merge_optimizer_states(
    slices: Sequence[Mapping[str, Mapping[str, Any]]],
    param_names: Sequence[str],
    param_groups: Sequence[Mapping[str, Any]],
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The whole-model ``optimizer.state_dict()`` assembled from the ranks' name-keyed slices.

    ``param_groups`` is the whole-model optimizer's groups (hyper-parameters and parameter indices).
    A tied parameter (``aliases``, as :func:`slice_optimizer_state`) comes from the CU and from the edge
    server, which stepped it identically; the first rank's state is kept.
    """
    aliases = aliases or {}
    index = {name: i for i, name in enumerate(param_names)}
    index.update({alias: index[name] for alias, name in aliases.items()})
    tied = set(aliases) | set(aliases.values())
    state: dict[int, dict[str, Any]] = {}
    for part in slices:
        for name, entry in part.items():
            if index[name] in state:
                if name in tied:
                    continue
                raise ValueError(f"optimizer state of {name!r} came from two ranks")
            state[index[name]] = dict(entry)
    return {"state": dict(sorted(state.items())), "param_groups": [dict(g) for g in param_groups]}


def local_optimizer_state(
    named: Mapping[str, Mapping[str, Any]], names: Sequence[str], param_groups: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A stage optimizer's ``state_dict()`` (parameter i = ``names[i]``) from a name-keyed slice."""
    state = {i: dict(named[name]) for i, name in enumerate(names) if name in named}
    groups = [{**dict(g), "params": list(range(len(names)))} for g in param_groups]
    return {"state": state, "param_groups": groups}
