"""Evaluation of the global model on the held-out set: the loss and the metrics of each model kind.

The eval loss is the token-weighted mean of :mod:`collapipe_core.models.losses`: Σ loss terms over the
whole set / number of terms (non-PAD targets, or samples). Metrics:

- classifier: ``eval_accuracy`` = correct labels / samples;
- seq2seq: teacher-forced ``eval_accuracy`` over non-PAD target tokens, and ``eval_error_rate`` of
  greedy decoding = Σ edit distance / Σ reference length (BOS, PAD and everything from EOS on removed);
- causal_lm: next-token ``eval_accuracy`` over non-PAD targets and ``eval_perplexity`` = exp(eval loss)
  (capped at e^700 so that it stays a finite number).

The special ids (``pad_id``, ``bos_id``, ``eos_id``) are the data's; they default to CollaPipe's own
vocabularies' ids; ``pad_id=None`` means the data has no padding. The model runs in the training
``precision`` (bf16: under CPU autocast, the logits cast to fp32 for the loss).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from collapipe_core.data import BOS_ID, EOS_ID, PAD_ID, Shard
from collapipe_core.models import EncoderStackModel, loss_for, source_mask, split_targets
from collapipe_core.models.precision import autocast, to_loss

EVAL_BATCH = 256
MAX_LOG_PERPLEXITY = 700.0


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance between two token sequences."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _strip(ids: list[int], pad_id: int | None, bos_id: int, eos_id: int) -> list[int]:
    out = []
    for token in ids:
        if token == eos_id:
            break
        if token not in (pad_id, bos_id):
            out.append(token)
    return out


@torch.no_grad()
def evaluate_model(
    model: EncoderStackModel,
    shard: Shard,
    *,
    pad_id: int | None = PAD_ID,
    bos_id: int = BOS_ID,
    eos_id: int = EOS_ID,
    precision: str = "fp32",
) -> tuple[float, dict[str, float]]:
    """(eval loss, {"eval_accuracy": ..., and "eval_error_rate" or "eval_perplexity"}) on ``shard``."""
    with autocast(precision):
        return _evaluate(model, shard, pad_id, bos_id, eos_id, precision)


def _evaluate(
    model: EncoderStackModel, shard: Shard, pad_id: int | None, bos_id: int, eos_id: int, precision: str
) -> tuple[float, dict[str, float]]:
    was_training = model.training
    model.eval()
    loss = loss_for(model.kind, pad_id=pad_id)
    loss_sum, hits, num_terms, edits, ref_len = 0.0, 0, 0, 0, 0
    for start in range(0, len(shard), EVAL_BATCH):
        src, tgt = shard.src[start : start + EVAL_BATCH], shard.tgt[start : start + EVAL_BATCH]
        mask = source_mask(src, pad_id)
        dec_in, labels = split_targets(model.kind, tgt)
        logits = to_loss(model(src, mask, dec_in), precision)  # (B, C) or (B, T, V)
        terms = loss.terms(labels)
        loss_sum += float(loss.sum(logits, labels))
        hits += int(((logits.argmax(-1) == labels) & terms).sum())
        num_terms += int(terms.sum())
        if model.kind == "seq2seq":
            fill = eos_id if pad_id is None else pad_id  # after the prediction; never read (causal)
            hyps = _greedy_decode(model, src, mask, labels.shape[1], fill, bos_id)
            for hyp, ref in zip(hyps, labels.tolist(), strict=True):
                reference = _strip(ref, pad_id, bos_id, eos_id)
                edits += edit_distance(_strip(hyp, pad_id, bos_id, eos_id), reference)
                ref_len += len(reference)
    model.train(was_training)
    eval_loss = loss_sum / max(num_terms, 1)
    metrics = {"eval_accuracy": hits / max(num_terms, 1)}
    if model.kind == "seq2seq":
        metrics["eval_error_rate"] = edits / max(ref_len, 1)
    elif model.kind == "causal_lm":
        metrics["eval_perplexity"] = math.exp(min(eval_loss, MAX_LOG_PERPLEXITY))
    return eval_loss, metrics


def _greedy_decode(
    model: EncoderStackModel, src: Tensor, mask: Tensor, length: int, pad_id: int, bos_id: int
) -> list[list[int]]:
    """Greedy decoding: the encoder runs once, the head is re-run on the growing prefix."""
    h = model.embedding(src)  # (B, S, d)
    for block in model.blocks:
        h = block(h, mask)
    dec_in = torch.full((src.shape[0], length), pad_id, dtype=torch.long)
    dec_in[:, 0] = bos_id
    out = torch.full((src.shape[0], length), pad_id, dtype=torch.long)
    for i in range(length):
        logits = model.head(h, mask, dec_in)  # (B, T, V); causal, so position i sees dec_in[:, :i+1]
        out[:, i] = logits[:, i].argmax(-1)
        if i + 1 < length:
            dec_in[:, i + 1] = out[:, i]
    result: list[list[int]] = out.tolist()
    return result
