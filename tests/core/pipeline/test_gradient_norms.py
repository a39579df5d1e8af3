"""The gradient norm probe: each micro-batch's contribution and the step's accumulated gradient, read by
hooks as the split model trains, against gradients taken directly from the unsplit model.

The direct reference: per micro-batch, ``torch.autograd.grad`` of the micro-batch's loss terms / N (the
step's number of terms) on the unsplit model called as a whole; S_micro = Σ_m |c_m|², S_step = |Σ_m c_m|².
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from collapipe_core.config import ModelConfig
from collapipe_core.gradient_noise import GradientNormSums
from collapipe_core.models import EncoderStackModel, build_model, loss_for, split_targets
from collapipe_core.pipeline.gradient_norms import GradientNormProbe
from collapipe_core.pipeline.split import accumulate_microbatches, split_model

VOCAB, PAD, BOS = 37, 0, 1
SEQ_LEN, TARGET_LEN, BATCH, MICROBATCHES = 9, 6, 6, 3
SEGMENTS = [2, 0, 1, 1]


def _model(**fields: Any) -> EncoderStackModel:
    config = ModelConfig(
        d_model=16, num_heads=2, ffn_dim=24, num_blocks=4, seq_len=SEQ_LEN, target_len=TARGET_LEN, **fields
    )
    return build_model(config, VOCAB, VOCAB, seed=5, pad_id=PAD, bos_id=BOS, eos_id=2).double()


def _batch(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src, src_mask, tgt) with uneven right padding, so micro-batches hold different numbers of terms."""
    g = torch.Generator().manual_seed(11)
    mask = torch.arange(SEQ_LEN)[None, :] < torch.tensor([9, 2, 5, 8, 3, 7])[:, None]
    src = torch.randint(3, VOCAB, (BATCH, SEQ_LEN), generator=g).masked_fill(~mask, PAD)
    if kind == "causal_lm":
        return src, mask, F.pad(src[:, 1:], (0, 1), value=PAD)
    tgt = torch.randint(3, VOCAB, (BATCH, TARGET_LEN + 1), generator=g)
    tgt[:, 0] = BOS
    tgt = tgt.masked_fill(
        torch.arange(TARGET_LEN + 1)[None, :] >= torch.tensor([2, 7, 4, 3, 6, 5])[:, None], PAD
    )
    return src, mask, tgt


def _direct(
    model: EncoderStackModel, src: torch.Tensor, mask: torch.Tensor, tgt: torch.Tensor
) -> GradientNormSums:
    loss = loss_for(model.kind, pad_id=PAD)
    params = list(model.parameters())  # a tied parameter once
    num_terms = loss.checked_terms(split_targets(model.kind, tgt)[1])
    size = BATCH // MICROBATCHES
    contributions = []
    for m in range(MICROBATCHES):
        part = slice(m * size, (m + 1) * size)
        dec_in, labels = split_targets(model.kind, tgt[part])
        terms = loss.sum(model(src[part], mask[part], dec_in), labels) / num_terms
        contributions.append(torch.cat([g.reshape(-1) for g in torch.autograd.grad(terms, params)]))
    stacked = torch.stack(contributions)
    return GradientNormSums(
        microbatch_sq_sum=float((stacked**2).sum()),
        step_sq=float((stacked.sum(dim=0) ** 2).sum()),
        num_microbatches=MICROBATCHES,
        microbatch_size=size,
    )


def _train_step(model: EncoderStackModel, probes: list[GradientNormProbe], batch: Any) -> None:
    model.zero_grad(set_to_none=True)
    for probe in probes:
        probe.start_step()
    accumulate_microbatches(
        split_model(model, SEGMENTS), loss_for(model.kind, pad_id=PAD), *batch, MICROBATCHES
    )


def test_the_stages_sums_add_up_to_the_whole_model_s_and_to_the_direct_gradients() -> None:
    model = _model(kind="seq2seq")
    batch = _batch("seq2seq")
    direct = _direct(model, *batch)
    stages = split_model(model, SEGMENTS)

    probes = [GradientNormProbe(stage.parameters()) for stage in stages.in_order()]
    whole = GradientNormProbe(model.parameters())
    _train_step(model, [*probes, whole], batch)
    parts = [probe.finish_step(MICROBATCHES, 2) for probe in probes]
    total = parts[0]
    for part in parts[1:]:
        total = total + part
    found = whole.finish_step(MICROBATCHES, 2)

    for sums in (total, found):
        assert sums.microbatch_sq_sum == pytest.approx(direct.microbatch_sq_sum, rel=1e-10)
        assert sums.step_sq == pytest.approx(direct.step_sq, rel=1e-10)
    assert sum(p.microbatch_sq_sum > 0 for p in parts) == 5  # CU, the 3 devices holding TEBs, edge


def test_a_tied_weight_is_counted_once_with_both_uses_in_each_micro_batch() -> None:
    model = _model(source="transformers", architecture="gpt2")
    embedding, head = model.embedding.wte.weight, model.head.lm_head.weight  # type: ignore[union-attr]
    assert embedding is head
    batch = _batch("causal_lm")
    direct = _direct(model, *batch)

    with GradientNormProbe(model.parameters()) as probe:
        _train_step(model, [probe], batch)
        found = probe.finish_step(MICROBATCHES, 2)
    assert found.microbatch_sq_sum == pytest.approx(direct.microbatch_sq_sum, rel=1e-10)
    assert found.step_sq == pytest.approx(direct.step_sq, rel=1e-10)


def test_kept_parameters_keep_each_contribution_and_a_closed_probe_reads_nothing() -> None:
    model = _model(kind="seq2seq")
    batch = _batch("seq2seq")
    kept = model.embedding.tok.weight  # type: ignore[union-attr]
    probe = GradientNormProbe(model.parameters(), kept=[kept])
    _train_step(model, [probe], batch)
    parts = probe.contributions(kept)
    assert len(parts) == MICROBATCHES
    assert kept.grad is not None
    torch.testing.assert_close(torch.stack(parts).sum(dim=0), kept.grad)
    others = probe.finish_step(MICROBATCHES, 2)
    everything = GradientNormProbe(model.parameters())
    _train_step(model, [everything], batch)
    alone = float(kept.grad.square().sum())
    assert everything.finish_step(MICROBATCHES, 2).step_sq == pytest.approx(others.step_sq + alone, rel=1e-10)

    probe.close()
    everything.close()
    _train_step(model, [probe], batch)
    assert probe.finish_step(MICROBATCHES, 2).microbatch_sq_sum == 0.0
    assert probe.contributions(kept) == []


def test_the_hooks_are_on_only_from_start_to_finish_of_a_step_and_other_hooks_stay() -> None:
    """An unmeasured step costs nothing: between steps no parameter has a hook of the probe, not even
    the emptied hook dict autograd would still call into Python for."""
    model = _model(kind="seq2seq")
    batch = _batch("seq2seq")
    watched = model.embedding.tok.weight  # type: ignore[union-attr]
    seen: list[torch.Tensor] = []
    watched.register_hook(seen.append)
    others = [p for p in model.parameters() if p is not watched]
    with GradientNormProbe(model.parameters()) as probe:
        assert all(p._backward_hooks is None for p in others)
        _train_step(model, [probe], batch)
        assert all(p._backward_hooks for p in model.parameters())
        measured = probe.finish_step(MICROBATCHES, 2)
        assert all(p._backward_hooks is None for p in others)
        assert watched._backward_hooks is not None and len(watched._backward_hooks) == 1
        _train_step(model, [], batch)  # an unmeasured step
        _train_step(model, [probe], batch)
        assert probe.finish_step(MICROBATCHES, 2) == measured  # the same batch, the same sums
    assert all(p._backward_hooks is None for p in others)
    assert len(seen) == 3 * MICROBATCHES  # the other hook ran in every step
