"""The distributed executor trains a Hugging Face model as the simulated one does, tied weights included:
one family of each task kind (bert: classifier, bart: seq2seq, gpt2: causal_lm).

BART ties its shared embedding (on the CU) to the decoder's embedding and LM head (on the edge server),
GPT-2 its wte (CU) to its LM head (edge server): the two ranks each hold a copy, sum its gradients after
every step, and step it alike. One process per CU, device and edge server (5 here), one torch thread
each; tiny models, dropout 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import load_dataset
from collapipe_core.decision import Decision
from collapipe_core.models import build_model, build_skeleton
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.pipeline.distributed.plan import (
    local_optimizer_state,
    merge_optimizer_states,
    slice_optimizer_state,
)
from collapipe_core.pipeline.distributed.stages import (
    StageShapes,
    materialize,
    release,
    stage_module,
    tied_locally,
)
from collapipe_core.pipeline.simulated import SimulatedExecutor, make_optimizer
from collapipe_core.pipeline.split import parameter_aliases
from collapipe_core.state import RoundState, build_environment, observe

ROUNDS = [("gpipe", [3, 0, 2], 4), ("1f1b", [0, 2, 3], 4)]  # (schedule, segments of 3 devices, M)


def _config(architecture: str, dataset: str, **model: Any) -> ExperimentConfig:
    return ExperimentConfig.model_validate(
        {
            "name": "hf",
            "seed": 3,
            "network": {"num_clusters": 1, "devices_per_cluster": 3, "energy_budget_j": 0.05},
            "model": {
                "source": "transformers",
                "architecture": architecture,
                "d_model": 16,
                "num_heads": 2,
                "ffn_dim": 32,
                "num_blocks": 5,
                "seq_len": 12,
                "target_len": 8,
                "dropout": 0.0,
                **model,
            },
            "data": {"dataset": dataset, "samples_per_cluster": 64, "eval_samples": 32},
            # momentum, not AdamW: AdamW's step turns the float noise of a ~0 gradient (a key projection's
            # bias, which softmax ignores) into a step of ±lr, and the weights would differ by that
            "training": {
                "rounds": 2,
                "local_iterations": 2,
                "microbatch_size": 4,
                "lr": 0.01,
                "optimizer": "momentum",
            },
            "scheduler": {"policy": "uniform", "num_microbatches": 4, "max_microbatches": 4},
        }
    )


def _state(config: ExperimentConfig, round_index: int, schedule: str) -> RoundState:
    bundle = load_dataset(config)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    return observe(
        dataclasses.replace(env, settings=dataclasses.replace(env.settings, schedule=schedule)), round_index
    )


def _decision(segments: list[int], microbatches: int) -> Decision:
    share = [1.0 / len(segments)] * len(segments)
    return Decision.from_arrays([segments], [share], [[0.1] * len(segments)], microbatches)


# -- pure parts: tied parameters in stage weights, optimizer state and shapes ---------------------------


def test_stage_weights_load_and_free_with_the_tie_kept() -> None:
    config = _config("bart", "synthetic-reverse", num_decoder_layers=1)
    model = build_model(config.model, 20, 20, seed=0)
    skeleton = build_skeleton(config.model, 20, 20)
    head = stage_module(skeleton, "edge")
    assert parameter_aliases(head) == {"head.lm_head.weight": "head.decoder.embed_tokens.weight"}
    weights = {name: t.clone() for name, t in stage_module(model, "edge").state_dict().items()}
    assert "head.final_logits_bias" in weights  # buffers travel with the parameters
    materialize(head, weights)
    assert skeleton.head.lm_head.weight is skeleton.head.decoder.embed_tokens.weight
    assert torch.equal(skeleton.head.lm_head.weight, model.head.lm_head.weight)
    release(head)
    assert skeleton.head.lm_head.weight.is_meta
    assert skeleton.head.lm_head.weight is skeleton.head.decoder.embed_tokens.weight


def test_only_the_cu_and_the_edge_server_hold_a_tied_parameter() -> None:
    gpt2 = build_skeleton(_config("gpt2", "pydoc-topics").model, 30, 30)
    assert tied_locally(gpt2, "cu") == ["embedding.wte.weight"]
    assert tied_locally(gpt2, "edge") == ["head.lm_head.weight"]
    assert tied_locally(gpt2, "device") == []
    assert tied_locally(build_skeleton(_config("llama", "pydoc-topics").model, 30, 30), "cu") == []


def test_a_tied_parameter_s_optimizer_state_is_sliced_to_both_ranks_and_merged_once() -> None:
    config = _config("gpt2", "pydoc-topics")
    model = build_model(config.model, 30, 30, seed=1)
    names, aliases = [n for n, _ in model.named_parameters()], parameter_aliases(model)
    assert aliases == {"head.lm_head.weight": "embedding.wte.weight"}
    whole = make_optimizer(config, model)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.01)
    whole.step()
    full = whole.state_dict()
    slices = []
    for role, blocks in [("cu", None), ("device", range(0, 5)), ("edge", None)]:
        stage = stage_module(model, role, blocks)  # type: ignore[arg-type]
        stage_names = [n for n, _ in stage.named_parameters()]
        part = slice_optimizer_state(full, names, stage_names, aliases)
        assert part is not None and part.keys() == set(stage_names)
        local = make_optimizer(config, stage)
        local.load_state_dict(local_optimizer_state(part, stage_names, local.state_dict()["param_groups"]))
        slices.append({stage_names[i]: v for i, v in local.state_dict()["state"].items()})
    merged = merge_optimizer_states(slices, names, full["param_groups"], aliases)
    assert merged["state"].keys() == full["state"].keys()
    for i, entry in full["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(merged["state"][i][key]), torch.as_tensor(value)), (i, key)


def test_stage_shapes_are_read_from_the_skeleton() -> None:
    config = _config("gpt2", "pydoc-topics", vocab_size=40)
    shapes = StageShapes.measure(build_skeleton(config.model, 30, 30), config.model, microbatch_size=4)
    assert (shapes.d_model, shapes.num_outputs) == (16, 40)  # model.vocab_size, not the data's 30
    assert shapes.logits(torch.device("cpu")).shape == (4, 12, 40)  # (b, S, V)


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("architecture", "dataset", "model", "tied_names"),
    [
        ("bert", "synthetic-parity", {}, None),
        ("bart", "synthetic-reverse", {"num_decoder_layers": 1}, ("embed_tokens", "lm_head")),
        ("gpt2", "pydoc-topics", {}, ("wte", "lm_head")),
    ],
)
def test_rounds_give_the_simulated_gradients_weights_and_metrics(
    architecture: str, dataset: str, model: dict[str, Any], tied_names: tuple[str, str] | None
) -> None:
    config = _config(architecture, dataset, **model)
    bundle = load_dataset(config)
    simulated = SimulatedExecutor(config, bundle)
    embedding, head = simulated.model.embedding, simulated.model.head
    if tied_names is not None:
        assert (
            getattr(embedding, tied_names[0]).weight is getattr(head, tied_names[1]).weight
        )  # one parameter
    options = DistributedOptions(report_gradients=True, timeout_s=60.0)
    with DistributedExecutor(config, bundle, options) as distributed:
        for t, (schedule, segments, micro) in enumerate(ROUNDS):
            state, decision = _state(config, t, schedule), _decision(segments, micro)
            expected = simulated.execute(state, decision)
            got = distributed.execute(state, decision)

            sim_grads = {n: p.grad for n, p in simulated.model.named_parameters()}
            assert distributed.last_gradients[0].keys() == sim_grads.keys()
            for name, grad in distributed.last_gradients[0].items():
                torch.testing.assert_close(grad, sim_grads[name], rtol=1e-5, atol=1e-6, msg=name)
            assert distributed.global_state.keys() == simulated.global_state.keys()
            for name, weight in simulated.global_state.items():
                torch.testing.assert_close(
                    distributed.global_state[name], weight, rtol=1e-5, atol=1e-6, msg=name
                )
            sim_opt, dist_opt = simulated.optimizer_states[0], distributed.optimizer_states[0]
            assert sim_opt is not None and dist_opt is not None
            assert dist_opt["state"].keys() == sim_opt["state"].keys()
            for i, entry in sim_opt["state"].items():
                for key, value in entry.items():
                    torch.testing.assert_close(dist_opt["state"][i][key], value, rtol=1e-5, atol=1e-6)
            assert got.train_loss == pytest.approx(expected.train_loss, abs=1e-6)
            assert got.eval_loss == pytest.approx(expected.eval_loss, abs=1e-6)
            assert got.eval_metrics == pytest.approx(
                expected.eval_metrics, rel=1e-5, abs=1e-6
            )  # perplexity ~e^7
            # squared gradient norms: a tied weight's micro-batch gradients added across its two ranks
            assert got.gradient_noise is not None and expected.gradient_noise is not None
            assert vars(got.gradient_noise) == pytest.approx(vars(expected.gradient_noise), rel=1e-4)
