"""The simulated executor with LoRA, bf16 and recomputation: what FedAvg averages, checkpoints, resume.

- FedAvg gets only the trainable tensors (the adapters): their keys, and their bytes per cluster equal
  ``federated.exchange.upload_bytes`` summed over the parts; the frozen base never changes.
- A run of four rounds equals two rounds, a resume from the checkpoint and two more, bit for bit; the
  checkpoint holds the adapters, the frozen base (bf16) and the adapters' optimizer state only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from collapipe_core.checkpoint import load_checkpoint
from collapipe_core.federated.exchange import averaged_keys, tensor_bytes, upload_bytes
from collapipe_core.pipeline import simulated as simulated_module
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from tests.core.builders import tiny_config

LORA = {
    "peft": {"r": 4, "target_modules": ["qkv", "ff1"]},
    "precision": "bf16",
    "activation_checkpointing": "all",
}


def test_fedavg_averages_only_the_adapters_and_the_base_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    config = tiny_config(training={**LORA, "rounds": 2})
    seen: list[list[dict[str, torch.Tensor]]] = []
    fedavg = simulated_module.fedavg

    def recording(states: Any, sizes: Any) -> dict[str, torch.Tensor]:
        seen.append(list(states))
        return fedavg(states, sizes)

    monkeypatch.setattr(simulated_module, "fedavg", recording)
    sink = MemorySink()
    runner = Runner(config, sink)
    executor = runner.executor
    assert isinstance(executor, simulated_module.SimulatedExecutor)
    initial = {k: t.clone() for k, t in executor.global_state.items()}
    runner.run()
    keys = averaged_keys(executor.model)
    assert keys and all(".lora_A.default." in k or ".lora_B.default." in k for k in keys)
    uploads = upload_bytes(executor.model)
    per_cluster = uploads.embedding + sum(uploads.blocks) + uploads.head
    assert uploads.embedding == uploads.head == 0  # the adapters are in the blocks
    assert len(seen) == 2 and all(len(states) == config.network.num_clusters for states in seen)
    for states in seen:
        for state in states:
            assert list(state) == keys
            assert all(t.dtype == torch.float32 for t in state.values())
            assert tensor_bytes(state) == per_cluster
    for key, tensor in initial.items():
        if key in keys:
            assert not torch.equal(executor.global_state[key], tensor) or ".lora_B." in key
        else:
            assert torch.equal(executor.global_state[key], tensor), key  # bit for bit
            assert tensor.dtype == torch.bfloat16


def test_four_rounds_equal_two_plus_resume_plus_two_with_the_adapters_in_the_checkpoint(
    tmp_path: Path,
) -> None:
    config = tiny_config(training={**LORA, "rounds": 4})
    straight = MemorySink()
    Runner(config, straight, checkpoint_dir=tmp_path / "a").run()
    first = MemorySink()
    Runner(config, first, checkpoint_dir=tmp_path / "b").run(max_rounds=2)
    resumed_sink = MemorySink()
    resumed = Runner(config, resumed_sink, checkpoint_dir=tmp_path / "b")
    assert resumed.resume() == 2
    resumed.run()

    losses = [(r.round.train_loss, r.round.eval_loss) for r in first.results + resumed_sink.results]
    assert losses == [(r.round.train_loss, r.round.eval_loss) for r in straight.results]
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert a is not None and b is not None
    state = a["executor"]["global_state"]
    for key, tensor in state.items():
        assert torch.equal(tensor, b["executor"]["global_state"][key]), key
    trainable = [k for k in state if ".lora_" in k]
    assert trainable and any(".base_layer." in k and state[k].dtype == torch.bfloat16 for k in state)
    for optimizer in a["executor"]["optimizer_states"]:
        entries = optimizer["state"]
        assert len(entries) == len([k for k in trainable if k.endswith("weight")])  # the adapters only
        assert all(
            e["momentum_buffer"].dtype == torch.float32 for e in entries.values() if "momentum_buffer" in e
        )
