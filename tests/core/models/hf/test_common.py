"""hf_config pass-through and refusals; masks; the split model's buffers across dtype changes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from collapipe_core.models import build_model
from collapipe_core.models.hf import HfSplitModel
from collapipe_core.models.hf.common import bidirectional_mask, causal_mask
from tests.core.models.hf.tiny import VOCAB, hf_config, num_outputs


def build(architecture: str, **hf: Any) -> HfSplitModel:
    cfg = hf_config(architecture, hf_config=hf)
    model = build_model(cfg, VOCAB, num_outputs(architecture), seed=0, pad_id=0)
    assert isinstance(model, HfSplitModel)
    return model


def test_further_fields_of_the_config_class_pass_unchanged() -> None:
    assert build("bert", layer_norm_eps=1e-5, hidden_act="relu").hf_model.config.layer_norm_eps == 1e-5
    assert build("llama", rope_theta=5000.0).hf_model.config.rope_parameters["rope_theta"] == 5000.0
    untied = build("gpt2", tie_word_embeddings=False)
    assert untied.embedding.wte.weight is not untied.head.lm_head.weight
    tied = build("gpt2")
    assert tied.embedding.wte.weight is tied.head.lm_head.weight


@pytest.mark.parametrize(
    ("architecture", "key", "value", "message"),
    [
        ("gpt2", "rope_theta", 1.0, "model.hf_config.rope_theta: GPT2Config has no field 'rope_theta'"),
        ("bert", "trust_remote_code", True, "model.hf_config.trust_remote_code: BertConfig has no field"),
        ("gpt2", "n_embd", 32, r"model.hf_config.n_embd is set by CollaPipe from model.d_model; set that"),
        (
            "llama",
            "num_key_value_heads",
            1,
            r"model.hf_config.num_key_value_heads is set by .* model.num_kv_heads",
        ),
        (
            "bart",
            "decoder_layers",
            1,
            r"model.hf_config.decoder_layers is set by .* model.num_decoder_layers",
        ),
        ("bart", "attention_dropout", 0.5, r"model.hf_config.attention_dropout is set by .* model.dropout"),
        ("bart", "encoder_layerdrop", 0.1, r"model.hf_config.encoder_layerdrop is set by .* every layer"),
        ("bert", "num_labels", 7, r"model.hf_config.num_labels is set by .* the dataset's classes"),
        ("bert", "pad_token_id", 3, r"model.hf_config.pad_token_id is set by .* the data's pad_id"),
        (
            "llama",
            "use_cache",
            True,
            r"model.hf_config.use_cache is set by CollaPipe from stages keep no cache",
        ),
        (
            "gpt2",
            "return_dict",
            False,
            "model.hf_config.return_dict cannot be set: stages return plain tensors",
        ),
        ("bert", "is_decoder", True, "model.hf_config.is_decoder cannot be set: the architecture decides it"),
    ],
)
def test_keys_that_are_not_fields_or_that_collapipe_sets_are_refused(
    architecture: str, key: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(architecture, **{key: value})


def test_private_keys_are_refused_even_past_the_config_schema() -> None:
    # the config schema already refuses keys starting with "_"; the builder refuses them on its own too
    cfg = hf_config("gpt2").model_copy(update={"hf_config": {"_attn_implementation": "eager"}})
    with pytest.raises(ValueError, match=r"model\.hf_config\._attn_implementation: private config"):
        build_model(cfg, VOCAB, VOCAB, seed=0, pad_id=0)


def test_a_value_the_config_class_refuses_is_reported_as_the_model_s() -> None:
    with pytest.raises(ValueError, match=r"model \(llama\): LlamaConfig refused the configuration"):
        build("llama", head_dim="wide")


def test_masks_let_queries_see_the_real_keys_and_causal_ones_only_the_past() -> None:
    src_mask = torch.tensor([[True, True, False], [True, True, True]])
    bidirectional = bidirectional_mask(src_mask)
    assert bidirectional.shape == (2, 1, 3, 3)
    assert bidirectional[0, 0].tolist() == [[True, True, False]] * 3
    assert bidirectional_mask(src_mask, num_queries=4).shape == (2, 1, 4, 3)
    causal = causal_mask(src_mask)
    assert causal[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert causal[1, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_bart_s_logits_bias_stays_one_tensor_with_the_transformers_model_after_dtype_changes() -> None:
    model = build("bart").double()
    assert model.head.final_logits_bias.dtype == torch.float64
    assert model.hf_model.final_logits_bias is model.head.final_logits_bias
    assert "head.final_logits_bias" in model.state_dict()
