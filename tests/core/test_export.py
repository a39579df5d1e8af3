"""Exported models load back — with transformers' ``from_pretrained`` (local files only) for the Hugging
Face families, with CollaPipe's builder for the builtin ones — and evaluate, through CollaPipe's own
evaluation (token-weighted, masks), to the run's last eval loss; the run's tokenizer comes with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from collapipe_core.checkpoint import load_checkpoint
from collapipe_core.config import ExperimentConfig
from collapipe_core.data import load_dataset
from collapipe_core.export import NothingToExport, export_model, load_model, read_metadata
from collapipe_core.models import EncoderStackModel
from collapipe_core.models.hf import family
from collapipe_core.pipeline.quality import evaluate_model
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.validation import parse_config
from collapipe_core.workspace import Workspace
from tests.core.builders import tiny_config

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


def _config(model: dict[str, Any], data: dict[str, Any], **top: Any) -> ExperimentConfig:
    return parse_config(
        {
            "seed": 3,
            "executor": "simulated",
            "network": {"num_clusters": 2, "devices_per_cluster": 2},
            "model": {**SMALL, **model},
            "data": {"samples_per_cluster": 16, "eval_samples": 16, **data},
            "training": {"rounds": 1, "local_iterations": 2, "microbatch_size": 4, "lr": 0.02},
            "scheduler": {"policy": "uniform", "num_microbatches": 2, "max_microbatches": 2},
            **top,
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
    initial = read_metadata(out).build(seed=config.seed).state_dict()  # the run's initial weights
    trained = loaded.state_dict()
    moved = max(float((trained[k] - v).abs().max()) for k, v in initial.items() if v.is_floating_point())
    assert moved > 1e-3  # the export holds the trained weights, not the initial ones
    if config.data.dataset == "pydoc-topics":  # texts, encoded by the tokenizer the run trained
        _check_tokenizer(config, out)
    else:
        _check_character_vocabulary(config, out)


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


def test_an_analytic_run_has_no_model_to_export(tmp_path: Path) -> None:
    config = tiny_config(executor="analytic")
    with pytest.raises(NothingToExport, match="analytic executor trains no weights"):
        export_model(config, {}, tmp_path / "model")
    assert not (tmp_path / "model").exists()
