"""What one Transformer part costs, counted from the model config (per sample, before batching).

The counts follow the modules of :mod:`collapipe_core.models` exactly (tests compare the parameter
counts against the real ``torch`` modules). FLOPs count a multiply-add as 2 FLOPs and include only
matrix products; backward is modeled as 2 × forward (gradients of inputs and of weights).

Symbols: s = seq_len, T = target_len, d = d_model, f = ffn_dim, h = num_heads, V = source vocabulary,
V' = target vocabulary (seq2seq) and C = classes (classifier).

- Encoder block (TEB), forward FLOPs per sample:  Φ_F = 2·s·(4d² + 2·d·f) + 4·s²·d
  (= 24·s·d² + 4·s²·d when f = 4d), parameters 4d² + 2df + 9d + f.
- Activations a TEB keeps for its backward pass, per sample (modeled, elements):
  s·(7d + 2f) + 2·h·s²  — inputs of both LayerNorms and of every Linear (7·s·d), the FFN hidden
  before and after GELU (2·s·f) and the attention scores and probabilities (2·h·s²).
- Embedding (CU): parameters V·d + s·d; forward FLOPs 2·s·d (lookup and position add).
- Seq2seq head (edge): final encoder norm, decoder layers (causal self-attention, cross-attention,
  FFN), final norm and an LM head tied to the target embedding.
- Classifier head (edge): final encoder norm, pooler d→d on the CLS position, linear d→C.
"""

from __future__ import annotations

from dataclasses import dataclass

from collapipe_core.config import ExperimentConfig

OPTIMIZER_STATE_COPIES = {"sgd": 0, "momentum": 1, "adamw": 2}
"""Copies of the parameters an optimizer keeps (momentum buffer; Adam's two moments)."""


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
    param_state_copies: int  # weights + gradients + optimizer copies, in units of the weights

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


def block_params(d: int, f: int) -> int:
    return 4 * d * d + 2 * d * f + 9 * d + f


def decoder_layer_params(d: int, f: int) -> int:
    # self-attn qkv+out: 4d²+4d; cross q,kv,out: 4d²+4d; FFN 2df+f+d; three LayerNorms 6d
    return 8 * d * d + 2 * d * f + 15 * d + f


def build_profile(config: ExperimentConfig, src_vocab: int, tgt_size: int) -> ModelProfile:
    """Count the costs of ``config.model`` with the given vocabulary / class counts."""
    m = config.model
    s, d, f, h, nbytes = m.seq_len, m.d_model, m.ffn_dim, m.num_heads, m.bytes_per_element
    vocab = m.vocab_size if m.vocab_size is not None else src_vocab
    block_fwd = 2.0 * s * (4 * d * d + 2 * d * f) + 4.0 * s * s * d
    if m.kind == "seq2seq":
        t = m.target_len
        layer_fwd = 12.0 * t * d * d + 4.0 * s * d * d + 4.0 * t * d * f + 4.0 * t * t * d + 4.0 * t * s * d
        head_fwd = m.num_decoder_layers * layer_fwd + 2.0 * t * d * tgt_size
        head_params = 2 * d + tgt_size * d + t * d + m.num_decoder_layers * decoder_layer_params(d, f) + 2 * d
    else:
        head_fwd = 2.0 * d * d + 2.0 * d * tgt_size
        head_params = 2 * d + d * d + d + d * tgt_size + tgt_size
    return ModelProfile(
        num_blocks=m.num_blocks,
        bytes_per_element=nbytes,
        block_forward_flops=block_fwd,
        block_backward_flops=2.0 * block_fwd,
        block_params=block_params(d, f),
        block_activation_bytes=float(nbytes * (s * (7 * d + 2 * f) + 2 * h * s * s)),
        payload_bytes=float(s * d * nbytes),
        embedding_forward_flops=2.0 * s * d,
        embedding_backward_flops=4.0 * s * d,
        embedding_params=vocab * d + s * d,
        head_forward_flops=head_fwd,
        head_backward_flops=2.0 * head_fwd,
        head_params=head_params,
        param_state_copies=2 + OPTIMIZER_STATE_COPIES[config.training.optimizer],
    )
