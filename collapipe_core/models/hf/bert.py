"""BERT (``BertForSequenceClassification``) as a CollaPipe classifier: embeddings | encoder layers | pooler.

- CU: ``bert.embeddings`` = LayerNorm(word + position + token-type embedding), dropout; positions
  0..S−1 and token type 0 are passed explicitly (as the whole model's defaults, without reading the
  module's position/token-type buffers);
- device block i: ``bert.encoder.layer[i]`` with the bidirectional padding mask of ``src_mask``
  (:func:`.common.bidirectional_mask`, the mask ``BertModel`` builds);
- edge server: ``logits = classifier(dropout(tanh(pooler.dense(h[:, 0]))))``.

Shapes: B batch, S source length (≤ max_position_embeddings = model.seq_len), d hidden_size,
C classes (``num_labels``, the dataset's classes). Position 0 (CLS) is never padding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from transformers import BertConfig, BertForSequenceClassification

from ...config import ModelConfig
from .common import (
    BuildArgs,
    Family,
    Fields,
    HfSplitModel,
    bidirectional_mask,
    checked_length,
    dropout_fields,
)


class BertEmbedding(nn.Module):
    """CU: ``BertEmbeddings`` with explicit positions and token types."""

    def __init__(self, model: BertForSequenceClassification) -> None:
        super().__init__()
        self.embeddings = model.bert.embeddings

    def forward(self, src: Tensor) -> Tensor:
        length = src.shape[1]
        checked_length(length, self.embeddings.position_embeddings.num_embeddings, "source", "model.seq_len")
        positions = torch.arange(length, device=src.device)[None, :]  # (1, S)
        h: Tensor = self.embeddings(
            input_ids=src, position_ids=positions, token_type_ids=torch.zeros_like(src)
        )  # (B, S, d)
        return h


class BertBlock(nn.Module):
    """One device-side encoder layer: self-attention over real tokens, feed-forward, post-LN."""

    def __init__(self, model: BertForSequenceClassification, index: int) -> None:
        super().__init__()
        self.layer = model.bert.encoder.layer[index]

    def forward(self, h: Tensor, src_mask: Tensor) -> Tensor:
        # h: (B, S, d); src_mask: (B, S) bool, True = real token
        mask = bidirectional_mask(src_mask)  # (B, 1, S, S) bool
        out: Tensor = self.layer(h, attention_mask=mask)  # (B, S, d)
        return out


class BertHead(nn.Module):
    """Edge server: CLS pooler (dense + tanh), dropout, linear classifier."""

    def __init__(self, model: BertForSequenceClassification) -> None:
        super().__init__()
        pooler = model.bert.pooler
        if pooler is None:
            raise ValueError("the BERT model has no pooler; CollaPipe's classifier head needs it")
        self.pooler = pooler
        self.dropout = model.dropout
        self.classifier = model.classifier

    def forward(self, h: Tensor, src_mask: Tensor, dec_in: Tensor | None = None) -> Tensor:
        if dec_in is not None:
            raise ValueError("the classifier head takes no dec_in; pass dec_in only to seq2seq models")
        pooled = self.pooler(h)  # (B, d) from h[:, 0]
        logits: Tensor = self.classifier(self.dropout(pooled))  # (B, C)
        return logits


def _run_fields(model_cfg: ModelConfig, args: BuildArgs) -> Fields:
    return {
        **dropout_fields(
            model_cfg, "hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"
        ),
        "num_labels": (args.num_outputs, "the dataset's classes"),
        "problem_type": ("single_label_classification", "the classifier kind"),
    }


def split(model: BertForSequenceClassification) -> HfSplitModel:
    return HfSplitModel(
        model,
        BertEmbedding(model),
        [BertBlock(model, i) for i in range(len(model.bert.encoder.layer))],
        BertHead(model),
        kind="classifier",
    )


FAMILY = Family(
    name="bert",
    kind="classifier",
    config_class=BertConfig,
    model_class=BertForSequenceClassification,
    run_fields=_run_fields,
    split=split,
)
