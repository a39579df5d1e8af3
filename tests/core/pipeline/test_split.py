"""Splitting a model into pipeline stages: plan, shared parameters, equal forward/gradients, micro-batches."""

from __future__ import annotations

import pytest
import torch

from collapipe_core.config import ModelConfig
from collapipe_core.models import EncoderStackModel, build_model, loss_for
from collapipe_core.pipeline.split import (
    accumulate_microbatches,
    split_model,
    stage_param_names,
)

SRC_VOCAB, TGT_VOCAB, NUM_CLASSES = 13, 11, 5
SEQ_LEN, TARGET_LEN, BATCH = 10, 6, 8
SEGMENT_VECTORS = [[2, 0, 3, 1], [0, 0, 6, 0], [1, 1, 1, 1, 1, 1], [6]]
KINDS = ["seq2seq", "classifier"]


def make_model(kind: str) -> EncoderStackModel:
    cfg = ModelConfig(
        kind=kind,
        d_model=16,
        num_heads=2,
        ffn_dim=24,
        num_encoder_blocks=6,
        num_decoder_layers=1,
        seq_len=SEQ_LEN,
        target_len=TARGET_LEN,
        dropout=0.0,
    )
    return build_model(cfg, SRC_VOCAB, TGT_VOCAB if kind == "seq2seq" else NUM_CLASSES, seed=3).double()


def make_batch(kind: str, seed: int, pad_targets: bool = False) -> tuple[torch.Tensor, ...]:
    """(src, src_mask, tgt): padded sources; tgt (B, T+1) token ids for seq2seq, (B,) classes otherwise."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, SEQ_LEN + 1, (BATCH,), generator=g)
    src_mask = torch.arange(SEQ_LEN)[None, :] < lengths[:, None]
    src = torch.randint(1, SRC_VOCAB, (BATCH, SEQ_LEN), generator=g).masked_fill(~src_mask, 0)
    if kind == "classifier":
        return src, src_mask, torch.randint(0, NUM_CLASSES, (BATCH,), generator=g)
    tgt = torch.randint(1, TGT_VOCAB, (BATCH, TARGET_LEN + 1), generator=g)
    if pad_targets:  # trailing PAD, a different number of real tokens per row
        tgt_lengths = torch.arange(BATCH) % (TARGET_LEN - 1) + 2
        tgt = tgt.masked_fill(torch.arange(TARGET_LEN + 1)[None, :] >= tgt_lengths[:, None], 0)
    return src, src_mask, tgt


def full_batch_loss(
    model: EncoderStackModel, src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor
) -> torch.Tensor:
    loss = loss_for(model.kind)
    if model.kind == "seq2seq":
        return loss.mean(model(src, mask, tgt[:, :-1]), tgt[:, 1:])
    return loss.mean(model(src, mask), tgt)


def grads(model: EncoderStackModel) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        out[name] = p.grad.clone()
    return out


def assert_grads_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-5, msg=name)


# --- the plan -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_blocks", "placed"), [([2, 0, 3], 5), ([4, 4], 8), ([0, 0], 0)])
def test_split_refuses_a_vector_that_does_not_place_every_teb(num_blocks: list[int], placed: int) -> None:
    with pytest.raises(ValueError, match=rf"places {placed} TEBs but the model has 6; .* sum to"):
        split_model(make_model("classifier"), num_blocks)


# --- the stages -----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_blocks", SEGMENT_VECTORS)
def test_stages_share_the_model_parameters_and_partition_them(num_blocks: list[int]) -> None:
    model = make_model("seq2seq")
    stages = split_model(model, num_blocks)
    model_params = dict(model.named_parameters())
    seen: list[str] = []
    for stage in stages.in_order():
        for name, p in stage.named_parameters():
            assert p is model_params[name]  # same tensor object: a view of the model, not a copy
            seen.append(name)
    assert seen == list(model_params)  # every parameter exactly once, in model order

    names = stage_param_names(model, num_blocks)
    assert list(names) == ["embedding", *(f"device{k}" for k in range(len(num_blocks))), "head"]
    assert [n for stage in names.values() for n in stage] == list(model_params)
    for k, (segment, count) in enumerate(zip(stages.segments, num_blocks, strict=True)):
        assert len(segment.blocks) == count
        assert {n.split(".")[1] for n in names[f"device{k}"]} == {str(i) for i in segment.block_range}


def test_a_device_with_no_blocks_passes_the_activations_through() -> None:
    stages = split_model(make_model("classifier"), [3, 0, 3])
    empty = stages.segments[1]
    assert list(empty.parameters()) == []
    h = torch.randn(2, SEQ_LEN, 16, dtype=torch.float64)
    assert empty(h, src_mask=torch.ones(2, SEQ_LEN, dtype=torch.bool)) is h


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_blocks", SEGMENT_VECTORS)
def test_split_forward_and_gradients_equal_the_unsplit_model(kind: str, num_blocks: list[int]) -> None:
    model = make_model(kind)
    src, mask, tgt = make_batch(kind, seed=1)
    dec_in = tgt[:, :-1] if kind == "seq2seq" else None

    logits = model(src, mask, dec_in)
    full_batch_loss(model, src, mask, tgt).backward()
    expected = grads(model)
    model.zero_grad(set_to_none=True)

    stages = split_model(model, num_blocks)
    split_logits = stages.forward_chain(src, mask, dec_in)
    torch.testing.assert_close(split_logits, logits, rtol=1e-5, atol=1e-5)
    labels = tgt[:, 1:] if kind == "seq2seq" else tgt
    loss_for(kind).mean(split_logits, labels).backward()
    assert_grads_close(grads(model), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_stage_inputs_receive_contiguous_gradients(kind: str) -> None:
    # gloo refuses non-contiguous receive buffers (notes/torch-pipelining-cpu.md, pitfall 1)
    model = make_model(kind)
    src, mask, tgt = make_batch(kind, seed=1)
    stages = split_model(model, [2, 4])
    h0 = stages.embedding(src).detach().requires_grad_()
    h1 = stages.segments[0](h0, src_mask=mask).detach().requires_grad_()
    h2 = stages.segments[1](h1, src_mask=mask).detach().requires_grad_()
    dec_in = tgt[:, :-1] if kind == "seq2seq" else None
    stages.head(h2, src_mask=mask, dec_in=dec_in).sum().backward()
    stages.segments[1](h1, src_mask=mask).backward(h2.grad)
    stages.segments[0](h0, src_mask=mask).backward(h1.grad)
    for h in (h0, h1, h2):
        assert h.grad is not None and h.grad.is_contiguous()


# --- micro-batches --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_microbatches", [1, 2, 4])
@pytest.mark.parametrize("pad_targets", [False, True])
def test_microbatch_accumulation_gives_the_full_batch_gradient(
    kind: str, num_microbatches: int, pad_targets: bool
) -> None:
    model = make_model(kind)
    src, mask, tgt = make_batch(kind, seed=2, pad_targets=pad_targets)
    full_loss = full_batch_loss(model, src, mask, tgt)
    full_loss.backward()
    expected = grads(model)
    model.zero_grad(set_to_none=True)

    stages = split_model(model, [2, 0, 3, 1])
    loss = accumulate_microbatches(stages, loss_for(kind), src, mask, tgt, num_microbatches)
    assert loss == pytest.approx(full_loss.item(), rel=1e-9)
    assert_grads_close(grads(model), expected)


def test_with_target_padding_the_step_loss_weights_every_token_alike() -> None:
    # The step's loss is Σ token losses / all the step's real tokens, not the mean of micro-batch means
    # (which it was before causal LMs came: that weighted a token of a short micro-batch more). With
    # padded targets the micro-batches hold different numbers of real tokens, so the two differ.
    model = make_model("seq2seq")
    src, mask, tgt = make_batch("seq2seq", seed=2, pad_targets=True)
    loss = loss_for("seq2seq")
    half = BATCH // 2
    sums, counts = [], []
    for i in (0, half):
        rows = slice(i, i + half)
        sums.append(loss.sum(model(src[rows], mask[rows], tgt[rows, :-1]), tgt[rows, 1:]).item())
        counts.append(loss.num_terms(tgt[rows, 1:]))
    assert counts[0] != counts[1]
    token_weighted = sum(sums) / sum(counts)
    mean_of_means = (sums[0] / counts[0] + sums[1] / counts[1]) / 2

    got = accumulate_microbatches(split_model(model, [3, 3]), loss, src, mask, tgt, 2)
    assert got == pytest.approx(token_weighted, rel=1e-9)
    assert got != pytest.approx(mean_of_means, rel=1e-4)


def test_a_step_whose_targets_are_all_padding_is_refused() -> None:
    model = make_model("seq2seq")
    src, mask, tgt = make_batch("seq2seq", seed=2)
    tgt[:, 1:] = 0
    with pytest.raises(ValueError, match="every target of the batch is padding"):
        accumulate_microbatches(split_model(model, [6]), loss_for("seq2seq"), src, mask, tgt, 2)
    assert all(p.grad is None for p in model.parameters())


def test_accumulation_adds_to_existing_gradients() -> None:
    model = make_model("classifier")
    src, mask, tgt = make_batch("classifier", seed=2)
    stages = split_model(model, [6])
    accumulate_microbatches(stages, loss_for("classifier"), src, mask, tgt, 2)
    once = grads(model)
    accumulate_microbatches(stages, loss_for("classifier"), src, mask, tgt, 2)
    assert_grads_close(grads(model), {name: 2 * g for name, g in once.items()})


def test_a_batch_that_does_not_divide_into_microbatches_is_refused() -> None:
    model = make_model("classifier")
    src, mask, tgt = make_batch("classifier", seed=2)
    with pytest.raises(ValueError, match="batch size 8 is not divisible into 3 equal micro-batches"):
        accumulate_microbatches(split_model(model, [6]), loss_for("classifier"), src, mask, tgt, 3)
    assert all(p.grad is None for p in model.parameters())  # nothing ran
