"""Hugging Face model families (bert, bart, gpt2, llama) as CollaPipe split models.

Every family is cut into CollaPipe's three parts, wrapping the transformers model's own submodules
(CU embedding | device blocks | edge server head):

- bert (classifier): ``bert.embeddings`` | ``encoder.layer`` | pooler, dropout, classifier;
- bart (seq2seq): shared embedding + encoder positions + layernorm_embedding | ``encoder.layers`` |
  decoder, lm_head (tied to the shared embedding) + final_logits_bias;
- gpt2 (causal_lm): wte + wpe | ``h`` | ln_f, lm_head (tied to wte);
- llama (causal_lm): embed_tokens | ``layers`` (each computes its rotary embeddings) | norm, lm_head.

Importing this package does not import transformers; building a family does (:mod:`.build`).
:mod:`.pretrained` checks local directories and reads their config.json sizes without transformers.
"""

from collapipe_core.models.hf.build import FAMILIES, build_hf_model, build_hf_skeleton, family
from collapipe_core.models.hf.common import ATTN_IMPLEMENTATION, HfSplitModel
from collapipe_core.models.hf.pretrained import PretrainedSizes, checked_pretrained_dir, pretrained_sizes

__all__ = [
    "ATTN_IMPLEMENTATION",
    "FAMILIES",
    "HfSplitModel",
    "PretrainedSizes",
    "build_hf_model",
    "build_hf_skeleton",
    "checked_pretrained_dir",
    "family",
    "pretrained_sizes",
]
