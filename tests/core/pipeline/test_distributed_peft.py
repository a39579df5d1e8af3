"""The distributed executor trains LoRA adapters as the simulated one does, in fp32 and bf16, with and
without activation recomputation; FedAvg moves only what trains; recomputation lowers the memory.

One GPT-2 with LoRA on ``c_attn`` (a Conv1D: adapters with ``fan_in_fan_out``; its token embedding, on
the CU, tied to the LM head, on the edge server, frozen), AdamW, per precision (fp32 and bf16) one pool of
ranks and three rounds beside the simulated executor (:func:`lora_rounds`):

0. 1F1B over [3, 0, 3] blocks, device 2 recomputing (this round also warms the ranks up);
1. GPipe over [4, 0, 2], no recomputation;
2. GPipe over [4, 0, 2], every device recomputing.

Checked: the trainable gradients, the losses, the weights and the optimizer state equal the simulated
executor's (fp32 within 1e-5; bf16 within the tolerance below); no rank computes a gradient of a frozen
weight; every frozen weight is bit for bit the initial one (bf16 under bf16), the adapters and their
AdamW state are fp32; what each rank uploaded to its CU for FedAvg is its stage's adapters, byte for
byte; recomputation lowers every device's measured peak (rounds 1 and 2), and the peaks are compared
with the cost model's device memory (±20 %).

bf16 tolerance. bf16 keeps 8 significant bits: one unit in the last place is 2^-8 ≈ 0.4 % of a value.
The two executors run the same operations on the same values, one torch thread each; on this machine
they agree bit for bit. Where kernels differ (another thread count or CPU: a matrix product's fp32
accumulator sums its bf16 products in another order), a result's rounding to bf16 can fall one unit
apart and propagate into the gradients. So the test allows a few units: gradients and AdamW's moments
within rtol 2e-2 (about 5 units) with an absolute floor of 1e-3 of the tensor's scale; the losses within
1e-3 (computed in fp32 from the logits, which a unit of one logit moves far less); the adapters within
2·lr per optimizer step (AdamW's normalised step turns any gradient difference into a weight difference
of at most about lr). The frozen weights must stay bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel import evaluate
from collapipe_core.data import load_dataset
from collapipe_core.decision import Decision
from collapipe_core.federated.exchange import averaged_keys, upload_bytes
from collapipe_core.models import build_model, build_skeleton
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.pipeline.distributed.stages import StageShapes, materialize, release, stage_module
from collapipe_core.pipeline.simulated import SimulatedExecutor
from collapipe_core.state import build_environment, observe

MICROBATCHES = 4
ROUNDS: list[tuple[str, list[int], list[bool]]] = [  # (schedule, segments, recompute) of 3 devices
    ("1f1b", [3, 0, 3], [False, False, True]),
    ("gpipe", [4, 0, 2], [False, False, False]),
    ("gpipe", [4, 0, 2], [True, False, True]),
]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """The simulated executor in one torch thread, as each rank runs: on a shared 2-core host two
    threads per process wait on each other (a round took 10 s instead of 0.5 s at load 12)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def lora_config(precision: str) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": "gpt2-lora",
            "seed": 3,
            "executor": "distributed",
            "network": {"num_clusters": 1, "devices_per_cluster": 3},
            "model": {
                "source": "transformers",
                "architecture": "gpt2",
                "d_model": 64,
                "num_heads": 4,
                "ffn_dim": 256,
                "num_blocks": 6,
                "seq_len": 48,
                "dropout": 0.0,
            },
            "data": {
                "dataset": "pydoc-topics",
                "tokenizer": {"kind": "bpe", "vocab_size": 400},
                "samples_per_cluster": 64,
                "eval_samples": 16,
            },
            "training": {
                "rounds": len(ROUNDS),
                "local_iterations": 2,
                "microbatch_size": 4,
                "optimizer": "adamw",
                "lr": 1e-3,
                "precision": precision,
                "peft": {"r": 4, "alpha": 8.0},
                "activation_checkpointing": "auto",  # the devices follow the decision's flags
            },
            "scheduler": {
                "policy": "uniform",
                "num_microbatches": MICROBATCHES,
                "max_microbatches": MICROBATCHES,
            },
        }
    )


# -- a rank's stage with LoRA in bf16: shapes, weights, recomputation ---------------------------------


def test_a_bf16_rank_s_stage_sends_bf16_and_loads_its_frozen_base_in_bf16() -> None:
    config = lora_config("bf16")
    t, vocab = config.training, 50
    skeleton = build_skeleton(config.model, vocab, vocab, pad_id=0, peft=t.peft, precision=t.precision)
    shapes = StageShapes.measure(skeleton, config.model, 4, t.precision)
    inputs, output = shapes.io("device", torch.device("cpu"))
    assert inputs[0].dtype == output.dtype == torch.bfloat16 and output.shape == (4, 48, 64)
    assert shapes.io("edge", torch.device("cpu"))[1].dtype == torch.float32  # logits for the loss
    stage = stage_module(skeleton, "device", range(1, 3), recompute=True, precision=t.precision)
    assert stage.recompute  # type: ignore[union-attr]
    model = build_model(config.model, vocab, vocab, 3, pad_id=0, peft=t.peft, precision=t.precision)
    weights = stage_module(model, "device", range(1, 3)).state_dict()
    materialize(stage, weights)
    for name, p in stage.named_parameters():
        assert p.dtype == (torch.float32 if ".lora_" in name else torch.bfloat16), name
        assert torch.equal(p, weights[name]) and p.requires_grad == (".lora_" in name), name
    h = torch.randn(4, 48, 64, dtype=torch.bfloat16)
    out = stage(h, src_mask=torch.ones(4, 48, dtype=torch.bool))
    assert out.dtype == torch.bfloat16
    release(stage)
    assert all(p.is_meta for p in stage.parameters())


@dataclasses.dataclass
class LoraRun:
    """One precision's rounds, both executors side by side."""

    config: ExperimentConfig
    simulated: SimulatedExecutor
    initial: dict[str, torch.Tensor]  # the global state before training
    uploads: list[list[int]] = dataclasses.field(default_factory=list)  # per round: modeled bytes per device
    outcomes: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)  # (simulated, distributed)
    gradients: list[tuple[dict[str, Any], dict[str, Any]]] = dataclasses.field(default_factory=list)
    modeled_bytes: list[list[float]] = dataclasses.field(default_factory=list)  # per device, no overhead
    distributed_state: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    distributed_optimizer: dict[str, Any] = dataclasses.field(default_factory=dict)


def lora_rounds(precision: str) -> LoraRun:
    """The rounds of :data:`ROUNDS` in both executors; the distributed ranks' figures of each."""
    config = lora_config(precision)
    bundle = load_dataset(config)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    simulated = SimulatedExecutor(config, bundle)
    run = LoraRun(config, simulated, {k: t.clone() for k, t in simulated.global_state.items()})
    per_block = upload_bytes(simulated.model)
    overhead = config.network.runtime_overhead_bytes
    options = DistributedOptions(timeout_s=60.0, report_gradients=True)
    with DistributedExecutor(config, bundle, options) as executor:
        for t, (schedule, segments, recompute) in enumerate(ROUNDS):
            settings = dataclasses.replace(env.settings, schedule=schedule)
            state = observe(dataclasses.replace(env, settings=settings), t)
            scheduled = [1.0 if blocks else 0.0 for blocks in segments]
            decision = Decision.from_arrays(
                [segments],
                [[x / sum(scheduled) for x in scheduled]],
                [[0.1] * 3],
                MICROBATCHES,
                recompute=recompute,
            )
            expected = simulated.execute(state, decision)
            got = executor.execute(state, decision)
            run.outcomes.append((expected, got))
            grads = {n: p.grad.clone() for n, p in simulated.model.named_parameters() if p.grad is not None}
            run.gradients.append((grads, dict(executor.last_gradients[0])))
            run.uploads.append(per_block.devices(segments))
            modeled = evaluate(state, decision).memory_bytes
            run.modeled_bytes.append([float(modeled[0, k]) - overhead for k in range(3)])
        run.distributed_state = dict(executor.global_state)
        opt = executor.optimizer_states[0]
        assert opt is not None
        run.distributed_optimizer = opt
    return run


@pytest.fixture(scope="module", params=["fp32", "bf16"])
def lora_run(request: pytest.FixtureRequest) -> Iterator[LoraRun]:
    yield lora_rounds(request.param)


def _close(got: Any, expected: Any, rtol: float, atol: float, msg: str) -> None:
    torch.testing.assert_close(torch.as_tensor(got), torch.as_tensor(expected), rtol=rtol, atol=atol, msg=msg)


def _bf16_close(got: Any, expected: Any, msg: str) -> None:
    """A few units of bf16 (rtol 2e-2), with an absolute floor of 1e-3 of the tensor's scale."""
    expected = torch.as_tensor(expected)
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    _close(got, expected, 2e-2, 1e-3 * scale + 1e-12, msg)


def _closeness(run: LoraRun) -> Callable[[Any, Any, str], None]:
    if run.config.training.precision == "bf16":
        return _bf16_close
    return lambda got, expected, msg: _close(got, expected, 1e-5, 1e-7, msg)


@pytest.mark.distributed
def test_the_rounds_equal_the_simulated_executor_s(lora_run: LoraRun) -> None:
    close, bf16 = _closeness(lora_run), lora_run.config.training.precision == "bf16"
    trainable = averaged_keys(lora_run.simulated.model)
    assert trainable and all(".lora_" in name for name in trainable)
    for expected_grads, got_grads in lora_run.gradients:
        # every adapter's gradient, and none of a frozen weight (the tied embedding among them)
        assert got_grads.keys() == expected_grads.keys() == {n for n in trainable if "lora" in n}
        for name, grad in got_grads.items():
            assert grad.dtype == torch.float32, name
            close(grad, expected_grads[name], name)
    for expected, got in lora_run.outcomes:
        assert got.train_loss == pytest.approx(expected.train_loss, rel=1e-3 if bf16 else 1e-6)
        assert got.eval_loss == pytest.approx(expected.eval_loss, rel=1e-3 if bf16 else 1e-6)
        assert got.eval_metrics == pytest.approx(expected.eval_metrics, rel=1e-3 if bf16 else 1e-5)
    t = lora_run.config.training
    steps = t.rounds * t.local_iterations  # an AdamW step moves a weight by at most about lr
    simulated = lora_run.simulated
    assert list(lora_run.distributed_state) == list(simulated.global_state)
    for name in trainable:
        got = lora_run.distributed_state[name]
        assert got.dtype == torch.float32, name
        _close(
            got, simulated.global_state[name], 0.0 if bf16 else 1e-5, 2 * t.lr * steps if bf16 else 1e-6, name
        )
    sim_opt = simulated.optimizer_states[0]
    assert sim_opt is not None
    assert lora_run.distributed_optimizer["state"].keys() == sim_opt["state"].keys()
    for i, entry in lora_run.distributed_optimizer["state"].items():
        for key, value in entry.items():
            if torch.is_tensor(value) and value.dim():
                assert value.dtype == torch.float32, (i, key)
            close(value, sim_opt["state"][i][key], f"{i} {key}")


@pytest.mark.distributed
def test_the_frozen_base_stays_bit_for_bit_and_only_the_adapters_cross_fedavg(lora_run: LoraRun) -> None:
    bf16 = lora_run.config.training.precision == "bf16"
    trainable = set(averaged_keys(lora_run.simulated.model))
    model = lora_run.simulated.model
    assert model.embedding.wte.weight is model.head.lm_head.weight  # tied, and frozen
    for name, tensor in lora_run.initial.items():
        if name not in trainable:
            assert tensor.dtype == (torch.bfloat16 if bf16 else torch.float32), name
            assert torch.equal(lora_run.distributed_state[name], tensor), name
            assert torch.equal(lora_run.simulated.global_state[name], tensor), name
    for (schedule, segments, _), expected, (_, got) in zip(
        ROUNDS, lora_run.uploads, lora_run.outcomes, strict=True
    ):
        for k, blocks in enumerate(segments):
            if blocks:
                assert got.measured[f"c0-d{k}"]["fedavg_upload_bytes"] == expected[k] > 0, (schedule, k)
        assert got.measured["c0-edge"]["fedavg_upload_bytes"] == 0  # the LM head is frozen
        assert "fedavg_upload_bytes" not in got.measured["c0-cu"]


def _peaks(lora_run: LoraRun, round_index: int) -> dict[int, float]:
    measured = lora_run.outcomes[round_index][1].measured
    return {
        k: measured[f"c0-d{k}"]["peak_tensor_bytes"]
        for k, blocks in enumerate(ROUNDS[round_index][1])
        if blocks
    }


@pytest.mark.distributed
def test_recomputation_lowers_every_device_s_measured_peak(lora_run: LoraRun) -> None:
    stored, again = _peaks(lora_run, 1), _peaks(lora_run, 2)  # the same placement, recomputing or not
    assert stored.keys() == again.keys() == {0, 2}
    for k in stored:
        assert again[k] < 0.8 * stored[k], (k, again[k], stored[k])


@pytest.mark.distributed
def test_the_modeled_device_memory_is_within_20_percent_of_the_measured_peak(lora_run: LoraRun) -> None:
    ratios = {}
    for t in (1, 2):  # after the warm-up round
        for k, peak in _peaks(lora_run, t).items():
            ratios[(t, k)] = peak / lora_run.modeled_bytes[t][k]
    assert all(0.8 <= r <= 1.2 for r in ratios.values()), ratios


def main() -> None:
    """Print each device's measured peak beside the cost model's, as docs/distributed.md shows them:
    ``.venv/bin/python -m tests.core.pipeline.test_distributed_peft``."""
    torch.set_num_threads(1)
    columns = ["precision", "round", "device (TEBs)", "recompute", "tensor peak", "resident state", "model"]
    print("| " + " | ".join([*columns, "peak / model"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for precision in ("fp32", "bf16"):
        run = lora_rounds(precision)
        for t, (schedule, segments, recompute) in enumerate(ROUNDS):
            measured = run.outcomes[t][1].measured
            for k, blocks in enumerate(segments):
                if blocks:
                    figures = measured[f"c0-d{k}"]
                    peak, modeled = figures["peak_tensor_bytes"], run.modeled_bytes[t][k]
                    again = "yes" if recompute[k] else "no"
                    print(
                        f"| {precision} | {t} ({schedule}) | c0-d{k} ({blocks}) | {again} "
                        f"| {peak / 2**20:.2f} MiB | {figures['resident_state_bytes'] / 2**20:.2f} MiB "
                        f"| {modeled / 2**20:.2f} MiB | {peak / modeled:.2f} |"
                    )


if __name__ == "__main__":
    main()
