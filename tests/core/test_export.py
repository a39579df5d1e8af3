"""Exported models load back — with transformers' ``from_pretrained`` (local files only) for the Hugging
Face families, with CollaPipe's builder for the builtin ones — and evaluate, through CollaPipe's own
evaluation (token-weighted, masks), to the run's last eval loss; the run's tokenizer comes with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from collapipe_core.checkpoint import load_checkpoint
from collapipe_core.config import ExperimentConfig
from collapipe_core.data import DatasetBundle, load_dataset
from collapipe_core.export import NothingToExport, export_model, load_model, read_metadata, weight_bytes
from collapipe_core.models import EncoderStackModel, source_mask, split_targets
from collapipe_core.models.hf import family
from collapipe_core.pipeline.quality import evaluate_model
from collapipe_core.pipeline.simulated import build_run_model
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.workspace import Workspace

TOLERANCE = 1e-5  # fp32
SMALL = {"d_model": 16, "ffn_dim": 24, "num_blocks": 2, "dropout": 0.0}
TEXT = {"dataset": "pydoc-topics", "samples_per_cluster": 16, "eval_samples": 16}
FAMILIES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "builtin": (
        {"kind": "seq2seq", "num_heads": 2, "seq_len": 10, "target_len": 10, "num_decoder_layers": 1},
        {"dataset": "synthetic-reverse"},
    ),
    "bert": (
        {"source": "transformers", "architecture": "bert", "num_heads": 2, "seq_len": 12},
        {"dataset": "synthetic-parity"},
    ),
    "bart": (
        {"source": "transformers", "architecture": "bart", "num_heads": 2, "seq_len": 10, "target_len": 10},
        {"dataset": "synthetic-reverse"},
    ),
    "gpt2": (
        {"source": "transformers", "architecture": "gpt2", "num_heads": 2, "seq_len": 16},
        {**TEXT, "tokenizer": {"kind": "bpe", "vocab_size": 160}},
    ),
    "llama": (
        {"source": "transformers", "architecture": "llama", "num_heads": 4, "num_kv_heads": 2, "seq_len": 16},
        {**TEXT, "tokenizer": {"kind": "wordpiece", "vocab_size": 160}},
    ),
}


def _config(
    model: dict[str, Any], data: dict[str, Any], peft: dict[str, Any] | None = None
) -> ExperimentConfig:
    training = {"rounds": 1, "local_iterations": 1, "microbatch_size": 4, "lr": 0.02}
    return ExperimentConfig.model_validate(
        {
            "seed": 3,
            "executor": "simulated",
            "network": {"num_clusters": 2, "devices_per_cluster": 2},
            "model": {**SMALL, **model},
            "data": {"samples_per_cluster": 16, "eval_samples": 16, **data},
            "training": training if peft is None else {**training, "lr": 0.05, "peft": peft},
            "scheduler": {"policy": "uniform", "num_microbatches": 2, "max_microbatches": 2},
        }
    )


def _trained(config: ExperimentConfig, directory: Path) -> tuple[dict[str, Any], float]:
    """The checkpoint's executor state after the run, and the run's last eval loss."""
    summary = Runner(config, MemorySink(), checkpoint_dir=directory).run()
    checkpoint = load_checkpoint(directory)
    assert checkpoint is not None
    return checkpoint["executor"], summary.final_eval["eval_loss"]


def _eval_loss(model: EncoderStackModel, config: ExperimentConfig) -> float:
    bundle = load_dataset(config, Workspace.local())
    loss, _ = evaluate_model(
        model, bundle.eval, pad_id=bundle.pad_id, bos_id=bundle.bos_id, eos_id=bundle.eos_id
    )
    return loss


def _from_pretrained(config: ExperimentConfig, directory: Path) -> EncoderStackModel:
    """transformers' own loader on the directory, split as a run splits the model."""
    fam = family(config.model.architecture)
    hf_model = fam.model_class.from_pretrained(str(directory), local_files_only=True)
    return fam.split(hf_model.eval())


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_full_export_evaluates_to_the_runs_last_eval_loss(tmp_path: Path, name: str) -> None:
    config = _config(*FAMILIES[name])
    state, run_loss = _trained(config, tmp_path / "run")
    out = export_model(config, state, tmp_path / "model")
    if name == "builtin":
        assert {p.name for p in out.iterdir()} == {"model.safetensors", "collapipe.json"}
        loaded = load_model(out)  # CollaPipe's builder
    else:
        assert {"config.json", "model.safetensors", "collapipe.json"} <= {p.name for p in out.iterdir()}
        loaded = _from_pretrained(config, out)
    assert abs(_eval_loss(loaded, config) - run_loss) <= TOLERANCE
    assert _saved_bytes(out) == weight_bytes(config, load_dataset(config), None)  # the pre-check's count
    initial = read_metadata(out).build(seed=config.seed).state_dict()  # the run's initial weights
    trained = loaded.state_dict()
    moved = max(float((trained[k] - v).abs().max()) for k, v in initial.items() if v.is_floating_point())
    assert moved > 1e-3  # the export holds the trained weights, not the initial ones
    if config.data.dataset == "pydoc-topics":  # texts, encoded by the tokenizer the run trained
        _check_tokenizer(config, out)
    else:
        _check_character_vocabulary(config, out)


def _trained_model(config: ExperimentConfig, state: dict[str, Any]) -> EncoderStackModel:
    """The run's own model holding ``state`` (what the executor evaluated)."""
    model = build_run_model(config, load_dataset(config, Workspace.local()), None)
    model.load_state_dict(state["global_state"])
    return model.eval()


def _saved_bytes(directory: Path) -> int:
    """Bytes of every tensor in the directory's safetensors files (fp32), base/ included."""
    total = 0
    for path in directory.rglob("*.safetensors"):
        with safe_open(str(path), "pt") as saved:
            for key in saved.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
                tensor = saved.get_tensor(key)
                assert tensor.dtype == torch.float32
                total += tensor.numel() * 4
    return total


def _check_tokenizer(config: ExperimentConfig, out: Path) -> None:
    """The tokenizer the run trained loads with AutoTokenizer and encodes as the run encoded."""
    bundle = load_dataset(config, Workspace.local())
    assert bundle.tokenizer is not None
    tokenizer = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    text = "Return the value of the named attribute of object."
    assert tokenizer(text, add_special_tokens=False).input_ids == bundle.tokenizer.encode([text])[0]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        bundle.pad_id,
        bundle.bos_id,
        bundle.eos_id,
    )
    assert len(tokenizer) == bundle.src_vocab_size


def _check_character_vocabulary(config: ExperimentConfig, out: Path) -> None:
    """A character dataset's export names its vocabulary (and a classifier its classes)."""
    bundle = load_dataset(config, Workspace.local())
    metadata = json.loads((out / "collapipe.json").read_text())
    assert metadata["src_vocab"] == list(bundle.src_vocab)
    assert not (out / "tokenizer.json").exists()
    if config.model.kind == "classifier":
        assert metadata["classes"] == list(bundle.tgt_vocab)
        saved = json.loads((out / "config.json").read_text())
        assert saved["id2label"] == {str(i): name for i, name in enumerate(bundle.tgt_vocab)}


def _pretrained_gpt2(directory: Path) -> str:
    """A small GPT-2 with a byte-level BPE tokenizer, saved as save_pretrained saves them."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(
        [f"the help text of topic {i} says what it does" for i in range(80)], trainer
    )
    roles = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **roles).save_pretrained(directory)  # type: ignore[no-untyped-call]
    torch.manual_seed(0)
    hf_config = GPT2Config(
        vocab_size=320,
        n_positions=16,
        n_embd=16,
        n_layer=2,
        n_head=2,
        n_inner=24,
        bos_token_id=0,
        eos_token_id=0,
    )
    GPT2LMHeadModel(hf_config).save_pretrained(directory)
    return str(directory)


def test_a_fine_tuned_pretrained_model_keeps_its_own_tokenizer(tmp_path: Path) -> None:
    path = _pretrained_gpt2(tmp_path / "gpt2")
    config = _config(
        {"source": "transformers", "architecture": "gpt2", "pretrained_path": path, "seq_len": 16},
        {**TEXT, "tokenizer": {"kind": "pretrained"}},
    )
    state, run_loss = _trained(config, tmp_path / "run")
    out = export_model(config, state, tmp_path / "model")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (Path(path) / name).read_bytes()
    assert abs(_eval_loss(_from_pretrained(config, out), config) - run_loss) <= TOLERANCE


def _adapted_with_peft(config: ExperimentConfig, out: Path, base: str | None = None) -> EncoderStackModel:
    """The adapter loaded by peft's own from_pretrained onto its base: the export's base/ (a transformers
    family trained from random weights), the given checkpoint, or CollaPipe's builder (builtin)."""
    if config.model.source == "transformers":
        fam = family(config.model.architecture)
        base_model = fam.model_class.from_pretrained(base or str(out / "base"), local_files_only=True)
        adapted = PeftModel.from_pretrained(base_model, str(out), local_files_only=True)
        return fam.split(adapted.base_model.model).eval()
    builtin = read_metadata(out).build(seed=config.seed)
    PeftModel.from_pretrained(builtin, str(out), local_files_only=True)  # adapters injected in place
    return builtin.eval()


def _logits(
    model: EncoderStackModel, config: ExperimentConfig, bundle: DatasetBundle | None = None
) -> torch.Tensor:
    bundle = bundle or load_dataset(config, Workspace.local())
    src, tgt = bundle.eval.src[:8], bundle.eval.tgt[:8]
    dec_in, _ = split_targets(model.kind, tgt)
    with torch.no_grad():
        logits: torch.Tensor = model(src, source_mask(src, bundle.pad_id), dec_in)
    return logits


PEFT_ON_TRANSFORMERS = "ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"  # peft 0.21's call


@pytest.mark.filterwarnings(PEFT_ON_TRANSFORMERS)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_lora_export_is_a_peft_adapter_and_merges_into_the_same_model(tmp_path: Path, name: str) -> None:
    peft = {"r": 4, "alpha": 8.0, **({"modules_to_save": ["classifier"]} if name == "bert" else {})}
    config = _config(*FAMILIES[name], peft=peft)
    state, run_loss = _trained(config, tmp_path / "run")
    out = export_model(config, state, tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors", "collapipe.json"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "base").is_dir() == (name != "builtin")  # a random transformers base ships with it
    with safe_open(str(out / "adapter_model.safetensors"), "pt") as saved:
        names = list(saved.keys())
        assert names and all("lora_" in key or "classifier" in key for key in names)  # the adapter only
        assert any(
            float(saved.get_tensor(key).abs().max()) > 0 for key in names if "lora_B" in key
        )  # trained
    adapted = _adapted_with_peft(config, out)
    assert abs(_eval_loss(adapted, config) - run_loss) <= TOLERANCE
    assert abs(_eval_loss(load_model(out), config) - run_loss) <= TOLERANCE  # CollaPipe's loader agrees
    assert _saved_bytes(out) == weight_bytes(config, load_dataset(config), None)

    merged_dir = export_model(config, state, tmp_path / "merged", merge_adapter=True)
    assert not (merged_dir / "adapter_config.json").exists()
    assert _saved_bytes(merged_dir) == weight_bytes(config, load_dataset(config), None, merge_adapter=True)
    merged = load_model(merged_dir) if name == "builtin" else _from_pretrained(config, merged_dir)
    assert abs(_eval_loss(merged, config) - run_loss) <= TOLERANCE
    torch.testing.assert_close(_logits(merged, config), _logits(adapted, config), rtol=0.0, atol=1e-5)


@pytest.mark.filterwarnings(PEFT_ON_TRANSFORMERS)
def test_an_adapter_of_a_pretrained_model_names_its_base_and_loads_onto_it(tmp_path: Path) -> None:
    path = _pretrained_gpt2(tmp_path / "gpt2")
    config = _config(
        {"source": "transformers", "architecture": "gpt2", "pretrained_path": path, "seq_len": 16},
        {**TEXT, "tokenizer": {"kind": "pretrained"}},
        peft={"r": 2},
    )
    state, run_loss = _trained(config, tmp_path / "run")
    out = export_model(config, state, tmp_path / "adapter")
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == path
    assert not (out / "base").exists()  # the base is the user's checkpoint
    assert abs(_eval_loss(_adapted_with_peft(config, out, base=path), config) - run_loss) <= TOLERANCE
    assert abs(_eval_loss(load_model(out, base=path), config) - run_loss) <= TOLERANCE
    with pytest.raises(ValueError, match="pass that checkpoint's directory as base"):
        load_model(out)


def test_an_export_loads_where_the_runs_data_files_are_not(tmp_path: Path) -> None:
    """A model trained on a server's files loads on a machine that has only the download."""
    train = tmp_path / "texts.jsonl"
    rows = [{"text": f"sample {i} says {'yes' if i % 2 else 'no'}", "label": i % 2} for i in range(60)]
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    model = {"kind": "classifier", "num_heads": 2, "seq_len": 8}
    data = {
        "dataset": "files",
        "files": {"train": str(train)},
        "tokenizer": {"kind": "wordpiece", "vocab_size": 64},
    }
    config = _config(model, data)
    state, _ = _trained(config, tmp_path / "run")
    out = export_model(config, state, tmp_path / "model")
    bundle = load_dataset(config, Workspace.local())
    expected = _logits(_trained_model(config, state), config, bundle)  # the run's own model
    train.unlink()
    assert read_metadata(out).config == config
    torch.testing.assert_close(_logits(load_model(out), config, bundle), expected)


def test_an_analytic_run_has_no_model_to_export(tmp_path: Path) -> None:
    config = _config(*FAMILIES["builtin"]).model_copy(update={"executor": "analytic"})
    with pytest.raises(NothingToExport, match="analytic executor trains no weights"):
        export_model(config, {}, tmp_path / "model")
    assert not (tmp_path / "model").exists()
