"""With a fixed batch (``training.batch_size`` B), the number of micro-batches M does not change a step.

A step trains B samples cut into M micro-batches of B/M; the loss is the step's token-weighted mean, so
its value and every gradient are the same for every M up to float reassociation: the simulated executor
is checked in float64 at M = 1, 2, 4, 8 under both schedules, for a builtin seq2seq model (targets of
different lengths, so the micro-batches hold different numbers of loss terms) and a Hugging Face llama;
the distributed executor in float32 at M = 1 and 4. With a fixed micro-batch instead (M·b samples per
step) the same comparison finds different gradients, so the equality above is not met by construction.
Dropout is 0 throughout; one local iteration and one cluster, so a step's gradient is the round's.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Literal

import pytest
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import batch_indices, load_dataset
from collapipe_core.decision import Decision
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.pipeline.simulated import SimulatedExecutor
from collapipe_core.state import build_environment, observe
from tests.core.builders import tiny_config
from tests.core.pipeline.test_distributed import _config, _state

BATCH = 8  # B
MICROBATCHES = (1, 2, 4, 8)
SEGMENTS = [2, 0, 2]  # 4 TEBs over 3 devices; the middle one sits out
MODELS: dict[str, tuple[dict[str, Any], str]] = {  # model section, dataset
    "builtin-seq2seq": ({"kind": "seq2seq", "target_len": 8}, "synthetic-reverse"),
    "llama": ({"source": "transformers", "architecture": "llama", "kind": "causal_lm"}, "pydoc-topics"),
}

Step = tuple[float, dict[str, torch.Tensor]]  # the step's loss and every parameter's gradient
Schedule = Literal["gpipe", "1f1b"]


def _fixed_batch_config(model: str, **training: Any) -> ExperimentConfig:
    section, dataset = MODELS[model]
    return tiny_config(
        network={"num_clusters": 1, "devices_per_cluster": len(SEGMENTS)},
        model={**section, "num_blocks": sum(SEGMENTS), "dropout": 0.0},
        data={"dataset": dataset, "samples_per_cluster": 64, "eval_samples": 8},
        training={
            "rounds": 1,
            "local_iterations": 1,
            "optimizer": "sgd",
            "batch_size": BATCH,
            "microbatch_size": None,
            **training,
        },
        scheduler={"policy": "uniform", "num_microbatches": 1, "max_microbatches": max(MICROBATCHES)},
    )


def _decision(microbatches: int) -> Decision:
    on = [1.0 if blocks else 0.0 for blocks in SEGMENTS]
    shares = [s / sum(on) for s in on]
    return Decision.from_arrays([SEGMENTS], [shares], [[0.1 * s for s in on]], microbatches)


def _simulated_step(config: ExperimentConfig, microbatches: int, schedule: Schedule) -> Step:
    """Round 0 of the simulated executor with the model in float64: the step's loss and gradients."""
    bundle = load_dataset(config)
    executor = SimulatedExecutor(config, bundle)
    executor.model.double()
    executor.global_state = copy.deepcopy(executor.model.state_dict())
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    env = dataclasses.replace(env, settings=dataclasses.replace(env.settings, schedule=schedule))
    outcome = executor.execute(observe(env, 0), _decision(microbatches))
    grads = {}
    for name, p in executor.model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float64, name
        grads[name] = p.grad.clone()
    assert outcome.train_loss is not None
    return outcome.train_loss, grads


def _differences(got: Step, expected: Step) -> tuple[float, float]:
    """(relative loss difference, largest relative gradient difference of a parameter, by norm)."""
    loss = abs(got[0] - expected[0]) / abs(expected[0])
    assert got[1].keys() == expected[1].keys()
    grad = max(float((got[1][n] - g).norm() / g.norm()) for n, g in expected[1].items())
    return loss, grad


def _assert_same_step(got: Step, expected: Step, rtol: float) -> None:
    """The loss within ``rtol``, every gradient element within ``rtol`` of its value plus ``rtol`` times
    its tensor's largest element (an element whose true value is ~0 keeps only the float noise of the
    larger terms it sums)."""
    assert got[0] == pytest.approx(expected[0], rel=rtol, abs=0.0)
    assert got[1].keys() == expected[1].keys()
    for name, grad in expected[1].items():
        scale = float(grad.abs().max())
        torch.testing.assert_close(got[1][name], grad, rtol=rtol, atol=rtol * scale, msg=name)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_fixed_batch_gives_the_same_loss_and_gradients_for_every_m(model: str, schedule: Schedule) -> None:
    config = _fixed_batch_config(model)
    reference = _simulated_step(config, 1, schedule)
    for m in MICROBATCHES[1:]:
        _assert_same_step(_simulated_step(config, m, schedule), reference, rtol=1e-10)


def test_the_micro_batches_hold_different_numbers_of_loss_terms() -> None:
    """What makes the seq2seq case a test of the token weighting: at M = 8 the micro-batches' target
    tokens differ, so a mean of per-micro-batch means would depend on M."""
    config = _fixed_batch_config("builtin-seq2seq")
    bundle = load_dataset(config)
    shard = bundle.shards[0]
    idx = batch_indices(len(shard), BATCH, (config.seed, 0, 0, 0))  # the simulated executor's draw
    labels = torch.as_tensor(shard.tgt[idx][:, 1:])
    assert bundle.pad_id is not None
    tokens_per_sample = (labels != bundle.pad_id).sum(dim=1)
    assert len(set(tokens_per_sample.tolist())) > 1


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_fixed_micro_batch_gives_different_gradients_for_every_m(model: str) -> None:
    """The fixed micro-batch reading trains M·b samples: M changes the step, far beyond float noise."""
    config = _fixed_batch_config(model, batch_size=None, microbatch_size=2)
    reference = _simulated_step(config, 1, "gpipe")
    for m in MICROBATCHES[1:]:
        loss, grad = _differences(_simulated_step(config, m, "gpipe"), reference)
        assert loss > 1e-4 and grad > 1e-2, (m, loss, grad)


@pytest.mark.distributed
def test_the_distributed_executor_gives_the_same_step_for_m_1_and_4() -> None:
    """One pool of 5 ranks (float32): M = 1 (GPipe), then M = 4 under GPipe and 1F1B (4 stages) from the
    same weights; each M really ran M micro-batches, each one's compute (wall and CPU time, the edge
    server's loss apart) reported."""
    config = _config(
        "seq2seq",
        1,
        len(SEGMENTS),
        sum(SEGMENTS),
        training={"local_iterations": 1, "batch_size": BATCH, "microbatch_size": None, "optimizer": "sgd"},
    )
    bundle = load_dataset(config)
    options = DistributedOptions(report_gradients=True, track_tensor_bytes=False, timeout_s=60.0)
    with DistributedExecutor(config, bundle, options) as executor:
        initial = copy.deepcopy(executor.state_dict())
        steps: dict[tuple[int, str], Step] = {}
        for m, schedule in [(1, "gpipe"), (4, "gpipe"), (4, "1f1b")]:
            executor.load_state_dict(copy.deepcopy(initial))
            outcome = executor.execute(_state(config, 0, schedule), _decision(m))
            assert outcome.train_loss is not None
            steps[m, schedule] = (outcome.train_loss, dict(executor.last_gradients[0]))
            for participant, details in executor.last_details.items():  # each micro-batch timed
                for key in ("forward", "backward", "forward_cpu", "backward_cpu"):
                    assert len(details[f"{key}_chunks_s"]) == m, (participant, key)
                    assert all(t > 0 for t in details[f"{key}_chunks_s"]), (participant, key)
                losses = 0 if participant != "c0-edge" else m  # the edge server's loss, apart
                assert len(details["loss_chunks_s"]) == len(details["loss_cpu_chunks_s"]) == losses
            assert outcome.measured["c0-cu"]["schedule_1f1b"] == (1.0 if schedule == "1f1b" else 0.0)
    reference = steps[1, "gpipe"]
    assert all(g.dtype == torch.float32 for g in reference[1].values())
    for key in [(4, "gpipe"), (4, "1f1b")]:
        _assert_same_step(steps[key], reference, rtol=1e-6)
