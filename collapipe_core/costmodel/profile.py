"""What one part of the split model costs per sample: measured from the modules as they train, checked in
closed form.

:func:`build_profile` is the cost model's profile for every model source: the embedding (CU), one of the L
identical blocks (devices) and the head (edge server) of the model's meta skeleton — with the run's LoRA
adapters (``training.peft``) and frozen base stored at its ``training.precision`` — are measured by
:mod:`collapipe_core.costmodel.measure` (FLOPs, parameters and their bytes as stored, what autograd keeps
for backward under autocast, the payload at the stages' boundary dtype, the block again with activation
recomputation; no weight is allocated). The measurement is cached per model (every ``model`` field except
``num_blocks``, the vocabulary and target sizes, ``training.peft`` and ``training.precision``; a
``pretrained_path`` by its name and its config.json's change time); L and the optimizer are applied after
the cache, so a sweep over them measures once.

Measured vs modeled:

- measured: FLOPs per sample (matrix products only, a multiply-add = 2 FLOPs; backward run, not assumed:
  a frozen weight gets no weight gradient, a recomputed block's backward runs its forward again), the
  parameters and their bytes (frozen ones at the precision, trainable ones fp32), the bytes autograd
  keeps for backward per sample and per micro-batch, the bytes crossing a link;
- modeled: a block's state on its device = every weight as stored + gradients and optimizer state of the
  trainable ones (fp32; AdamW 2 copies, momentum 1, SGD 0); what FedAvg exchanges = the trainable tensors
  (B); the frozen base crosses a link only to a device that gains the block.

The embedding measures 0 FLOPs (lookups), so the round model gives the CU no compute time; the
activations of the embedding and the head are measured but not part of the profile (the memory of the CU
and the edge server is not modeled).

:func:`closed_form_profile` is the check for the builtin models in fp32 without adapters (the tests compare
it with the measurement: parameters exactly, block and head FLOPs within 1 %, block activations exactly).
Symbols: s = seq_len, T = target_len, d = d_model, f = ffn_dim, h = num_heads, V = source vocabulary, V' =
target vocabulary (seq2seq), C = classes (classifier), N_dec = num_decoder_layers.

- TEB forward FLOPs:  2·s·(4d² + 2·d·f) + 4·s²·d  (qkv 3d², out d², FFN 2df; QKᵀ and AV 2·s²·d each;
  = 24·s·d² + 4·s²·d when f = 4d); backward 2 × forward (input and weight gradients of every product).
  TEB parameters: 4d² + 2df + 9d + f.
- TEB activations kept for backward (elements, dropout 0, CPU's fused attention, 4 bytes each):
  s·(8d + 2f + h + 5) = the block input h and the attention residual (the two LayerNorm inputs, 2·s·d),
  both LayerNorm outputs (the qkv and ff1 inputs, 2·s·d), q, k, v (one qkv storage, 3·s·d), the attention
  output (out-projection input, s·d), the FFN hidden before and after GELU (2·s·f), the attention
  log-sum-exp (h·s), the LayerNorms' mean and 1/std (4·s) and the float key-padding mask attention builds
  from the boolean one (s). With dropout > 0 the masks and (CPU attention's math path) the h·s²
  probabilities add to it: only the measurement covers that.
- TEB with recomputation: keeps its inputs, h and the boolean mask (4·s·d + s bytes); its backward runs
  the forward again except the last product (ff2, whose output backward does not need: torch's
  non-reentrant checkpoint stops recomputing there), 3 × forward − 2·s·d·f FLOPs.
- Embedding (CU): parameters V·d + s·d; forward 2·s·d and backward 4·s·d FLOPs for the position add
  (modeled here, not measured: lookups and adds are no matrix products, the measurement gives 0).
- Seq2seq head: per decoder layer 12·T·d² + 4·s·d² + 4·T·d·f + 4·T²·d + 4·T·s·d forward FLOPs (self
  qkv+out, cross q+out; cross kv over the source; FFN; self and cross attention, the causal one computed
  in full), plus the tied LM head 2·T·d·V'; parameters 2d + V'·d + T·d + N_dec·(8d² + 2df + 15d + f) + 2d.
- Classifier head: pooler 2d² + classifier 2·d·C forward FLOPs (CLS position only); parameters
  2d + d² + d + d·C + C.
- Payload per link: s·d elements of 4 bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from collapipe_core.config import ExperimentConfig, ModelConfig, PeftConfig

if TYPE_CHECKING:  # measure imports torch; it is imported on the first profile, not with the cost model
    from collapipe_core.costmodel.measure import MeasuredParts

OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adamw": 2}
"""Copies of the parameters an optimizer keeps (momentum buffer; Adam's two moments)."""

TRAINABLE_BYTES = 4
"""Trainable parameters, their gradients and optimizer state are fp32 at every precision."""


@dataclass(frozen=True)
class ModelProfile:
    """Per-sample costs of the three parts of the split model (FLOPs, parameters, bytes) as it trains."""

    num_blocks: int
    precision: str  # training.precision the parts were measured at
    block_forward_flops: float
    block_backward_flops: float
    block_params: int
    block_trainable_params: int  # of block_params (all of them without adapters)
    block_weight_bytes: float  # every parameter of a TEB as stored (frozen at the precision, trainable fp32)
    block_activation_bytes: float  # kept for backward, per sample
    block_activation_fixed_bytes: float  # kept for backward per micro-batch whatever its size
    block_recompute_backward_flops: float  # per sample, the backward of a recomputed TEB (forward again)
    block_recompute_activation_bytes: float  # what a recomputed TEB keeps per sample: its inputs
    block_recompute_activation_fixed_bytes: float
    payload_bytes: float  # activation (or gradient) crossing a link, per sample, at the boundary dtype
    embedding_forward_flops: float
    embedding_backward_flops: float
    embedding_params: int
    embedding_trainable_params: int
    embedding_weight_bytes: float  # as stored
    head_forward_flops: float
    head_backward_flops: float
    head_params: int
    head_trainable_params: int
    head_weight_bytes: float
    optimizer_state_copies: int  # copies of the parameters the optimizer keeps (OPTIMIZER_STATE_COPIES)

    @property
    def encoder_params(self) -> int:
        return self.block_params * self.num_blocks

    @property
    def total_params(self) -> int:
        return self.embedding_params + self.encoder_params + self.head_params

    @property
    def trainable_params(self) -> int:
        return (
            self.embedding_trainable_params
            + self.block_trainable_params * self.num_blocks
            + self.head_trainable_params
        )

    @property
    def weight_bytes(self) -> float:
        """Every parameter of the model as stored."""
        return (
            self.embedding_weight_bytes + self.block_weight_bytes * self.num_blocks + self.head_weight_bytes
        )

    @property
    def trainable_bytes(self) -> float:
        """The trainable parameters (fp32): also their gradients, and each optimizer copy."""
        return float(self.trainable_params * TRAINABLE_BYTES)

    @property
    def block_trainable_bytes(self) -> float:
        return float(self.block_trainable_params * TRAINABLE_BYTES)

    @property
    def block_frozen_bytes(self) -> float:
        """The frozen weights of one TEB as stored (0 without adapters)."""
        return self.block_weight_bytes - self.block_trainable_bytes

    @property
    def block_gradient_bytes(self) -> float:
        return self.block_trainable_bytes

    @property
    def block_optimizer_bytes(self) -> float:
        return self.block_trainable_bytes * self.optimizer_state_copies

    @property
    def block_state_bytes(self) -> float:
        """Weights, gradients and optimizer state of one TEB on a device."""
        return self.block_weight_bytes + self.block_gradient_bytes + self.block_optimizer_bytes

    @property
    def block_update_bits(self) -> float:
        """B: the bits of one TEB's trainable tensors, sent to the CU for FedAvg and back to its device."""
        return 8.0 * self.block_trainable_bytes

    @property
    def block_frozen_bits(self) -> float:
        """The bits of one TEB's frozen weights, sent to a device that gains the TEB (0 without adapters)."""
        return 8.0 * self.block_frozen_bytes

    @property
    def block_optimizer_state_bits(self) -> float:
        """B_opt: the bits of one TEB's optimizer state (AdamW 2 copies, momentum 1, SGD 0)."""
        return 8.0 * self.block_optimizer_bytes

    @property
    def update_bits(self) -> float:
        """The bits of the trainable tensors of the embedding and every TEB (what the CU uploads for FedAvg
        and receives back averaged; the head stays on the edge server)."""
        trainable = self.embedding_trainable_params + self.block_trainable_params * self.num_blocks
        return 8.0 * TRAINABLE_BYTES * trainable


def build_profile(
    config: ExperimentConfig, src_vocab: int, tgt_size: int, pretrained_dir: Path | None = None
) -> ModelProfile:
    """The measured profile of ``config.model`` trained as ``config.training`` says, with the given
    vocabulary / class counts (cached).

    ``model.vocab_size``, when set, overrides ``src_vocab``; ``tgt_size`` is the target vocabulary
    (seq2seq) or the number of classes (classifier); ``pretrained_dir`` is the resolved checkpoint
    directory of ``model.pretrained_path`` (its config.json gives the architecture).
    """
    m, t = config.model, config.training
    vocab = m.vocab_size if m.vocab_size is not None else src_vocab
    parts = _measured_parts(_MeasureKey.of(m, t.peft, t.precision, vocab, tgt_size, pretrained_dir))
    return profile_from_parts(parts, m.num_blocks, t.optimizer, t.precision)


def profile_from_parts(
    parts: MeasuredParts, num_blocks: int, optimizer: str, precision: str = "fp32"
) -> ModelProfile:
    """The profile of L = ``num_blocks`` measured blocks trained with ``optimizer``."""
    if optimizer not in OPTIMIZER_STATE_COPIES:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZER_STATE_COPIES)}")
    block, again = parts.block, parts.recomputed_block
    return ModelProfile(
        num_blocks=num_blocks,
        precision=precision,
        block_forward_flops=block.forward_flops,
        block_backward_flops=block.backward_flops,
        block_params=block.params,
        block_trainable_params=block.trainable_params,
        block_weight_bytes=block.param_bytes,
        block_activation_bytes=block.saved_bytes,
        block_activation_fixed_bytes=block.saved_fixed_bytes,
        block_recompute_backward_flops=again.backward_flops,
        block_recompute_activation_bytes=again.saved_bytes,
        block_recompute_activation_fixed_bytes=again.saved_fixed_bytes,
        payload_bytes=parts.payload_bytes,
        embedding_forward_flops=parts.embedding.forward_flops,
        embedding_backward_flops=parts.embedding.backward_flops,
        embedding_params=parts.embedding.params,
        embedding_trainable_params=parts.embedding.trainable_params,
        embedding_weight_bytes=parts.embedding.param_bytes,
        head_forward_flops=parts.head.forward_flops,
        head_backward_flops=parts.head.backward_flops,
        head_params=parts.head.params,
        head_trainable_params=parts.head.trainable_params,
        head_weight_bytes=parts.head.param_bytes,
        optimizer_state_copies=OPTIMIZER_STATE_COPIES[optimizer],
    )


def profile_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the measurement cache behind :func:`build_profile`."""
    return _measured_parts.cache_info()


@dataclass(frozen=True)
class _MeasureKey:
    """Hashable identity of a measurement; ``model`` rides along for the builder, outside the key."""

    fields: tuple[object, ...]  # the model's fields but num_blocks, the adapters', the precision
    vocab_size: int
    tgt_size: int
    checkpoint: tuple[str, int] | None  # the pretrained directory and its config.json's change time
    model: ModelConfig = field(compare=False, hash=False, repr=False)
    peft: PeftConfig | None = field(compare=False, hash=False, repr=False)
    precision: str = field(compare=False, hash=False, repr=False)

    @staticmethod
    def of(
        model: ModelConfig,
        peft: PeftConfig | None,
        precision: str,
        vocab_size: int,
        tgt_size: int,
        pretrained_dir: Path | None,
    ) -> _MeasureKey:
        dumped = {k: v for k, v in model.model_dump().items() if k != "num_blocks"}
        adapters = None if peft is None else peft.model_dump()
        fields = _frozen({"model": dumped, "peft": adapters, "precision": precision})
        assert isinstance(fields, tuple)
        checkpoint = None
        if pretrained_dir is not None:
            checkpoint = (str(pretrained_dir), (pretrained_dir / "config.json").stat().st_mtime_ns)
        return _MeasureKey(fields, vocab_size, tgt_size, checkpoint, model, peft, precision)


def _frozen(value: object) -> object:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


@functools.lru_cache(maxsize=128)
def _measured_parts(key: _MeasureKey) -> MeasuredParts:
    from collapipe_core.costmodel.measure import measure_model

    pretrained = Path(key.checkpoint[0]) if key.checkpoint is not None else None
    return measure_model(key.model, key.vocab_size, key.tgt_size, pretrained, key.peft, key.precision)


def closed_form_profile(config: ExperimentConfig, src_vocab: int, tgt_size: int) -> ModelProfile:
    """The builtin models' costs counted by the formulas of this module's docstring (the check; fp32,
    every weight trained)."""
    m, t = config.model, config.training
    if m.source != "builtin":
        raise ValueError(f"the closed form covers model.source builtin only, not {m.source}")
    if t.peft is not None or t.precision != "fp32":
        raise ValueError("the closed form covers fp32 training of every weight")
    s, d, f, h = m.seq_len, m.d_model, m.ffn_dim, m.num_heads
    vocab = m.vocab_size if m.vocab_size is not None else src_vocab
    block_fwd = 2.0 * s * (4 * d * d + 2 * d * f) + 4.0 * s * s * d
    if m.kind == "seq2seq":
        t_len = m.target_len
        layer_fwd = (
            12.0 * t_len * d * d
            + 4.0 * s * d * d
            + 4.0 * t_len * d * f
            + 4.0 * t_len * t_len * d
            + 4.0 * t_len * s * d
        )
        head_fwd = m.num_decoder_layers * layer_fwd + 2.0 * t_len * d * tgt_size
        head_params = (
            2 * d + tgt_size * d + t_len * d + m.num_decoder_layers * _decoder_layer_params(d, f) + 2 * d
        )
    else:
        head_fwd = 2.0 * d * d + 2.0 * d * tgt_size
        head_params = 2 * d + d * d + d + d * tgt_size + tgt_size
    block_params = _block_params(d, f)
    return ModelProfile(
        num_blocks=m.num_blocks,
        precision="fp32",
        block_forward_flops=block_fwd,
        block_backward_flops=2.0 * block_fwd,
        block_params=block_params,
        block_trainable_params=block_params,
        block_weight_bytes=float(TRAINABLE_BYTES * block_params),
        block_activation_bytes=float(4 * s * (8 * d + 2 * f + h + 5)),
        block_activation_fixed_bytes=0.0,
        block_recompute_backward_flops=3.0 * block_fwd - 2.0 * s * d * f,
        block_recompute_activation_bytes=float(4 * s * d + s),
        block_recompute_activation_fixed_bytes=0.0,
        payload_bytes=float(4 * s * d),
        embedding_forward_flops=2.0 * s * d,
        embedding_backward_flops=4.0 * s * d,
        embedding_params=vocab * d + s * d,
        embedding_trainable_params=vocab * d + s * d,
        embedding_weight_bytes=float(TRAINABLE_BYTES * (vocab * d + s * d)),
        head_forward_flops=head_fwd,
        head_backward_flops=2.0 * head_fwd,
        head_params=head_params,
        head_trainable_params=head_params,
        head_weight_bytes=float(TRAINABLE_BYTES * head_params),
        optimizer_state_copies=OPTIMIZER_STATE_COPIES[t.optimizer],
    )


def _block_params(d: int, f: int) -> int:
    return 4 * d * d + 2 * d * f + 9 * d + f


def _decoder_layer_params(d: int, f: int) -> int:
    # self-attn qkv+out: 4d²+4d; cross q,kv,out: 4d²+4d; FFN 2df+f+d; three LayerNorms 6d
    return 8 * d * d + 2 * d * f + 15 * d + f
