"""The rounds loop: records, checkpoints and exact resume."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from collapipe_core.checkpoint import load_checkpoint
from collapipe_core.gradient_noise import NoiseEstimate, NoiseScaleAverage
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.sinks import JsonLinesSink, MemorySink, read_json_lines
from tests.core.builders import tiny_config


def _comparable(result: RoundResult) -> dict[str, Any]:
    data = result.to_json()
    data["round"].pop("solve_time_s")  # wall clock
    return data


def test_six_rounds_equal_three_plus_resume_plus_three(tmp_path: Path) -> None:
    config = tiny_config()
    straight = MemorySink()
    full = Runner(config, straight, checkpoint_dir=tmp_path / "a")
    full.run()

    first = MemorySink()
    Runner(config, first, checkpoint_dir=tmp_path / "b").run(max_rounds=3)
    resumed_sink = MemorySink()
    resumed = Runner(config, resumed_sink, checkpoint_dir=tmp_path / "b")
    assert resumed.resume() == 3
    resumed.run()

    pieces = first.results + resumed_sink.results
    assert [r.round.round for r in pieces] == list(range(6))
    assert [_comparable(r) for r in pieces] == [_comparable(r) for r in straight.results]
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert a is not None and b is not None
    for key, tensor in a["executor"]["global_state"].items():
        assert torch.equal(tensor, b["executor"]["global_state"][key]), key
    assert np.array_equal(a["queues"], b["queues"])
    # the gradient noise scale averages over rounds: the resumed run continued the averages
    assert all(r.round.gradient_noise_scale is not None for r in pieces)
    assert a["gradient_noise"] == b["gradient_noise"] and a["gradient_noise"]["num_estimates"] == 6
    assert [r.round.gradient_noise_scale for r in pieces] == [
        r.round.gradient_noise_scale for r in straight.results
    ]


def test_the_gradient_noise_scale_averages_the_rounds_estimates_and_analytic_runs_have_none() -> None:
    sink = MemorySink()
    summary = Runner(tiny_config(training={"rounds": 3}), sink).run()
    average = NoiseScaleAverage()
    for result in sink.results:
        r = result.round
        assert r.gradient_variance is not None and r.gradient_sq_norm is not None
        average = average.update(NoiseEstimate(r.gradient_variance, r.gradient_sq_norm))
        assert r.gradient_noise_scale == average.noise_scale
    assert summary.gradient_noise_scale == sink.results[-1].round.gradient_noise_scale

    analytic = MemorySink()
    Runner(tiny_config(executor="analytic", training={"rounds": 2}), analytic).run()
    for result in analytic.results:
        r = result.round
        assert (r.gradient_noise_scale, r.gradient_variance, r.gradient_sq_norm) == (None, None, None)


def test_records_cover_every_device_and_the_decision(tmp_path: Path) -> None:
    config = tiny_config(training={"rounds": 2})
    sink = JsonLinesSink(tmp_path / "records.jsonl")
    Runner(config, sink).run()
    sink.close()
    results = read_json_lines(tmp_path / "records.jsonl")
    assert len(results) == 2
    devices = results[0].devices
    assert [d.device_id for d in devices] == [f"c{n}-d{k}" for n in range(2) for k in range(3)]
    assert sum(d.num_blocks for d in devices if d.cluster == 0) == 4
    assert all(d.block_end - d.block_start == d.num_blocks for d in devices)
    r = results[1].round
    assert r.train_loss is not None and r.eval_loss is not None and "eval_accuracy" in r.eval_metrics
    assert r.decision["clusters"][0]["num_microbatches"] == 2
    assert results[1].devices[0].queue >= 0


def test_queues_follow_the_lyapunov_update() -> None:
    config = tiny_config(executor="analytic", training={"rounds": 4}, network={"energy_budget_j": 1e-4})
    sink = MemorySink()
    Runner(config, sink).run()
    by_round = [{d.device_id: d for d in r.devices} for r in sink.results]
    for before, after in itertools.pairwise(by_round):
        for name, d in before.items():
            assert after[name].queue == pytest.approx(max(d.queue + d.energy_j - d.energy_budget_j, 0.0))


def test_resume_refuses_a_different_config(tmp_path: Path) -> None:
    Runner(tiny_config(), MemorySink(), checkpoint_dir=tmp_path).run(max_rounds=1)
    other = Runner(tiny_config(training={"lr": 0.5}), MemorySink(), checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="different config"):
        other.resume()


def test_should_stop_ends_after_the_current_round() -> None:
    sink = MemorySink()
    summary = Runner(tiny_config(executor="analytic"), sink).run(should_stop=lambda: True)
    assert len(sink.results) == 1 and summary.stopped_early


@pytest.mark.slow
def test_quickstart_shape_eval_loss_falls() -> None:
    """A small real run on the CMU dictionary: the held-out loss falls clearly."""
    config = tiny_config(
        model={
            "kind": "seq2seq",
            "d_model": 32,
            "num_heads": 4,
            "ffn_dim": 64,
            "seq_len": 12,
            "target_len": 12,
        },
        data={"dataset": "cmudict", "samples_per_cluster": 256, "eval_samples": 64},
        training={"rounds": 20, "local_iterations": 6, "microbatch_size": 8, "lr": 0.004},
    )
    sink = MemorySink()
    Runner(config, sink).run()
    losses = [r.round.eval_loss for r in sink.results]
    assert losses[-1] is not None and losses[0] is not None
    assert losses[-1] < 0.8 * losses[0], losses
