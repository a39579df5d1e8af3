"""Hugging Face families split into CU | devices | edge server train exactly as the unsplit model.

For bert, bart, gpt2 and llama: the model is cut by an unequal segment vector with an empty device, a
batch with uneven source and target padding runs through ``accumulate_microbatches`` in M = 3
micro-batches, and the loss and every parameter's gradient must equal the transformers model's own
(the real class called normally on the whole batch) under the token-sum loss over the whole batch.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from collapipe_core.config import ModelConfig
from collapipe_core.models import EncoderStackModel, build_model, loss_for
from collapipe_core.pipeline.split import accumulate_microbatches, split_model, tied_parameter_names

VOCAB, NUM_CLASSES, PAD, BOS = 37, 3, 0, 1
SEQ_LEN, TARGET_LEN, BATCH, MICROBATCHES = 9, 6, 6, 3
SEGMENTS = [2, 0, 1, 1]  # 4 blocks, unequal, device 1 holds none
SIZES: dict[str, dict[str, Any]] = {
    "bert": {"num_heads": 2},
    "bart": {"num_heads": 2, "num_decoder_layers": 2, "target_len": TARGET_LEN},
    "gpt2": {"num_heads": 2},
    "llama": {"num_heads": 4, "num_kv_heads": 2},
}
TIED = {  # the parameter the CU and the edge server share, by its names in the two stages
    "bert": [],
    "bart": [("embedding.embed_tokens.weight", "head.decoder.embed_tokens.weight")],
    "gpt2": [("embedding.wte.weight", "head.lm_head.weight")],
    "llama": [],
}


def make_model(architecture: str, **hf_config: Any) -> EncoderStackModel:
    cfg = ModelConfig(
        source="transformers",
        architecture=architecture,  # type: ignore[arg-type]
        d_model=16,
        ffn_dim=24,
        num_blocks=sum(SEGMENTS),
        seq_len=SEQ_LEN,
        dropout=0.0,
        hf_config=hf_config,
        **SIZES[architecture],
    )
    outputs = NUM_CLASSES if architecture == "bert" else VOCAB
    return build_model(cfg, VOCAB, outputs, seed=5, pad_id=PAD, bos_id=BOS, eos_id=2).double()


def make_batch(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, src_mask, tgt) with uneven right padding; every micro-batch of 2 pads differently."""
    g = torch.Generator().manual_seed(11)
    lengths = torch.tensor([9, 2, 5, 8, 3, 7])
    src_mask = torch.arange(SEQ_LEN)[None, :] < lengths[:, None]
    src = torch.randint(3, VOCAB, (BATCH, SEQ_LEN), generator=g).masked_fill(~src_mask, PAD)
    if kind == "classifier":
        return src, src_mask, torch.randint(0, NUM_CLASSES, (BATCH,), generator=g)
    if kind == "causal_lm":  # the next source token, PAD after the last one
        return src, src_mask, F.pad(src[:, 1:], (0, 1), value=PAD)
    tgt_lengths = torch.tensor([2, 7, 4, 3, 6, 5])
    tgt = torch.randint(3, VOCAB, (BATCH, TARGET_LEN + 1), generator=g)
    tgt[:, 0] = BOS
    tgt = tgt.masked_fill(torch.arange(TARGET_LEN + 1)[None, :] >= tgt_lengths[:, None], PAD)
    return src, src_mask, tgt


def hf_reference(model: EncoderStackModel, src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor) -> Any:
    """(logits, loss) of the transformers model itself on the whole batch, token-sum / count loss."""
    hf = model.hf_model  # type: ignore[attr-defined]
    if model.kind == "seq2seq":
        logits = hf(input_ids=src, attention_mask=mask, decoder_input_ids=tgt[:, :-1], use_cache=False).logits
        labels = tgt[:, 1:]
    elif model.kind == "causal_lm":
        logits, labels = hf(input_ids=src, attention_mask=mask, use_cache=False).logits, tgt
    else:
        logits, labels = hf(input_ids=src, attention_mask=mask).logits, tgt
        return logits, F.cross_entropy(logits, labels, reduction="sum") / len(labels)
    real = labels != PAD
    return logits, F.cross_entropy(logits[real], labels[real], reduction="sum") / real.sum()


@pytest.mark.parametrize("architecture", list(SIZES))
def test_split_training_step_equals_the_transformers_model(architecture: str) -> None:
    model = make_model(architecture)
    src, mask, tgt = make_batch(model.kind)
    hf = model.hf_model  # type: ignore[attr-defined]
    assert {id(p) for p in hf.parameters()} == {id(p) for p in model.parameters()}  # the same tensors

    logits, expected_loss = hf_reference(model, src, mask, tgt)
    expected_loss.backward()
    expected = {id(p): p.grad.clone() for p in model.parameters() if p.grad is not None}
    assert len(expected) == len(list(model.parameters()))
    model.zero_grad(set_to_none=True)

    dec_in = tgt[:, :-1] if model.kind == "seq2seq" else None
    torch.testing.assert_close(model(src, mask, dec_in), logits, rtol=1e-5, atol=1e-6)
    stages = split_model(model, SEGMENTS)
    loss = accumulate_microbatches(stages, loss_for(model.kind, pad_id=PAD), src, mask, tgt, MICROBATCHES)
    assert loss == pytest.approx(expected_loss.item(), rel=1e-5, abs=1e-6)
    for name, p in model.named_parameters():  # each tensor once: a tied one under its first name
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, expected[id(p)], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("architecture", list(SIZES))
def test_the_three_parts_hold_every_parameter_once(architecture: str) -> None:
    model = make_model(architecture)
    stages = split_model(model, SEGMENTS)
    assert tied_parameter_names(stages) == TIED[architecture]
    seen: set[int] = set()
    counts = []
    for part in (stages.embedding, stages.segments, stages.head):
        modules = part if isinstance(part, tuple) else (part,)
        fresh = {id(p): p.numel() for m in modules for p in m.parameters() if id(p) not in seen}
        seen |= set(fresh)
        counts.append(sum(fresh.values()))
    assert sum(counts) == model.hf_model.num_parameters()  # type: ignore[attr-defined]
    assert all(count > 0 for count in counts)
    assert [len(segment.blocks) for segment in stages.segments] == SEGMENTS


def test_a_tied_llama_shares_the_embedding_with_the_lm_head() -> None:
    model = make_model("llama", tie_word_embeddings=True)
    assert model.embedding.embed_tokens.weight is model.head.lm_head.weight
    assert tied_parameter_names(split_model(model, SEGMENTS)) == [
        ("embedding.embed_tokens.weight", "head.lm_head.weight")
    ]


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_stage_inputs_are_plain_tensors_with_contiguous_gradients(architecture: str) -> None:
    # what torch.distributed.pipelining sends between ranks (gloo refuses non-contiguous buffers)
    model = make_model(architecture)
    src, mask, _ = make_batch(model.kind)
    stages = split_model(model, [2, 2])
    h0 = stages.embedding(src).detach().requires_grad_()
    h1 = stages.segments[0](h0, src_mask=mask).detach().requires_grad_()
    h2 = stages.segments[1](h1, src_mask=mask).detach().requires_grad_()
    logits = stages.head(h2, src_mask=mask)
    assert type(logits) is torch.Tensor and logits.shape == (BATCH, SEQ_LEN, VOCAB)
    logits.sum().backward()
    stages.segments[1](h1, src_mask=mask).backward(h2.grad)
    stages.segments[0](h0, src_mask=mask).backward(h1.grad)
    for h in (h0, h1, h2):
        assert h.grad is not None and h.grad.is_contiguous()
