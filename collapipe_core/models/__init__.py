"""The Transformers CollaPipe trains, in plain ``torch.nn``, and :func:`build_model`.

Why ``torch.nn`` and not Hugging Face ``transformers``:

- the encoder block must be exactly the block the cost model counts: parameters 4d² + 2df + 9d + f
  and forward FLOPs per sample 2·s·(4d² + 2·d·f) + 4·s²·d, nothing hidden (no extra norms, biases,
  relative-position tables or embedding LayerNorm);
- pipeline stages must take masks as keyword inputs and return plain tensors to run under
  ``torch.distributed.pipelining``: no caches, no ``ModelOutput`` objects, no tied weights crossing
  stages (the LM head is tied to the target embedding, and both live on the edge server);
- no hub download and no config machinery; importing this package costs nothing beyond torch
  (transformers adds seconds), which matters for analytic sweeps and worker start-up.

Names follow ``BertConfig``/``BartConfig`` where they exist: ``d_model`` (hidden size), ``num_heads``,
``ffn_dim``. Every model exposes ``.embedding`` (CU), ``.blocks`` (the L TEBs), ``.head`` (edge) and
``forward(src, src_mask, dec_in=None) -> logits``; splitting lives in :mod:`collapipe_core.pipeline.split`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from . import classifier, seq2seq
from .blocks import Embedding, EncoderBlock, EncoderStackModel
from .classifier import ClassifierHead, EncoderClassifier
from .seq2seq import PAD_ID, DecoderBlock, Seq2SeqHead, Seq2SeqTransformer

__all__ = [
    "INIT_STD",
    "PAD_ID",
    "ClassifierHead",
    "DecoderBlock",
    "Embedding",
    "EncoderBlock",
    "EncoderClassifier",
    "EncoderStackModel",
    "LossFn",
    "Seq2SeqHead",
    "Seq2SeqTransformer",
    "build_model",
    "classifier_loss_fn",
    "loss_fn_for",
    "seq2seq_loss_fn",
]

LossFn = Callable[[Tensor, Tensor], Tensor]
seq2seq_loss_fn: LossFn = seq2seq.loss_fn
classifier_loss_fn: LossFn = classifier.loss_fn

INIT_STD = 0.02


def loss_fn_for(kind: str) -> LossFn:
    """The loss of a model kind: "seq2seq" (token CE ignoring PAD) or "classifier" (CE)."""
    losses = {"seq2seq": seq2seq_loss_fn, "classifier": classifier_loss_fn}
    if kind not in losses:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {sorted(losses)}")
    return losses[kind]


def build_model(model_cfg: ModelConfig, src_vocab_size: int, tgt_size: int, seed: int) -> EncoderStackModel:
    """Build the model of ``model_cfg`` with weights drawn from a generator seeded with ``seed``.

    ``tgt_size`` is the target vocabulary (seq2seq) or the number of classes (classifier);
    ``model_cfg.vocab_size``, when set, overrides ``src_vocab_size``. The global RNG is not used:
    modules are created on the meta device and every parameter is then initialised explicitly, so the
    same seed gives bitwise-identical weights.
    """
    vocab = model_cfg.vocab_size if model_cfg.vocab_size is not None else src_vocab_size
    if vocab < 1 or tgt_size < 1:
        raise ValueError(f"vocabulary and target sizes must be positive, got {vocab} and {tgt_size}")
    m = model_cfg
    model: EncoderStackModel
    with torch.device("meta"):
        if m.kind == "seq2seq":
            model = Seq2SeqTransformer(
                src_vocab_size=vocab,
                tgt_vocab_size=tgt_size,
                seq_len=m.seq_len,
                target_len=m.target_len,
                d_model=m.d_model,
                num_heads=m.num_heads,
                ffn_dim=m.ffn_dim,
                num_encoder_blocks=m.num_blocks,
                num_decoder_layers=m.num_decoder_layers,
                dropout=m.dropout,
            )
        else:
            model = EncoderClassifier(
                src_vocab_size=vocab,
                num_classes=tgt_size,
                seq_len=m.seq_len,
                d_model=m.d_model,
                num_heads=m.num_heads,
                ffn_dim=m.ffn_dim,
                num_encoder_blocks=m.num_blocks,
                dropout=m.dropout,
            )
    model.to_empty(device="cpu")
    _init_weights(model, torch.Generator().manual_seed(seed))
    return model


def _init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Linear/Embedding weights ~ N(0, 0.02²), biases 0, LayerNorm weight 1 and bias 0."""
    initialised: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                module.weight.normal_(0.0, INIT_STD, generator=generator)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            else:
                continue
            initialised.update(id(p) for p in module.parameters(recurse=False))
    missed = [name for name, p in model.named_parameters() if id(p) not in initialised]
    if missed:  # only reachable if a new parameter-holding module type is added above
        raise TypeError(f"no initialiser for parameters {missed}; add one to _init_weights")
