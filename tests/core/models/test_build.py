"""build_model: deterministic, seeded without the global RNG, config-driven sizes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from collapipe_core.config import ModelConfig
from collapipe_core.models import (
    INIT_STD,
    EncoderClassifier,
    Seq2SeqTransformer,
    build_model,
    build_skeleton,
)

SRC_VOCAB = 13
TGT_VOCAB = 11
NUM_CLASSES = 5


@pytest.fixture(params=["seq2seq", "classifier"])
def cfg(request: pytest.FixtureRequest, seq2seq_cfg: ModelConfig, classifier_cfg: ModelConfig) -> ModelConfig:
    return seq2seq_cfg if request.param == "seq2seq" else classifier_cfg


def tgt_size(cfg: ModelConfig) -> int:
    return TGT_VOCAB if cfg.kind == "seq2seq" else NUM_CLASSES


def test_same_seed_gives_bitwise_identical_weights(cfg: ModelConfig) -> None:
    a = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7).state_dict()
    b = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_different_seeds_give_different_weights(cfg: ModelConfig) -> None:
    a = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7).state_dict()
    b = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=8).state_dict()
    assert not torch.equal(a["blocks.0.qkv.weight"], b["blocks.0.qkv.weight"])
    assert not torch.equal(a["embedding.tok.weight"], b["embedding.tok.weight"])


def test_the_global_rng_is_left_alone(cfg: ModelConfig) -> None:
    before = torch.get_rng_state()
    build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7)
    assert torch.equal(torch.get_rng_state(), before)


def test_weights_follow_the_initialisation_scheme(cfg: ModelConfig) -> None:
    model = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7)
    for module in model.modules():
        if isinstance(module, nn.Linear):
            assert torch.all(module.bias == 0)
            assert abs(module.weight.std().item() - INIT_STD) < 0.5 * INIT_STD
        elif isinstance(module, nn.LayerNorm):
            assert torch.all(module.weight == 1) and torch.all(module.bias == 0)
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def test_model_kind_selects_the_class(seq2seq_cfg: ModelConfig, classifier_cfg: ModelConfig) -> None:
    assert isinstance(build_model(seq2seq_cfg, SRC_VOCAB, TGT_VOCAB, seed=0), Seq2SeqTransformer)
    classifier = build_model(classifier_cfg, SRC_VOCAB, NUM_CLASSES, seed=0)
    assert isinstance(classifier, EncoderClassifier)
    assert classifier.head.classifier.out_features == NUM_CLASSES


def test_config_vocab_size_overrides_the_tokenizer_size(seq2seq_cfg: ModelConfig) -> None:
    cfg = seq2seq_cfg.model_copy(update={"vocab_size": 40})
    model = build_model(cfg, SRC_VOCAB, TGT_VOCAB, seed=0)
    assert model.embedding.tok.num_embeddings == 40
    assert build_model(seq2seq_cfg, SRC_VOCAB, TGT_VOCAB, seed=0).embedding.tok.num_embeddings == SRC_VOCAB


def test_the_skeleton_has_the_model_s_names_and_shapes_on_meta(cfg: ModelConfig) -> None:
    model = build_model(cfg, SRC_VOCAB, tgt_size(cfg), seed=7)
    skeleton = build_skeleton(cfg, SRC_VOCAB, tgt_size(cfg))
    assert type(skeleton) is type(model)
    expected = {name: p.shape for name, p in model.state_dict().items()}
    assert {name: p.shape for name, p in skeleton.state_dict().items()} == expected
    assert all(p.is_meta for p in skeleton.parameters())
