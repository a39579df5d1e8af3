"""Metric names and units, defined once. The API, the database and the dashboard use them unchanged.

Units: seconds (s), joules (J), bytes, watts (W), hertz (Hz), bits per second (bit/s); "1" for ratios
and counts. ``modeled`` says whether the figure comes from the cost model (true) or from training.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    scope: str  # "round" or "device"
    modeled: bool
    description: str


METRICS: tuple[Metric, ...] = (
    Metric("latency_s", "s", "round", True, "round latency T = max_n (R_n + I·T^pipe_n) + T^agg"),
    Metric("aggregation_s", "s", "round", True, "FedAvg gather and upload time T^agg"),
    Metric(
        "redistribution_s",
        "s",
        "round",
        True,
        "per cluster: R_n, the averaged model, moved optimizer state and segments sent before iterating",
    ),
    Metric("blocks_moved", "1", "round", True, "TEBs whose optimizer state changed device (all clusters)"),
    Metric("moves_latency_share", "1", "round", True, "share of T the block moves cost: (T − T unmoved) / T"),
    Metric("objective", "1", "round", True, "drift-plus-penalty V·(T + λ·G) + Σ Q·E"),
    Metric("objective_latency", "1", "round", True, "V·T"),
    Metric("objective_convergence", "1", "round", True, "V·λ·G(M)"),
    Metric("objective_energy", "1", "round", True, "Σ_k Q_k·E_k"),
    Metric("convergence", "1", "round", True, "G(M) = σ²/(b·Σ_n M_n)"),
    Metric("makespan_s", "s", "round", True, "per cluster: one pipeline iteration's makespan"),
    Metric("bubble_fraction", "1", "round", True, "per cluster: idle share of scheduled devices"),
    Metric("solve_time_s", "s", "round", False, "wall time of the policy's decision"),
    Metric("train_loss", "1", "round", False, "mean training loss over clusters (data-size weighted)"),
    Metric("eval_loss", "1", "round", False, "loss on the held-out set after FedAvg"),
    Metric("eval_accuracy", "1", "round", False, "token (seq2seq), next-token (causal_lm) or label accuracy"),
    Metric("eval_perplexity", "1", "round", False, "causal_lm: exp(eval loss), the token-weighted mean"),
    Metric("eval_error_rate", "1", "round", False, "seq2seq: phoneme/token error rate of greedy decoding"),
    Metric(
        "gradient_noise_scale",
        "1",
        "round",
        False,
        "B_noise = tr(Σ)/|G|² (samples): from micro-batch and step gradient norms, averaged over rounds",
    ),
    Metric("gradient_variance", "1", "round", False, "tr(Σ): one sample's gradient variance, round estimate"),
    Metric("gradient_sq_norm", "1", "round", False, "|G|²: the true gradient's squared norm, round estimate"),
    Metric("num_blocks", "1", "device", False, "δ_k: TEBs held by the device"),
    Metric("bandwidth_share", "1", "device", False, "β_k"),
    Metric("power_w", "W", "device", False, "p_k: transmit power"),
    Metric("rate_bps", "bit/s", "device", True, "r_k: link rate"),
    Metric("compute_s", "s", "device", True, "computing time in the round"),
    Metric(
        "comm_s",
        "s",
        "device",
        True,
        "transmitting time in the round (pipeline, upload, moved optimizer state)",
    ),
    Metric("idle_s", "s", "device", True, "pipeline time neither computing nor transmitting"),
    Metric("energy_j", "J", "device", True, "E_k = κ·f²·cycles + p·transmit time (moved state at p_prev)"),
    Metric("queue", "1", "device", True, "virtual energy queue Q_k(t) before the round's update"),
    Metric("memory_bytes", "bytes", "device", True, "modeled peak memory"),
    Metric("memory_capacity_bytes", "bytes", "device", False, "the device's memory"),
    Metric("energy_budget_j", "J", "device", False, "Ē_k: long-term average energy per round"),
)

METRICS_BY_NAME = {m.name: m for m in METRICS}


def time_to_target(
    latencies: Iterable[float], losses: Iterable[float | None], target: float
) -> tuple[float, int] | None:
    """Modeled time to a target eval loss: (Σ T of the rounds up to the first whose eval loss is at
    most ``target``, that round's count from the start); None if no round reached it. Rounds without
    an eval loss count their time and do not reach it."""
    elapsed = 0.0
    for count, (latency, loss) in enumerate(zip(latencies, losses, strict=True), start=1):
        elapsed += latency
        if loss is not None and loss <= target:
            return elapsed, count
    return None
