"""Evaluation of the global model on the held-out set: loss, accuracy and (seq2seq) error rate.

- classifier: mean cross-entropy and label accuracy;
- seq2seq: teacher-forced token cross-entropy and token accuracy over non-padding targets, and the
  phoneme/token error rate of greedy decoding = Σ edit distance / Σ reference length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from collapipe_core.data import BOS_ID, EOS_ID, PAD_ID, Shard
from collapipe_core.models import EncoderStackModel, loss_fn_for

EVAL_BATCH = 256


def edit_distance(a: list[int], b: list[int]) -> int:
    """Levenshtein distance between two token sequences."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def _strip(ids: list[int]) -> list[int]:
    out = []
    for token in ids:
        if token == EOS_ID:
            break
        if token not in (PAD_ID, BOS_ID):
            out.append(token)
    return out


@torch.no_grad()
def evaluate_model(model: EncoderStackModel, shard: Shard) -> tuple[float, dict[str, float]]:
    """(eval loss, {"eval_accuracy": ..., ["eval_error_rate": ...]}) of ``model`` on ``shard``."""
    was_training = model.training
    model.eval()
    loss_fn = loss_fn_for(model.kind)
    loss_sum, acc_hits, acc_total, edits, ref_len = 0.0, 0, 0, 0, 0
    for start in range(0, len(shard), EVAL_BATCH):
        src, tgt = shard.src[start : start + EVAL_BATCH], shard.tgt[start : start + EVAL_BATCH]
        mask = src != PAD_ID
        if model.kind == "seq2seq":
            dec_in, labels = tgt[:, :-1], tgt[:, 1:]
            logits = model(src, mask, dec_in)
            real = labels != PAD_ID
            loss_sum += float(loss_fn(logits, labels)) * int(real.sum())
            acc_hits += int(((logits.argmax(-1) == labels) & real).sum())
            acc_total += int(real.sum())
            for hyp, ref in zip(
                _greedy_decode(model, src, mask, tgt.shape[1] - 1), labels.tolist(), strict=True
            ):
                reference = _strip(ref)
                edits += edit_distance(_strip(hyp), reference)
                ref_len += len(reference)
        else:
            logits = model(src, mask)
            loss_sum += float(loss_fn(logits, tgt)) * len(tgt)
            acc_hits += int((logits.argmax(-1) == tgt).sum())
            acc_total += len(tgt)
    model.train(was_training)
    metrics = {"eval_accuracy": acc_hits / max(acc_total, 1)}
    if model.kind == "seq2seq":
        metrics["eval_error_rate"] = edits / max(ref_len, 1)
    return loss_sum / max(acc_total, 1), metrics


def _greedy_decode(model: EncoderStackModel, src: Tensor, mask: Tensor, length: int) -> list[list[int]]:
    """Greedy decoding: the encoder runs once, the head is re-run on the growing prefix."""
    h = model.embedding(src)  # (B, S, D)
    for block in model.blocks:
        h = block(h, mask)
    dec_in = torch.full((src.shape[0], length), PAD_ID, dtype=torch.long)
    dec_in[:, 0] = BOS_ID
    out = torch.full((src.shape[0], length), PAD_ID, dtype=torch.long)
    for i in range(length):
        logits = model.head(h, mask, dec_in)  # (B, T, V); causal, so position i sees dec_in[:, :i+1]
        out[:, i] = logits[:, i].argmax(-1)
        if i + 1 < length:
            dec_in[:, i + 1] = out[:, i]
    result: list[list[int]] = out.tolist()
    return result
