"""LoRA adapters with the peft library: which layers get them, what trains, how they are checked.

Every family (the builtin seq2seq and classifier, bert, bart, gpt2, llama) built with ``training.peft``:
the adapters sit in the split parts, only they (and ``modules_to_save``) train, the same seed draws the
same adapters, bf16 stores only the frozen weights in bf16, the meta skeleton has the model's names and
dtypes; a config naming what the family lacks is refused naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

from collapipe_core.config import ModelConfig, PeftConfig
from collapipe_core.models import EncoderStackModel, build_model, build_skeleton
from collapipe_core.models.peft import DEFAULT_TARGETS, SAVABLE, TARGETS, family_of
from collapipe_core.validation import ConfigError, parse_config
from collapipe_core.workspace import Workspace
from tests.core.builders import tiny_config
from tests.core.models.hf.tiny import VOCAB, hf_config

BUILTIN = {
    "builtin-seq2seq": {"kind": "seq2seq", "num_decoder_layers": 2, "target_len": 7},
    "builtin-classifier": {"kind": "classifier"},
}
FAMILIES = [*BUILTIN, "bert", "bart", "gpt2", "llama"]


def model_config(family: str) -> ModelConfig:
    if family in BUILTIN:
        fields = {"d_model": 16, "num_heads": 2, "ffn_dim": 24, "num_blocks": 3, "seq_len": 9}
        return ModelConfig.model_validate({**fields, "dropout": 0.0, **BUILTIN[family]})
    return hf_config(family)


def outputs(family: str) -> int:
    return 3 if family in ("bert", "builtin-classifier") else VOCAB


def build(family: str, peft: PeftConfig | None, seed: int = 1, **kwargs: Any) -> EncoderStackModel:
    return build_model(
        model_config(family), VOCAB, outputs(family), seed, pad_id=0, bos_id=1, eos_id=2, peft=peft, **kwargs
    )


def linear_layer_names(model: nn.Module) -> set[str]:
    """The last names of the model's linear layers (nn.Linear, and GPT-2's Conv1D)."""
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
            names.add(name.rsplit(".", 1)[-1])
    return names


@pytest.mark.parametrize("family", FAMILIES)
def test_the_valid_targets_are_the_family_s_linear_layers(family: str) -> None:
    cfg = model_config(family)
    assert family_of(cfg) == family
    layers = linear_layer_names(build_skeleton(cfg, VOCAB, outputs(family), pad_id=0, bos_id=1, eos_id=2))
    assert set(TARGETS[family]) <= layers
    assert layers - set(TARGETS[family]) <= {"lm_head", "classifier"}  # tied to the embedding, or saved
    assert set(DEFAULT_TARGETS[family]) <= set(TARGETS[family])
    assert set(SAVABLE[family]).isdisjoint(DEFAULT_TARGETS[family])


@pytest.mark.parametrize("family", FAMILIES)
def test_only_the_adapters_train_and_the_parts_hold_them(family: str) -> None:
    model = build(family, PeftConfig(r=4))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    targets = DEFAULT_TARGETS[family]
    assert trainable and all(".lora_A.default." in n or ".lora_B.default." in n for n in trainable)
    assert {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable} <= set(targets)
    for name in trainable:  # in the blocks (devices) or the head (bart's decoder): never the embedding
        assert name.startswith(("blocks.", "head.")), name
    # every block's default targets got adapters (the parts hold the adapted layers)
    skeleton = build_skeleton(model_config(family), VOCAB, outputs(family), pad_id=0, bos_id=1, eos_id=2)
    for i in range(len(model.blocks)):
        in_block = {
            n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if n.startswith(f"blocks.{i}.")
        }
        assert in_block == set(targets) & linear_layer_names(skeleton.blocks[i]), (i, in_block)
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    assert any(".base_layer." in n for n in frozen) and len(frozen) + len(trainable) == len(
        list(model.parameters())
    )


def test_a_classifier_head_saved_in_full_trains_beside_the_adapters() -> None:
    model = build("bert", PeftConfig(r=2, modules_to_save=["classifier"]))
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert {
        "head.classifier.modules_to_save.default.weight",
        "head.classifier.modules_to_save.default.bias",
    } <= (trainable)
    assert not model.get_parameter("head.classifier.original_module.weight").requires_grad
    logits = model(torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.bool))
    logits.sum().backward()
    assert model.get_parameter("head.classifier.modules_to_save.default.weight").grad is not None


@pytest.mark.parametrize("family", ["builtin-seq2seq", "gpt2"])
def test_the_same_seed_draws_the_same_adapters_and_leaves_the_global_rng(family: str) -> None:
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a, b = build(family, PeftConfig(r=4), seed=7), build(family, PeftConfig(r=4), seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    other = build(family, PeftConfig(r=4), seed=8)
    lora_a = [n for n in a.state_dict() if ".lora_A." in n]
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, b.state_dict()[name]), name
    assert not torch.equal(a.state_dict()[lora_a[0]], other.state_dict()[lora_a[0]])
    assert all(not t.any() for n, t in a.state_dict().items() if ".lora_B." in n)  # starts as the base


@pytest.mark.parametrize("family", ["builtin-classifier", "bart", "llama"])
def test_bf16_stores_only_the_frozen_weights_in_bf16_and_the_skeleton_matches(family: str) -> None:
    model = build(family, PeftConfig(r=4), precision="bf16")
    for name, p in model.named_parameters():
        assert p.dtype == (torch.float32 if p.requires_grad else torch.bfloat16), name
    if family == "bart":  # a tied frozen weight stays one parameter
        assert model.embedding.embed_tokens.weight is model.head.lm_head.weight
    skeleton = build_skeleton(
        model_config(family),
        VOCAB,
        outputs(family),
        pad_id=0,
        bos_id=1,
        eos_id=2,
        peft=PeftConfig(r=4),
        precision="bf16",
    )
    real, meta = model.state_dict(keep_vars=True), skeleton.state_dict(keep_vars=True)
    assert list(real) == list(meta)
    for name, tensor in meta.items():
        assert tensor.is_meta and tensor.dtype == real[name].dtype and tensor.shape == real[name].shape, name
        assert tensor.requires_grad == real[name].requires_grad, name


def test_adapters_go_on_the_pretrained_base(tmp_path: Path) -> None:
    base = build("llama", None)
    base.hf_model.save_pretrained(tmp_path)
    adapted = build("llama", PeftConfig(r=2), seed=99, pretrained_dir=tmp_path)
    state = adapted.state_dict()
    for name, tensor in base.state_dict().items():  # q_proj.weight is now q_proj.base_layer.weight
        mapped = name if name in state else name.replace("_proj.weight", "_proj.base_layer.weight")
        assert torch.equal(state[mapped], tensor), name


def test_an_adapter_directory_as_pretrained_path_is_refused_with_the_way_to_do_it(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    model = {"source": "transformers", "architecture": "llama", "pretrained_path": str(adapter)}
    with pytest.raises(ConfigError) as err:
        tiny_config(model={**model, "kind": "causal_lm"}, data={"dataset": "pydoc-topics"})
    [problem] = [p for p in err.value.problems if p.field == "model.pretrained_path"]
    assert "peft adapter directory" in problem.message
    assert "base model's save_pretrained directory" in problem.message and "training.peft" in problem.message


def _problems(**training: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        tiny_config(training=training)
    return {p.field: p.message for p in err.value.problems}


def test_targets_the_family_lacks_are_refused_listing_the_valid_names() -> None:
    problems = _problems(peft={"target_modules": ["qkv", "q_proj"]})
    assert problems.keys() == {"training.peft.target_modules"}
    message = problems["training.peft.target_modules"]
    assert "no linear layer named q_proj" in message
    assert "qkv, out, ff1, ff2, pooler, classifier" in message


def test_a_rank_out_of_range_is_refused_naming_the_field() -> None:
    assert "choose r ≤ 16" in _problems(peft={"r": 17})["training.peft.r"]  # d_model 16
    assert "training.peft.r" in _problems(peft={"r": 0})
    assert "training.peft.r" in _problems(peft={"r": -3})


def test_modules_to_save_must_be_a_classifier_s_head_and_not_a_target() -> None:
    assert (
        "choose among pooler, classifier"
        in _problems(peft={"modules_to_save": ["ff1"]})["training.peft.modules_to_save"]
    )
    both = _problems(peft={"target_modules": ["qkv", "classifier"], "modules_to_save": ["classifier"]})
    assert "either gets adapters or trains in full" in both["training.peft.modules_to_save"]


def test_lora_on_the_7b_shapes_is_refused_for_a_training_executor_naming_the_model(tmp_path: Path) -> None:
    # the analytic example's LLaMA-2-7B with LoRA r = 16 in bf16: the cost model may plan it, but a worker
    # that trains it holds the frozen base of every cluster
    example = yaml.safe_load((Path(__file__).parents[3] / "examples" / "llama-7b-analytic.yaml").read_text())
    example["training"] |= {"peft": {"r": 16}, "precision": "bf16"}
    with pytest.raises(ConfigError) as err:
        parse_config({**example, "executor": "simulated"}, Workspace(memory_limit_bytes=16 * 2**30))
    [problem] = err.value.problems
    assert problem.field == "model"
    assert "simulated executor would need" in problem.message and "executor: analytic" in problem.message
