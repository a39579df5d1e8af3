"""Building Hugging Face families: seeded, config-driven, sdpa, and as a meta-device skeleton."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from collapipe_core.config import ModelConfig
from collapipe_core.models import Seq2SeqTransformer, build_model, build_skeleton
from collapipe_core.models.hf import ATTN_IMPLEMENTATION, HfSplitModel
from tests.core.models.hf.tiny import ARCHITECTURES, VOCAB, hf_config, num_outputs


def build(architecture: str, seed: int = 7, **overrides: object) -> HfSplitModel:
    model = build_model(
        hf_config(architecture, **overrides), VOCAB, num_outputs(architecture), seed, pad_id=0
    )
    assert isinstance(model, HfSplitModel)
    return model


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_same_seed_gives_bitwise_identical_weights_and_leaves_the_global_rng(architecture: str) -> None:
    before = torch.get_rng_state()
    a, b = build(architecture).state_dict(), build(architecture).state_dict()
    assert torch.equal(torch.get_rng_state(), before)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = build(architecture, seed=8).state_dict()
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_split_model_is_a_trainable_float32_model_in_training_mode(architecture: str) -> None:
    model = build(architecture)
    assert model.kind == {"bert": "classifier", "bart": "seq2seq"}.get(architecture, "causal_lm")
    assert model.training and all(m.training for m in model.modules())
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())
    assert model.hf_model.config._attn_implementation == ATTN_IMPLEMENTATION == "sdpa"
    assert model.hf_model.config.use_cache is False
    names = list(model.state_dict())
    assert all(n.split(".")[0] in ("embedding", "blocks", "head") for n in names)
    assert len(model.blocks) == 3


def test_sizes_map_onto_each_config_class() -> None:
    bert = build("bert", dropout=0.1).hf_model.config
    assert (bert.hidden_size, bert.num_attention_heads, bert.intermediate_size) == (16, 2, 24)
    assert (bert.num_hidden_layers, bert.max_position_embeddings, bert.vocab_size) == (3, 9, VOCAB)
    assert (bert.num_labels, bert.hidden_dropout_prob, bert.attention_probs_dropout_prob) == (3, 0.1, 0.1)
    assert bert.pad_token_id == 0

    bart = build("bart").hf_model.config
    assert (bart.d_model, bart.encoder_attention_heads, bart.decoder_attention_heads) == (16, 2, 2)
    assert (bart.encoder_ffn_dim, bart.decoder_ffn_dim, bart.encoder_layers, bart.decoder_layers) == (
        24,
        24,
        3,
        2,
    )
    assert bart.max_position_embeddings == 11  # max(seq_len 9, target_len 11)
    assert (bart.encoder_layerdrop, bart.decoder_layerdrop) == (0.0, 0.0)

    gpt2 = build("gpt2").hf_model.config
    assert (gpt2.n_embd, gpt2.n_head, gpt2.n_inner, gpt2.n_layer, gpt2.n_positions) == (16, 2, 24, 3, 9)

    llama = build("llama").hf_model.config
    assert (llama.hidden_size, llama.num_attention_heads, llama.num_key_value_heads) == (16, 4, 2)
    assert (llama.intermediate_size, llama.num_hidden_layers, llama.vocab_size) == (24, 3, VOCAB)


def test_the_target_vocabulary_widens_the_shared_vocabulary() -> None:
    model = build_model(hf_config("gpt2"), 20, 25, seed=0, pad_id=0)
    assert model.embedding.wte.num_embeddings == 25


def test_a_vocabulary_smaller_than_the_data_s_is_refused() -> None:
    with pytest.raises(ValueError, match=r"vocabulary \(29 ids\) does not fit the model's 10-row embedding"):
        build("llama", vocab_size=10)


def test_build_model_dispatches_on_the_source() -> None:
    builtin = ModelConfig(kind="seq2seq", d_model=16, num_heads=2, ffn_dim=24, num_blocks=2, seq_len=9)
    assert isinstance(build_model(builtin, VOCAB, VOCAB, seed=0), Seq2SeqTransformer)
    assert isinstance(build("gpt2"), HfSplitModel)


def test_importing_the_models_or_building_a_builtin_one_does_not_import_transformers() -> None:
    code = (
        "import sys\n"
        "from collapipe_core.config import ModelConfig\n"
        "from collapipe_core.models import build_model, build_skeleton\n"
        "import collapipe_core.models.hf, collapipe_core.pipeline.split\n"
        "build_model(ModelConfig(d_model=16, num_heads=2, num_blocks=2), 13, 11, seed=0)\n"
        "build_skeleton(ModelConfig(kind='classifier', d_model=16, num_heads=2), 13, 3)\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_the_skeleton_is_the_model_on_meta_and_runs_for_flop_counting(architecture: str) -> None:
    cfg = hf_config(architecture)
    model = build(architecture)
    skeleton = build_skeleton(cfg, VOCAB, num_outputs(architecture), pad_id=0)
    expected = {name: t.shape for name, t in model.state_dict().items()}
    assert {name: t.shape for name, t in skeleton.state_dict().items()} == expected
    assert all(p.is_meta for p in skeleton.parameters())

    src = torch.ones(2, cfg.seq_len, dtype=torch.long, device="meta")
    mask = torch.ones(2, cfg.seq_len, dtype=torch.bool, device="meta")
    dec_in = (
        torch.ones(2, cfg.target_len, dtype=torch.long, device="meta") if model.kind == "seq2seq" else None
    )
    with FlopCounterMode(display=False) as counter:
        logits = skeleton(src, mask, dec_in)
    assert logits.is_meta
    assert counter.get_total_flops() > 0


def test_a_llama_2_7b_shaped_skeleton_allocates_nothing() -> None:
    cfg = hf_config(
        "llama",
        d_model=4096,
        num_heads=32,
        num_kv_heads=None,
        ffn_dim=11008,
        num_blocks=32,
        seq_len=4096,
        vocab_size=32000,
    )
    skeleton = build_skeleton(cfg, 32000, 32000, pad_id=0)
    assert all(t.is_meta for t in skeleton.state_dict().values())
    assert sum(p.numel() for p in skeleton.parameters()) == 6_738_415_616  # LLaMA-2-7B
