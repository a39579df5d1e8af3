"""Evaluation: token-weighted eval loss, next-token accuracy and perplexity, greedy decoding of BART."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from collapipe_core.config import ModelConfig
from collapipe_core.data import Shard
from collapipe_core.models import build_model
from collapipe_core.pipeline import quality
from collapipe_core.pipeline.quality import evaluate_model

VOCAB, PAD, BOS, EOS = 23, 4, 5, 6  # special ids that are not CollaPipe's defaults


def hf_model_config(architecture: str) -> ModelConfig:
    return ModelConfig(
        source="transformers",
        architecture=architecture,  # type: ignore[arg-type]
        d_model=16,
        num_heads=2,
        ffn_dim=24,
        num_blocks=2,
        num_decoder_layers=1,
        seq_len=8,
        target_len=5,
        dropout=0.0,
    )


def padded(lengths: list[int], width: int, seed: int, first: int | None = None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(7, VOCAB, (len(lengths), width), generator=g)
    if first is not None:
        ids[:, 0] = first
    return ids.masked_fill(torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None], PAD)


def test_a_causal_lm_is_scored_per_real_next_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        quality, "EVAL_BATCH", 2
    )  # several eval batches: the loss weights tokens, not batches
    model = build_model(hf_model_config("gpt2"), VOCAB, VOCAB, seed=3, pad_id=PAD).double()
    src = padded([8, 2, 5, 3, 7], 8, seed=1)
    tgt = F.pad(src[:, 1:], (0, 1), value=PAD)
    model.train()
    eval_loss, metrics = evaluate_model(model, Shard(src=src, tgt=tgt), pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert model.training  # restored

    with torch.no_grad():
        logits = model.hf_model(input_ids=src, attention_mask=src != PAD).logits
    real = tgt != PAD
    expected = F.cross_entropy(logits[real], tgt[real]).item()
    assert eval_loss == pytest.approx(expected, rel=1e-9)
    assert set(metrics) == {"eval_accuracy", "eval_perplexity"}
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(expected), rel=1e-9)
    assert metrics["eval_accuracy"] == (logits[real].argmax(-1) == tgt[real]).double().mean().item()


def test_bart_decodes_greedily_through_its_parts() -> None:
    model = build_model(
        hf_model_config("bart"), VOCAB, VOCAB, seed=3, pad_id=PAD, bos_id=BOS, eos_id=EOS
    ).double()
    src = padded([8, 3, 6], 8, seed=1)
    tgt = padded([3, 6, 4], 6, seed=2, first=BOS)
    eval_loss, metrics = evaluate_model(model, Shard(src=src, tgt=tgt), pad_id=PAD, bos_id=BOS, eos_id=EOS)

    hf, mask = model.hf_model, src != PAD
    with torch.no_grad():  # the reference: the whole transformers model re-run on the growing prefix
        logits = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt[:, :-1]).logits
        dec = torch.full((3, 1), BOS)
        for _ in range(5):
            step = hf(input_ids=src, attention_mask=mask, decoder_input_ids=dec).logits[:, -1].argmax(-1)
            dec = torch.cat([dec, step[:, None]], dim=1)
    labels = tgt[:, 1:]
    real = labels != PAD
    assert eval_loss == pytest.approx(F.cross_entropy(logits[real], labels[real]).item(), rel=1e-9)

    def strip(ids: list[int]) -> list[int]:
        out = ids[: ids.index(EOS)] if EOS in ids else ids
        return [t for t in out if t not in (PAD, BOS)]

    edits = sum(
        quality.edit_distance(strip(h), strip(r))
        for h, r in zip(dec[:, 1:].tolist(), labels.tolist(), strict=True)
    )
    assert metrics["eval_error_rate"] == edits / sum(len(strip(r)) for r in labels.tolist())
    assert metrics["eval_accuracy"] == (logits[real].argmax(-1) == labels[real]).double().mean().item()


def test_a_classifier_counts_class_zero_even_when_it_is_the_pad_id() -> None:
    cfg = ModelConfig(kind="classifier", d_model=16, num_heads=2, ffn_dim=24, num_blocks=2, seq_len=8)
    model = build_model(cfg, VOCAB, 3, seed=0)
    src = padded([8, 3, 6, 2], 8, seed=1, first=BOS)
    src = src.masked_fill(src == PAD, 0)  # this data pads with 0, the id of class 0
    tgt = torch.tensor([0, 2, 0, 1])
    eval_loss, metrics = evaluate_model(model, Shard(src=src, tgt=tgt), pad_id=0)
    with torch.no_grad():
        logits = model(src, src != 0)
    assert eval_loss == pytest.approx(F.cross_entropy(logits, tgt).item(), rel=1e-6)
    assert metrics == {"eval_accuracy": (logits.argmax(-1) == tgt).double().mean().item()}
