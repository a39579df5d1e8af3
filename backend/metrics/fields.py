"""The per-round series a client can ask for: promoted columns, record fields and derived values.

Names and units are the core's (collapipe_core.metrics); per-cluster lists are offered reduced
(``bubble_fraction_mean``, ``makespan_s_max``) and eval metrics by their record name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.db.models import DEVICE_METRIC_COLUMNS, ROUND_METRIC_COLUMNS
from collapipe_core.metrics import METRICS_BY_NAME

Extractor = Callable[[dict[str, Any]], float | None]


def _scalar(name: str) -> Extractor:
    def get(record: dict[str, Any]) -> float | None:
        value = record.get(name)
        return None if value is None else float(value)

    return get


def _eval(name: str) -> Extractor:
    def get(record: dict[str, Any]) -> float | None:
        value = (record.get("eval_metrics") or {}).get(name)
        return None if value is None else float(value)

    return get


def _reduce(name: str, how: Callable[[list[float]], float]) -> Extractor:
    def get(record: dict[str, Any]) -> float | None:
        values = [float(v) for v in record.get(name) or [] if v is not None]  # null: not finite
        return how(values) if values else None

    return get


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


RECORD_FIELDS: dict[str, Extractor] = {
    **{
        name: _scalar(name)
        for name in (
            "aggregation_s",
            "objective_latency",
            "objective_convergence",
            "objective_energy",
            "convergence",
            "solve_time_s",
            "solver_iterations",
            "gradient_variance",
            "gradient_sq_norm",
            "moves_latency_share",
        )
    },
    "eval_accuracy": _eval("eval_accuracy"),
    "eval_error_rate": _eval("eval_error_rate"),
    "eval_perplexity": _eval("eval_perplexity"),
    "bubble_fraction_mean": _reduce("bubble_fraction", _mean),
    "makespan_s_max": _reduce("makespan_s", max),
    "redistribution_s_max": _reduce("redistribution_s", max),
    "num_microbatches_mean": _reduce("num_microbatches", _mean),
}
ROUND_FIELDS = (*ROUND_METRIC_COLUMNS, *RECORD_FIELDS)
DEFAULT_ROUND_FIELDS = ("latency_s", "objective", "train_loss", "eval_loss")
DEVICE_FIELDS = DEVICE_METRIC_COLUMNS


def unit_of(name: str) -> str:
    base = name.removesuffix("_mean").removesuffix("_max")
    metric = METRICS_BY_NAME.get(name) or METRICS_BY_NAME.get(base)
    return metric.unit if metric is not None else "1"
