"""The models CollaPipe trains, :func:`build_model` and :func:`build_skeleton`.

``model.source: builtin`` (the default) builds CollaPipe's own Transformers in plain ``torch.nn``.
Why ``torch.nn`` and not Hugging Face ``transformers`` for them:

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

``model.source: transformers`` builds Hugging Face families instead (:mod:`.hf`, imported only then);
they expose the same interface. The losses of every kind are in :mod:`.losses`.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from ..config import ModelConfig, PeftConfig
from .blocks import Embedding, EncoderBlock, EncoderStackModel
from .classifier import ClassifierHead, EncoderClassifier
from .losses import PAD_ID, StepLoss, loss_for, source_mask, split_targets
from .peft import inject_adapters
from .precision import store_frozen
from .seq2seq import DecoderBlock, Seq2SeqHead, Seq2SeqTransformer

__all__ = [
    "INIT_STD",
    "PAD_ID",
    "ClassifierHead",
    "DecoderBlock",
    "Embedding",
    "EncoderBlock",
    "EncoderClassifier",
    "EncoderStackModel",
    "Seq2SeqHead",
    "Seq2SeqTransformer",
    "StepLoss",
    "build_model",
    "build_skeleton",
    "loss_for",
    "source_mask",
    "split_targets",
]

INIT_STD = 0.02


def build_model(
    model_cfg: ModelConfig,
    vocab_size: int,
    num_outputs: int,
    seed: int,
    *,
    pad_id: int | None = PAD_ID,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pretrained_dir: str | os.PathLike[str] | None = None,
    peft: PeftConfig | None = None,
    precision: str = "fp32",
) -> EncoderStackModel:
    """Build the model of ``model_cfg`` with weights drawn from a generator seeded with ``seed``.

    ``vocab_size`` is the data's (source) vocabulary; ``num_outputs`` the target vocabulary (seq2seq,
    causal_lm) or the number of classes (classifier). ``model.source: transformers`` builds the
    Hugging Face ``model.architecture`` (:func:`.hf.build_hf_model`: special ids and ``pretrained_dir``,
    default ``model.pretrained_path``, apply there). Builtin: ``model_cfg.vocab_size``, when set,
    overrides ``vocab_size``; the global RNG is not used — modules are created on the meta device and
    every parameter is then initialised explicitly, so the same seed gives bitwise-identical weights.

    ``peft``: LoRA adapters (``training.peft``, :mod:`.peft`) injected before the model is cut into its
    parts, everything else frozen; ``precision`` (``training.precision``): under ``bf16`` the frozen
    parameters are stored in bf16 (:mod:`.precision`).
    """
    if model_cfg.source == "transformers":
        from .hf import build_hf_model  # imports transformers: builtin runs never pay for it

        return build_hf_model(
            model_cfg,
            vocab_size,
            num_outputs,
            seed,
            pad_id=pad_id,
            bos_id=bos_id,
            eos_id=eos_id,
            pretrained_dir=pretrained_dir,
            peft=peft,
            precision=precision,
        )
    model = build_skeleton(model_cfg, vocab_size, num_outputs)
    model.to_empty(device="cpu")
    _init_weights(model, torch.Generator().manual_seed(seed))
    if peft is not None:
        inject_adapters(model, peft, model_cfg, seed)
    store_frozen(model, precision)
    return model


def build_skeleton(
    model_cfg: ModelConfig,
    vocab_size: int,
    num_outputs: int,
    *,
    pad_id: int | None = PAD_ID,
    bos_id: int | None = None,
    eos_id: int | None = None,
    pretrained_dir: str | os.PathLike[str] | None = None,
    peft: PeftConfig | None = None,
    precision: str = "fp32",
) -> EncoderStackModel:
    """The model :func:`build_model` builds, on the meta device: every shape and name, no storage.

    Nothing is allocated or initialised, so it suits counting FLOPs (``FlopCounterMode``) and
    activations of any size of model, and it is what the distributed ranks load stage weights into.
    """
    if model_cfg.source == "transformers":
        from .hf import build_hf_skeleton

        return build_hf_skeleton(
            model_cfg,
            vocab_size,
            num_outputs,
            pad_id=pad_id,
            bos_id=bos_id,
            eos_id=eos_id,
            pretrained_dir=pretrained_dir,
            peft=peft,
            precision=precision,
        )
    vocab = model_cfg.vocab_size if model_cfg.vocab_size is not None else vocab_size
    if vocab < 1 or num_outputs < 1:
        raise ValueError(f"vocabulary and target sizes must be positive, got {vocab} and {num_outputs}")
    m = model_cfg
    model: EncoderStackModel
    with torch.device("meta"):
        if m.kind == "seq2seq":
            model = Seq2SeqTransformer(
                src_vocab_size=vocab,
                tgt_vocab_size=num_outputs,
                seq_len=m.seq_len,
                target_len=m.target_len,
                d_model=m.d_model,
                num_heads=m.num_heads,
                ffn_dim=m.ffn_dim,
                num_encoder_blocks=m.num_blocks,
                num_decoder_layers=m.num_decoder_layers,
                dropout=m.dropout,
            )
        elif m.kind == "classifier":
            model = EncoderClassifier(
                src_vocab_size=vocab,
                num_classes=num_outputs,
                seq_len=m.seq_len,
                d_model=m.d_model,
                num_heads=m.num_heads,
                ffn_dim=m.ffn_dim,
                num_encoder_blocks=m.num_blocks,
                dropout=m.dropout,
            )
        else:
            raise ValueError(f"the builtin models are seq2seq or classifier, not {m.kind}")
        if peft is not None:
            inject_adapters(model, peft, model_cfg, seed=None)
    store_frozen(model, precision)
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
