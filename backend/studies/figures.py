"""The figures a study compares, per run, from the run's stored rounds and device rows.

They are the modeled figures of ``collapipe bench paper`` (docs/paper-comparison.md), plus the time
to a target eval loss and the final eval metrics of training runs:

- ``mean_latency_s``: mean round latency T;
- ``latency_per_sample_s``: Σ T / Σ samples trained, a round training I·Σ_n M_n·b samples, or I·N·B
  with a fixed batch (policies train different numbers of micro-batches per round);
- ``time_to_target_s``: Σ T of the rounds up to the first whose eval_loss ≤ the target (modeled
  elapsed time; none if no round reached it or no target was given);
- ``efficiency``: mean over rounds of Σ_k compute_s / (devices × T) (computation efficiency);
- ``peak_memory_bytes`` and ``mean_memory_bytes``: the largest and the mean modeled memory of the
  devices holding blocks, over devices and rounds;
- ``energy_over_budget_max``: the worst device's time-average energy over its budget, max_k mean_t
  E_k/Ē_k (above 1: the long-term energy constraint is not met);
- ``mean_backlog``: the mean virtual energy queue Q over devices and rounds (it grows with V);
- ``memory_over_capacity_max``: the largest modeled memory over capacity of a device holding blocks, over
  devices and rounds (above 1: a decision did not fit);
- ``mean_devices_holding_blocks``: mean over rounds of the devices holding blocks per cluster (1: one
  device trains every block, no pipeline);
- ``mean_microbatches``: mean over rounds and clusters of M;
- ``final_eval_loss`` and ``final_<metric>``: the last evaluated round's eval loss and metrics.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.jsonsafe import finite
from backend.studies.schemas import MetricInfo
from collapipe_core.config import TrainingConfig
from collapipe_core.metrics import METRICS_BY_NAME, time_to_target

FIXED_METRICS = tuple(
    MetricInfo(name=name, unit=unit, description=description)
    for name, unit, description in (
        ("mean_latency_s", "s", "mean round latency T"),
        ("latency_per_sample_s", "s", "Σ T / Σ samples (a round trains I·Σ M·b, or I·N·B, samples)"),
        (
            "time_to_target_s",
            "s",
            "modeled time to the target eval loss: Σ T up to the first round at or below it",
        ),
        ("efficiency", "1", "computation efficiency: mean Σ_k compute_s / (devices · T)"),
        ("peak_memory_bytes", "bytes", "peak modeled memory of a device holding blocks"),
        ("mean_memory_bytes", "bytes", "mean modeled memory of the devices holding blocks"),
        ("energy_over_budget_max", "1", "worst device's time-average energy / its budget Ē"),
        ("mean_backlog", "1", "mean virtual energy queue Q over devices and rounds"),
        (
            "memory_over_capacity_max",
            "1",
            "largest modeled memory / capacity of a device holding blocks (above 1: it did not fit)",
        ),
        ("mean_devices_holding_blocks", "1", "devices holding blocks per cluster, mean over rounds"),
        ("mean_microbatches", "1", "micro-batches M, mean over rounds and clusters"),
        ("final_eval_loss", "1", "eval loss of the last evaluated round"),
    )
)


@dataclass
class RunRows:
    """What the figures of one run are computed from (its stored rows, in round order)."""

    training: TrainingConfig  # the run's training section (how many samples a round trains)
    latency_s: list[float] = field(default_factory=list)
    eval_loss: list[float | None] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)  # per round: I·Σ_n (M_n·b, or B)
    microbatches: list[list[int]] = field(default_factory=list)  # per round: M_n per cluster
    eval_metrics: list[dict[str, float]] = field(default_factory=list)
    compute_per_round: list[tuple[float, int]] = field(default_factory=list)  # (Σ_k compute_s, devices)
    holding_per_round: list[int] = field(default_factory=list)  # devices holding blocks, all clusters
    peak_memory_bytes: float | None = None
    mean_memory_bytes: float | None = None
    memory_over_capacity_max: float | None = None
    mean_backlog: float | None = None
    energy_over_budget: list[float] = field(default_factory=list)  # per device


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _final_eval(rows: RunRows) -> dict[str, float]:
    for loss, metrics in zip(reversed(rows.eval_loss), reversed(rows.eval_metrics), strict=True):
        if loss is not None:
            return {
                "final_eval_loss": loss,
                **{f"final_{k}": float(v) for k, v in metrics.items() if v is not None},
            }
    return {}


def run_figures(rows: RunRows, target_eval_loss: float | None) -> dict[str, float | None]:
    """Every figure of one run (None where its rows do not give it)."""
    samples = sum(rows.samples)
    efficiency = [
        c / (n * t) for (c, n), t in zip(rows.compute_per_round, rows.latency_s, strict=False) if n and t
    ]
    holding = [n / len(m) for n, m in zip(rows.holding_per_round, rows.microbatches, strict=False) if m]
    target = target_eval_loss
    reached = None if target is None else time_to_target(rows.latency_s, rows.eval_loss, target)
    figures: dict[str, float | None] = {
        "mean_latency_s": _mean(rows.latency_s),
        "latency_per_sample_s": sum(rows.latency_s) / samples if samples else None,
        "time_to_target_s": reached[0] if reached else None,
        "efficiency": _mean(efficiency),
        "peak_memory_bytes": rows.peak_memory_bytes,
        "mean_memory_bytes": rows.mean_memory_bytes,
        "energy_over_budget_max": max(rows.energy_over_budget) if rows.energy_over_budget else None,
        "mean_backlog": rows.mean_backlog,
        "memory_over_capacity_max": rows.memory_over_capacity_max,
        "mean_devices_holding_blocks": _mean(holding),
        "mean_microbatches": _mean([sum(m) / len(m) for m in rows.microbatches if m]),
        **_final_eval(rows),
    }
    return {name: finite(value) for name, value in figures.items()}


def metric_infos(names: Iterable[str]) -> list[MetricInfo]:
    """The fixed figures, then the final eval metrics present (``final_eval_accuracy``, ...)."""
    fixed = {m.name for m in FIXED_METRICS}
    extra = sorted(n for n in set(names) if n not in fixed)
    infos = list(FIXED_METRICS)
    for name in extra:
        metric = METRICS_BY_NAME.get(name.removeprefix("final_"))
        unit = metric.unit if metric is not None else "1"
        infos.append(
            MetricInfo(
                name=name, unit=unit, description=f"{name.removeprefix('final_')} of the last evaluated round"
            )
        )
    return infos


def collect_rows(
    runs: Iterable[tuple[int, TrainingConfig]],
    rounds: Iterable[Sequence[Any]],
    compute: Iterable[Sequence[Any]],
    memory: Iterable[Sequence[Any]],
    energy: Iterable[Sequence[Any]],
) -> dict[int, RunRows]:
    """Each run's rows from the study's query results (backend.studies.repository): ``runs`` gives
    (run_id, its training section); the others are the repository's rows, first column the run id."""
    found = {run_id: RunRows(training) for run_id, training in runs}
    for run_id, latency, loss, microbatches, metrics in rounds:
        rows = found[run_id]
        rows.latency_s.append(float(latency))
        rows.eval_loss.append(None if loss is None else float(loss))
        rows.samples.append(rows.training.samples_per_round(microbatches or ()))
        rows.microbatches.append([int(m) for m in microbatches or ()])
        rows.eval_metrics.append(dict(metrics or {}))
    for run_id, compute_s, devices, holding in compute:
        found[run_id].compute_per_round.append((float(compute_s), int(devices)))
        found[run_id].holding_per_round.append(int(holding))
    for run_id, peak, mean, backlog, over_capacity in memory:
        rows = found[run_id]
        rows.peak_memory_bytes = None if peak is None else float(peak)
        rows.mean_memory_bytes = None if mean is None else float(mean)
        rows.mean_backlog = None if backlog is None else float(backlog)
        rows.memory_over_capacity_max = None if over_capacity is None else float(over_capacity)
    per_device: dict[int, list[float]] = defaultdict(list)
    for run_id, ratio in energy:
        if ratio is not None:
            per_device[run_id].append(float(ratio))
    for run_id, ratios in per_device.items():
        found[run_id].energy_over_budget = ratios
    return found
