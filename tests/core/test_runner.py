"""The rounds loop: records, checkpoints and exact resume."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from collapipe_core.checkpoint import config_fingerprint, load_checkpoint, save_checkpoint
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


def test_a_resumed_run_s_next_round_sees_the_previous_placement_of_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    # the random policy cuts the encoder anew each round, so blocks change device between rounds
    config = tiny_config(executor="analytic", scheduler={"policy": "random"})
    straight = MemorySink()
    Runner(config, straight, checkpoint_dir=tmp_path / "a").run()
    Runner(config, MemorySink(), checkpoint_dir=tmp_path / "b").run(max_rounds=3)
    checkpoint = load_checkpoint(tmp_path / "b")
    assert checkpoint is not None
    round_2 = straight.results[2].round.decision
    assert checkpoint["previous_placement"]["num_blocks"] == [
        [d["num_blocks"] for d in c["devices"]] for c in round_2["clusters"]
    ]
    assert checkpoint["previous_placement"]["rate_bps"] == [
        [d.rate_bps for d in straight.results[2].devices if d.cluster == n] for n in range(2)
    ]
    resumed_sink = MemorySink()
    resumed = Runner(config, resumed_sink, checkpoint_dir=tmp_path / "b")
    assert resumed.resume() == 3
    resumed.run()
    assert [_comparable(r) for r in resumed_sink.results] == [_comparable(r) for r in straight.results[3:]]
    moved = [r.round.blocks_moved for r in straight.results]
    assert moved[0] == 0 and all(m is not None for m in moved) and sum(moved[1:]) > 0, moved
    shares = [r.round.moves_latency_share for r in straight.results]
    assert shares[0] == 0.0 and all(s is not None and 0.0 <= s < 1.0 for s in shares)

    # a resume without the placement (a checkpoint of a run that predates it) would differ
    forgetful = Runner(config, MemorySink(), checkpoint_dir=tmp_path / "b")
    forgetful.resume()
    forgetful.previous = None
    alone = forgetful.run_round(3).round
    assert straight.results[3].round.blocks_moved > 0 and alone.blocks_moved == 0


def test_a_fork_continues_from_the_placement_its_parent_left(tmp_path: Path) -> None:
    """A fork at round k: the new config's round k is charged the blocks that move from the parent's
    round k − 1 (the checkpoint carries the placement over the switch)."""
    parent = tiny_config(executor="analytic", scheduler={"policy": "random"})
    fork = tiny_config(executor="analytic", scheduler={"policy": "fixed", "segments": [4, 0, 0]})
    Runner(parent, MemorySink(), checkpoint_dir=tmp_path).run(max_rounds=2)
    before = load_checkpoint(tmp_path)
    assert before is not None
    payload = {**before, "config_fingerprint": config_fingerprint(fork)}  # what a fork's relabel does
    save_checkpoint(tmp_path, payload)
    sink = MemorySink()
    runner = Runner(fork, sink, checkpoint_dir=tmp_path)
    assert runner.resume() == 2
    runner.run(max_rounds=2)
    # every block c0-d1 and c0-d2 held at round 1 moves to c0-d0 (and likewise in cluster 1)
    held = np.array(before["previous_placement"]["num_blocks"])
    assert held[:, 1:].sum() > 0
    assert sink.results[0].round.blocks_moved == int(held[:, 1:].sum())
    assert sink.results[1].round.blocks_moved == 0  # the fixed policy keeps its segments


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


def test_the_noise_scale_term_uses_the_configured_value_then_the_one_training_measured() -> None:
    """scheduler.convergence 'noise_scale': round 0 is scored with the configured B_noise, each later round
    with the running average training measured up to the round before."""
    configured = 500.0
    config = tiny_config(
        training={"rounds": 3},
        scheduler={"convergence": "noise_scale", "gradient_noise_scale": configured},
    )
    sink = MemorySink()
    Runner(config, sink).run()
    b = config.training.microbatch_size
    used = [configured] + [r.round.gradient_noise_scale for r in sink.results[:-1]]
    for result, noise in zip(sink.results, used, strict=True):
        r = result.round
        assert noise is not None
        batch = b * sum(r.num_microbatches)
        expected = config.scheduler.V * r.latency_s * noise / batch
        assert r.objective_convergence == pytest.approx(expected, rel=1e-9)
    assert used[1] != configured
