"""The loss of a training step, for every model kind: a sum over loss terms divided by the step's count.

A *term* is one non-PAD target token (seq2seq, causal_lm) or one sample (classifier), with
ℓ_i = −log softmax(logits_i)[label_i]. The loss of a step whose batch is cut into micro-batches m is

    L = Σ_m Σ_{i ∈ m} ℓ_i / N,      N = number of terms in the whole step (all micro-batches together),

the mean over the step's terms, whatever the padding of each micro-batch. Micro-batch m contributes
``sum(m) / N`` to the loss and its backward to the gradient, so accumulated gradients are ∇L exactly —
what the whole batch would give. (The mean of per-micro-batch means differs from L when micro-batches
hold different numbers of real target tokens.) Under ``torch.distributed.pipelining`` the same L is
``loss_fn = sum(m) / N`` with ``scale_grads=False``. For the classifier N is the number of samples, so
L is the batch mean either way.

Targets per kind (:func:`split_targets`):

- seq2seq: ``tgt`` (B, T+1) = [BOS, t…, EOS, PAD…]; the decoder reads ``tgt[:, :-1]`` and predicts
  ``tgt[:, 1:]``;
- causal_lm: ``tgt`` (B, S) holds the next token of every source position (PAD where there is none);
- classifier: ``tgt`` (B,) class indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

KINDS = ("seq2seq", "classifier", "causal_lm")
PAD_ID = 0
"""The default padding id (CollaPipe's own vocabularies); pass the data's ``pad_id`` where it differs.
``pad_id=None`` says the data has no padding (a causal LM's fixed windows): every target is a term."""
NO_PAD = -100  # an ignore_index no token id equals


def source_mask(src: Tensor, pad_id: int | None) -> Tensor:
    """(B, S) bool, True = real token: ``src != pad_id`` (all True when the data has no padding)."""
    return torch.ones_like(src, dtype=torch.bool) if pad_id is None else src != pad_id


def split_targets(kind: str, tgt: Tensor) -> tuple[Tensor | None, Tensor]:
    """(decoder input ids or None, labels) of a batch's targets ``tgt``, as the module docstring says."""
    if kind == "seq2seq":
        return tgt[:, :-1], tgt[:, 1:]  # (B, T), (B, T)
    if kind in KINDS:
        return None, tgt  # causal_lm (B, S); classifier (B,)
    raise ValueError(f"unknown model kind {kind!r}; expected one of {list(KINDS)}")


@dataclass(frozen=True)
class StepLoss:
    """Cross-entropy of one model kind: summed over terms, counted, and the step mean sum / N."""

    kind: str
    pad_id: int | None = PAD_ID

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown model kind {self.kind!r}; expected one of {list(KINDS)}")

    def sum(self, logits: Tensor, labels: Tensor) -> Tensor:
        """Σ ℓ_i over the terms of ``labels``: logits (B, T, V) and labels (B, T), or (B, C) and (B,)."""
        if self.kind == "classifier":
            return F.cross_entropy(logits, labels, reduction="sum")
        ignore = NO_PAD if self.pad_id is None else self.pad_id
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=ignore, reduction="sum")

    def terms(self, labels: Tensor) -> Tensor:
        """Which labels are loss terms: the non-PAD ones (seq2seq, causal_lm) or all (classifier)."""
        if self.kind == "classifier" or self.pad_id is None:
            return torch.ones_like(labels, dtype=torch.bool)  # (B,) or (B, T); class 0 may equal pad_id
        return labels != self.pad_id  # (B, T)

    def num_terms(self, labels: Tensor) -> int:
        """N: non-PAD labels (seq2seq, causal_lm) or samples (classifier)."""
        return int(self.terms(labels).sum())

    def mean(self, logits: Tensor, labels: Tensor) -> Tensor:
        """sum / N over one batch; refuses a batch without a term (its mean is undefined)."""
        return self.sum(logits, labels) / self.checked_terms(labels)

    def checked_terms(self, labels: Tensor) -> int:
        """N, refusing 0: every target of the batch is padding, so there is nothing to learn from."""
        count = self.num_terms(labels)
        if count == 0:
            raise ValueError(
                f"every target of the batch is padding (pad_id {self.pad_id}); a {self.kind} step needs at "
                "least one real target token: check the data's targets and pad_id"
            )
        return count


def loss_for(kind: str, *, pad_id: int | None = PAD_ID) -> StepLoss:
    """The loss of ``kind`` ("seq2seq", "classifier" or "causal_lm"), ignoring ``pad_id`` targets."""
    return StepLoss(kind, pad_id)
