"""What one part of the split model costs per sample: measured from the real modules, checked in closed form.

:func:`build_profile` is the cost model's profile for every model source: the embedding (CU), one
of the L identical blocks (devices) and the head (edge server) of the model's meta skeleton are
measured by :mod:`collapipe_core.costmodel.measure` (FLOPs, parameters, activations kept for
backward, payload; no weight is allocated), then scaled by the modeled ``bytes_per_element``. The
measurement is cached per model (every ``model`` field except ``num_blocks`` and
``bytes_per_element``, which only scale it, plus the vocabulary and target sizes; a
``pretrained_path`` by its name, read once per process); L, the element size and the optimizer are
applied after the cache, so a sweep over them measures once.

Measured vs modeled:

- measured: FLOPs per sample (matrix products only, a multiply-add = 2 FLOPs; backward run, not
  assumed), parameters, activation elements autograd keeps for backward, elements crossing a link;
- modeled: bytes = elements × ``bytes_per_element`` (the modules are measured in fp32; a bf16
  device is modeled as half the bytes), weight state = params × bytes × (2 + optimizer copies).

The embedding measures 0 FLOPs (lookups), so the round model gives the CU no compute time; the
activations of the embedding and the head are measured but not part of the profile (the memory of
the CU and the edge server is not modeled).

:func:`closed_form_profile` is the check for the builtin models (the tests compare it with the
measurement: parameters exactly, block and head FLOPs within 1 %, block activations exactly).
Symbols: s = seq_len, T = target_len, d = d_model, f = ffn_dim, h = num_heads, V = source
vocabulary, V' = target vocabulary (seq2seq), C = classes (classifier), N_dec = num_decoder_layers.

- TEB forward FLOPs:  2·s·(4d² + 2·d·f) + 4·s²·d  (qkv 3d², out d², FFN 2df; QKᵀ and AV 2·s²·d each;
  = 24·s·d² + 4·s²·d when f = 4d); backward 2 × forward (input and weight gradients of every
  product). TEB parameters: 4d² + 2df + 9d + f.
- TEB activations kept for backward (elements, dropout 0, CPU's fused attention):
  s·(8d + 2f + h + 5) = the block input h and the attention residual (the two LayerNorm inputs,
  2·s·d), both LayerNorm outputs (the qkv and ff1 inputs, 2·s·d), q, k, v (one qkv storage,
  3·s·d), the attention output (out-projection input, s·d), the FFN hidden before and after GELU
  (2·s·f), the attention log-sum-exp (h·s), the LayerNorms' mean and 1/std (4·s) and the float
  key-padding mask attention builds from the boolean one (s). The former count
  s·(7d + 2f) + 2·h·s² took the attention scores and probabilities (2·h·s²), which the fused kernel
  recomputes in backward instead of keeping, and missed one s·d, the statistics and the mask. With
  dropout > 0 the masks and (CPU attention's math path) the h·s² probabilities add to it: only the
  measurement covers that.
- Embedding (CU): parameters V·d + s·d; forward 2·s·d and backward 4·s·d FLOPs for the position add
  (modeled here, not measured: lookups and adds are no matrix products, the measurement gives 0).
- Seq2seq head: per decoder layer 12·T·d² + 4·s·d² + 4·T·d·f + 4·T²·d + 4·T·s·d forward FLOPs
  (self qkv+out, cross q+out; cross kv over the source; FFN; self and cross attention, the causal
  one computed in full), plus the tied LM head 2·T·d·V'; parameters
  2d + V'·d + T·d + N_dec·(8d² + 2df + 15d + f) + 2d.
- Classifier head: pooler 2d² + classifier 2·d·C forward FLOPs (CLS position only); parameters
  2d + d² + d + d·C + C.
- Payload per link: s·d elements.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from collapipe_core.config import ExperimentConfig, ModelConfig

if TYPE_CHECKING:  # measure imports torch; it is imported on the first profile, not with the cost model
    from collapipe_core.costmodel.measure import MeasuredParts

OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adamw": 2}
"""Copies of the parameters an optimizer keeps (momentum buffer; Adam's two moments)."""

SCALING_FIELDS = frozenset({"num_blocks", "bytes_per_element"})
"""Model fields the measurement does not depend on (applied after the cache)."""


@dataclass(frozen=True)
class ModelProfile:
    """Per-sample costs of the three parts of the split model (FLOPs, parameters, bytes)."""

    num_blocks: int
    bytes_per_element: int
    block_forward_flops: float
    block_backward_flops: float
    block_params: int
    block_activation_bytes: float  # kept for backward, per sample
    payload_bytes: float  # activation (or gradient) crossing a link, per sample: s·d·bytes
    embedding_forward_flops: float
    embedding_backward_flops: float
    embedding_params: int
    head_forward_flops: float
    head_backward_flops: float
    head_params: int
    optimizer_state_copies: int  # copies of the parameters the optimizer keeps (OPTIMIZER_STATE_COPIES)

    @property
    def param_state_copies(self) -> int:
        """Weights + gradients + optimizer state, in units of the weights."""
        return 2 + self.optimizer_state_copies

    @property
    def encoder_params(self) -> int:
        return self.block_params * self.num_blocks

    @property
    def total_params(self) -> int:
        return self.embedding_params + self.encoder_params + self.head_params

    @property
    def block_state_bytes(self) -> float:
        """Weights, gradients and optimizer state of one TEB on a device."""
        return float(self.block_params * self.bytes_per_element * self.param_state_copies)

    @property
    def block_weight_bits(self) -> float:
        """B: the bits of one TEB's weights, as sent to the CU for FedAvg and back to a device."""
        return 8.0 * self.block_params * self.bytes_per_element

    @property
    def block_optimizer_state_bits(self) -> float:
        """B_opt: the bits of one TEB's optimizer state (AdamW 2 copies, momentum 1, SGD 0)."""
        return self.block_weight_bits * self.optimizer_state_copies


def build_profile(
    config: ExperimentConfig, src_vocab: int, tgt_size: int, pretrained_dir: Path | None = None
) -> ModelProfile:
    """The measured profile of ``config.model`` with the given vocabulary / class counts (cached).

    ``model.vocab_size``, when set, overrides ``src_vocab``; ``tgt_size`` is the target vocabulary
    (seq2seq) or the number of classes (classifier); ``pretrained_dir`` is the resolved checkpoint
    directory of ``model.pretrained_path`` (its config.json gives the architecture).
    """
    m = config.model
    vocab = m.vocab_size if m.vocab_size is not None else src_vocab
    parts = _measured_parts(_MeasureKey.of(m, vocab, tgt_size, pretrained_dir))
    return profile_from_parts(parts, m.num_blocks, m.bytes_per_element, config.training.optimizer)


def profile_from_parts(
    parts: MeasuredParts, num_blocks: int, bytes_per_element: int, optimizer: str
) -> ModelProfile:
    """The profile of L = ``num_blocks`` measured blocks on devices of ``bytes_per_element``."""
    if optimizer not in OPTIMIZER_STATE_COPIES:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZER_STATE_COPIES)}")
    return ModelProfile(
        num_blocks=num_blocks,
        bytes_per_element=bytes_per_element,
        block_forward_flops=parts.block.forward_flops,
        block_backward_flops=parts.block.backward_flops,
        block_params=parts.block.params,
        block_activation_bytes=parts.block.saved_elements * bytes_per_element,
        payload_bytes=parts.payload_elements * bytes_per_element,
        embedding_forward_flops=parts.embedding.forward_flops,
        embedding_backward_flops=parts.embedding.backward_flops,
        embedding_params=parts.embedding.params,
        head_forward_flops=parts.head.forward_flops,
        head_backward_flops=parts.head.backward_flops,
        head_params=parts.head.params,
        optimizer_state_copies=OPTIMIZER_STATE_COPIES[optimizer],
    )


def profile_cache_info() -> functools._CacheInfo:
    """Hits, misses and size of the measurement cache behind :func:`build_profile`."""
    return _measured_parts.cache_info()


@dataclass(frozen=True)
class _MeasureKey:
    """Hashable identity of a measurement; ``model`` rides along for the builder, outside the key."""

    fields: tuple[object, ...]
    vocab_size: int
    tgt_size: int
    checkpoint: tuple[str, int] | None  # the pretrained directory and its config.json's change time
    model: ModelConfig = field(compare=False, hash=False, repr=False)

    @staticmethod
    def of(model: ModelConfig, vocab_size: int, tgt_size: int, pretrained_dir: Path | None) -> _MeasureKey:
        dumped = {k: v for k, v in model.model_dump().items() if k not in SCALING_FIELDS}
        fields = _frozen(dumped)
        assert isinstance(fields, tuple)
        checkpoint = None
        if pretrained_dir is not None:
            checkpoint = (str(pretrained_dir), (pretrained_dir / "config.json").stat().st_mtime_ns)
        return _MeasureKey(fields, vocab_size, tgt_size, checkpoint, model)


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
    return measure_model(key.model, key.vocab_size, key.tgt_size, pretrained)


def closed_form_profile(config: ExperimentConfig, src_vocab: int, tgt_size: int) -> ModelProfile:
    """The builtin models' costs counted by the formulas of this module's docstring (the check)."""
    m = config.model
    if m.source != "builtin":
        raise ValueError(f"the closed form covers model.source builtin only, not {m.source}")
    s, d, f, h, nbytes = m.seq_len, m.d_model, m.ffn_dim, m.num_heads, m.bytes_per_element
    vocab = m.vocab_size if m.vocab_size is not None else src_vocab
    block_fwd = 2.0 * s * (4 * d * d + 2 * d * f) + 4.0 * s * s * d
    if m.kind == "seq2seq":
        t = m.target_len
        layer_fwd = 12.0 * t * d * d + 4.0 * s * d * d + 4.0 * t * d * f + 4.0 * t * t * d + 4.0 * t * s * d
        head_fwd = m.num_decoder_layers * layer_fwd + 2.0 * t * d * tgt_size
        head_params = (
            2 * d + tgt_size * d + t * d + m.num_decoder_layers * _decoder_layer_params(d, f) + 2 * d
        )
    else:
        head_fwd = 2.0 * d * d + 2.0 * d * tgt_size
        head_params = 2 * d + d * d + d + d * tgt_size + tgt_size
    return ModelProfile(
        num_blocks=m.num_blocks,
        bytes_per_element=nbytes,
        block_forward_flops=block_fwd,
        block_backward_flops=2.0 * block_fwd,
        block_params=_block_params(d, f),
        block_activation_bytes=float(nbytes * s * (8 * d + 2 * f + h + 5)),
        payload_bytes=float(s * d * nbytes),
        embedding_forward_flops=2.0 * s * d,
        embedding_backward_flops=4.0 * s * d,
        embedding_params=vocab * d + s * d,
        head_forward_flops=head_fwd,
        head_backward_flops=2.0 * head_fwd,
        head_params=head_params,
        optimizer_state_copies=OPTIMIZER_STATE_COPIES[config.training.optimizer],
    )


def _block_params(d: int, f: int) -> int:
    return 4 * d * d + 2 * d * f + 9 * d + f


def _decoder_layer_params(d: int, f: int) -> int:
    # self-attn qkv+out: 4d²+4d; cross q,kv,out: 4d²+4d; FFN 2df+f+d; three LayerNorms 6d
    return 8 * d * d + 2 * d * f + 15 * d + f
