"""A run's figures from its rows: time to a target eval loss, final eval metrics, per-sample latency."""

from __future__ import annotations

import pytest

from backend.studies.figures import RunRows, collect_rows, metric_infos, run_figures
from collapipe_core.config import TrainingConfig


def _rows() -> RunRows:
    return RunRows(
        training=TrainingConfig(microbatch_size=8),
        latency_s=[2.0, 3.0, 4.0, 5.0],
        eval_loss=[None, 1.5, 0.9, None],
        samples=[32, 32, 16, 16],
        eval_metrics=[{}, {"eval_accuracy": 0.5}, {"eval_accuracy": 0.7}, {}],
        compute_per_round=[(4.0, 2), (6.0, 2), (4.0, 2), (5.0, 2)],
        energy_over_budget=[0.5, 1.2, 0.9],
    )


def test_time_to_target_sums_modeled_latency_until_the_eval_loss_reaches_it() -> None:
    assert run_figures(_rows(), 1.5)["time_to_target_s"] == 5.0
    assert run_figures(_rows(), 1.0)["time_to_target_s"] == 9.0
    assert run_figures(_rows(), 0.1)["time_to_target_s"] is None  # never reached
    assert run_figures(_rows(), None)["time_to_target_s"] is None


def test_the_other_figures_of_a_run() -> None:
    figures = run_figures(_rows(), None)
    assert figures["mean_latency_s"] == 3.5
    assert figures["latency_per_sample_s"] == pytest.approx(14.0 / (8 * 12))
    assert figures["efficiency"] == pytest.approx((1.0 + 1.0 + 0.5 + 0.5) / 4)
    assert figures["energy_over_budget_max"] == 1.2
    assert (figures["final_eval_loss"], figures["final_eval_accuracy"]) == (0.9, 0.7)
    names = [m.name for m in metric_infos(figures)]
    assert names[-1] == "final_eval_accuracy" and names.count("final_eval_loss") == 1


def test_a_round_trains_m_micro_batches_of_b_or_the_fixed_batch_whatever_m() -> None:
    rounds = [(1, 2.0, None, [4, 2], {}), (2, 2.0, None, [4, 2], {})]
    rows = collect_rows(
        [(1, TrainingConfig(microbatch_size=8, local_iterations=3)), (2, TrainingConfig(batch_size=32))],
        rounds,
        [],
        [],
        [],
    )
    assert rows[1].samples == [3 * 8 * (4 + 2)]  # I·b·Σ_n M_n
    assert rows[2].samples == [2 * 32]  # N·B: the micro-batches split each cluster's batch


def test_devices_holding_blocks_per_cluster_micro_batches_and_memory_over_capacity() -> None:
    rounds = [(1, 2.0, None, [4, 2], {}), (1, 2.0, None, [8, 8], {}), (1, 2.0, None, [1, 1], {})]
    compute = [(1, 3.0, 8, 5), (1, 3.0, 8, 8), (1, 3.0, 8, 2)]  # devices holding blocks: 5, 8 and 2 of 8
    memory = [(1, 9.0e8, 6.0e8, 0.5, 1.25)]
    rows = collect_rows([(1, TrainingConfig(batch_size=32))], rounds, compute, memory, [])
    figures = run_figures(rows[1], None)
    assert figures["mean_devices_holding_blocks"] == pytest.approx((2.5 + 4.0 + 1.0) / 3)
    assert figures["mean_microbatches"] == pytest.approx((3.0 + 8.0 + 1.0) / 3)
    assert figures["memory_over_capacity_max"] == 1.25
    assert figures["peak_memory_bytes"] == 9.0e8
