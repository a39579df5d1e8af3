"""A model with LoRA adapters, split into CU | devices | edge server, trains as the unsplit peft model.

For the builtin seq2seq and classifier and bert, bart, gpt2, llama, with and without activation
recomputation on the devices: the split model (adapters injected before the split, float64, dropout 0)
runs a batch with uneven padding through ``accumulate_microbatches`` in M = 3 micro-batches; the loss and
every trainable gradient must equal those of ``peft.get_peft_model`` over the same base (the real
PeftModel, its weights loaded by name from the split model's transformers model), rtol 1e-5. An AdamW
step then changes the adapters and leaves every frozen weight bit for bit. In bf16 the stages cast what
crosses their boundaries to bf16, and the adapters, their gradients and AdamW's state stay fp32.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from collapipe_core.config import ModelConfig, PeftConfig
from collapipe_core.models import EncoderStackModel, build_model, loss_for
from collapipe_core.models.peft import lora_config
from collapipe_core.pipeline.split import accumulate_microbatches, split_model

VOCAB, NUM_CLASSES, PAD, BOS = 37, 3, 0, 1
SEQ_LEN, TARGET_LEN, BATCH, MICROBATCHES = 9, 6, 6, 3
SEGMENTS = [2, 0, 1, 1]  # 4 blocks, unequal, device 1 holds none
RECOMPUTE = [True, False, True, False]  # with recomputation: devices 0 and 2 recompute
PEFT = PeftConfig(r=4, alpha=6.0)
SIZES: dict[str, dict[str, Any]] = {
    "builtin-seq2seq": {"kind": "seq2seq", "num_heads": 2, "num_decoder_layers": 2, "target_len": TARGET_LEN},
    "builtin-classifier": {"kind": "classifier", "num_heads": 2},
    "bert": {"num_heads": 2},
    "bart": {"num_heads": 2, "num_decoder_layers": 2, "target_len": TARGET_LEN},
    "gpt2": {"num_heads": 2},
    "llama": {"num_heads": 4, "num_kv_heads": 2},
}


def model_config(family: str) -> ModelConfig:
    fields: dict[str, Any] = {
        "d_model": 16,
        "ffn_dim": 24,
        "num_blocks": sum(SEGMENTS),
        "seq_len": SEQ_LEN,
        "dropout": 0.0,
        **SIZES[family],
    }
    if not family.startswith("builtin"):
        fields.update(source="transformers", architecture=family)
    return ModelConfig.model_validate(fields)


def outputs(cfg: ModelConfig) -> int:
    return NUM_CLASSES if cfg.kind == "classifier" else VOCAB


def build(family: str, peft: PeftConfig | None, precision: str = "fp32") -> EncoderStackModel:
    cfg = model_config(family)
    return build_model(
        cfg, VOCAB, outputs(cfg), seed=5, pad_id=PAD, bos_id=BOS, eos_id=2, peft=peft, precision=precision
    )


def make_batch(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, src_mask, tgt) with uneven right padding; every micro-batch of 2 pads differently."""
    g = torch.Generator().manual_seed(11)
    lengths = torch.tensor([9, 2, 5, 8, 3, 7])
    src_mask = torch.arange(SEQ_LEN)[None, :] < lengths[:, None]
    src = torch.randint(3, VOCAB, (BATCH, SEQ_LEN), generator=g).masked_fill(~src_mask, PAD)
    if kind == "classifier":
        return src, src_mask, torch.randint(0, NUM_CLASSES, (BATCH,), generator=g)
    if kind == "causal_lm":
        return src, src_mask, F.pad(src[:, 1:], (0, 1), value=PAD)
    tgt_lengths = torch.tensor([2, 7, 4, 3, 6, 5])
    tgt = torch.randint(3, VOCAB, (BATCH, TARGET_LEN + 1), generator=g)
    tgt[:, 0] = BOS
    return src, src_mask, tgt.masked_fill(torch.arange(TARGET_LEN + 1)[None, :] >= tgt_lengths[:, None], PAD)


def perturb_adapters(model: EncoderStackModel) -> None:
    """Random adapters: LoRA's B starts at zero, which would make A's gradient zero (and vacuous)."""
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.3)


def reference(family: str, model: EncoderStackModel) -> tuple[Any, dict[int, str]]:
    """``peft.get_peft_model`` of the same base with the split model's weights loaded by name, and the
    split model's trainable parameters (by id) -> their names in that PeftModel."""
    from peft import get_peft_model

    base = build(family, None).double()
    root = base if family.startswith("builtin") else base.hf_model  # type: ignore[attr-defined]
    split_root = model if family.startswith("builtin") else model.hf_model  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        peft_model = get_peft_model(root, lora_config(PEFT, model_config(family)))
    missing, unexpected = peft_model.base_model.model.load_state_dict(split_root.state_dict(), strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)  # lm_head: tied
    names = {id(p): f"base_model.model.{name}" for name, p in split_root.named_parameters()}
    return peft_model, names


def reference_loss(
    family: str, peft_model: Any, src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor
) -> Any:
    kind = model_config(family).kind
    dec_in = tgt[:, :-1] if kind == "seq2seq" else None
    labels = tgt[:, 1:] if kind == "seq2seq" else tgt
    if family.startswith("builtin"):
        logits = peft_model(src, mask, dec_in)
    elif kind == "seq2seq":
        logits = peft_model(
            input_ids=src, attention_mask=mask, decoder_input_ids=dec_in, use_cache=False
        ).logits
    elif kind == "causal_lm":
        logits = peft_model(input_ids=src, attention_mask=mask, use_cache=False).logits
    else:
        logits = peft_model(input_ids=src, attention_mask=mask).logits
    return loss_for(kind, pad_id=PAD).mean(logits, labels)


@pytest.mark.parametrize("recompute", [False, True], ids=["stored", "recomputed"])
@pytest.mark.parametrize("family", list(SIZES))
def test_split_lora_step_equals_the_peft_model_and_leaves_the_base_untouched(
    family: str, recompute: bool
) -> None:
    model = build(family, PEFT).double()
    perturb_adapters(model)
    src, mask, tgt = make_batch(model.kind)

    peft_model, names = reference(family, model)
    expected_loss = reference_loss(family, peft_model, src, mask, tgt)
    expected_loss.backward()
    expected = {n: p.grad for n, p in peft_model.named_parameters() if p.requires_grad}

    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    stages = split_model(model, SEGMENTS, recompute=RECOMPUTE if recompute else None)
    loss = accumulate_microbatches(stages, loss_for(model.kind, pad_id=PAD), src, mask, tgt, MICROBATCHES)
    assert loss == pytest.approx(expected_loss.item(), rel=1e-5)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert len(trainable) == len(expected) > 0
    for name, p in trainable.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, name
        torch.testing.assert_close(p.grad, expected[names[id(p)]], rtol=1e-5, atol=1e-9, msg=name)
    for p in frozen:
        assert model.get_parameter(p).grad is None, p  # backward computes no weight gradient for them

    adapters = {n: p.detach().clone() for n, p in trainable.items()}
    torch.optim.AdamW(list(trainable.values()), lr=0.1, weight_decay=0.1).step()
    for name, before in frozen.items():
        assert torch.equal(model.get_parameter(name), before), name
    assert all(not torch.equal(trainable[n], before) for n, before in adapters.items())


def test_reentrant_checkpointing_would_drop_the_adapters_gradients() -> None:
    # why the segments use use_reentrant=False: the first block's input (a frozen embedding's output)
    # does not require grad, and reentrant checkpointing then builds no graph through the block
    from torch.utils.checkpoint import checkpoint

    model = build("llama", PEFT).double()
    perturb_adapters(model)
    src, mask, _ = make_batch("causal_lm")
    h = model.embedding(src)
    assert not h.requires_grad
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = checkpoint(model.blocks[0], h, mask, use_reentrant=True)
    assert not out.requires_grad  # nothing to backpropagate: the adapters would get no gradient
    out = checkpoint(model.blocks[0], h, mask, use_reentrant=False)
    out.sum().backward()
    assert all(p.grad is not None for n, p in model.blocks[0].named_parameters() if p.requires_grad)


@pytest.mark.parametrize("family", ["builtin-seq2seq", "gpt2"])
def test_bf16_casts_the_boundaries_and_keeps_what_trains_in_fp32(family: str) -> None:
    model = build(family, PEFT, precision="bf16")
    perturb_adapters(model)
    src, mask, tgt = make_batch(model.kind)
    stages = split_model(model, SEGMENTS, recompute=RECOMPUTE, precision="bf16")
    h = stages.embedding(src)
    assert h.dtype == torch.bfloat16
    for segment in stages.segments:
        h = segment(h, src_mask=mask)
        assert h.dtype == torch.bfloat16
    dec_in = tgt[:, :-1] if model.kind == "seq2seq" else None
    assert stages.head(h, src_mask=mask, dec_in=dec_in).dtype == torch.float32  # the loss in fp32
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.01)
    loss = accumulate_microbatches(stages, loss_for(model.kind, pad_id=PAD), src, mask, tgt, MICROBATCHES)
    assert loss > 0
    optimizer.step()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32, name
            assert all(t.dtype == torch.float32 for t in optimizer.state[p].values() if t.dim()), name
        else:
            assert p.dtype == torch.bfloat16 and p.grad is None, name
