"""The data layer's entry points: load a config's dataset as per-cluster shards plus a held-out set.

``load_dataset`` = corpus (whole dataset, encoded, cached) -> split (seeded, IID or Dirichlet
label-skew) -> tensors. ``vocab_sizes`` and ``dataset_size`` answer the cheap questions validation
and model building ask without splitting anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data.corpus import LICENCES, Corpus, corpus_key, dataset_kind, load_corpus, vocabularies
from collapipe_core.data.partition import Indices, split_samples


@dataclass(frozen=True)
class Shard:
    """One cluster's training data or the held-out set."""

    src: torch.Tensor  # (n, seq_len) int64, PAD-padded; classifiers have CLS (=BOS) at position 0
    tgt: torch.Tensor  # seq2seq: (n, target_len + 1) int64 [BOS, t.., EOS, PAD..]; classifier: (n,) labels

    def __len__(self) -> int:
        return int(self.src.shape[0])


@dataclass(frozen=True)
class DatasetBundle:
    """Everything a run needs from the data: vocabularies, one shard per cluster and the eval set."""

    name: str
    kind: Literal["seq2seq", "classifier"]
    src_vocab: tuple[str, ...]  # id -> token, specials included
    tgt_vocab: tuple[str, ...]  # seq2seq: id -> token, specials included; classifier: class names
    shards: tuple[Shard, ...]  # one per cluster
    eval: Shard
    licence: str

    @property
    def src_vocab_size(self) -> int:
        return len(self.src_vocab)

    @property
    def tgt_vocab_size(self) -> int:
        """Target vocabulary size (seq2seq) or number of classes (classifier)."""
        return len(self.tgt_vocab)


def _checked_kind(config: ExperimentConfig) -> None:
    kind = dataset_kind(config.data.dataset)
    if kind != config.model.kind:
        raise ValueError(
            f"data.dataset {config.data.dataset!r} is a {kind} dataset but model.kind is "
            f"{config.model.kind!r}; set model.kind to {kind!r} or pick a {config.model.kind} dataset"
        )


def _corpus(config: ExperimentConfig) -> Corpus:
    _checked_kind(config)
    return load_corpus(corpus_key(config))


def vocab_sizes(config: ExperimentConfig) -> tuple[int, int]:
    """(source vocabulary size, target vocabulary size or number of classes), specials included.

    Cheap: reads (once per process) only what the vocabulary needs; never splits or encodes.
    """
    _checked_kind(config)
    src_vocab, tgt_vocab = vocabularies(corpus_key(config))
    return len(src_vocab), len(tgt_vocab)


def dataset_size(config: ExperimentConfig) -> int:
    """Samples available after length filtering (seq2seq) or truncation and de-duplication (classifier)."""
    return int(_corpus(config).keys.size)


def load_dataset(config: ExperimentConfig) -> DatasetBundle:
    """The config's dataset split into ``network.num_clusters`` training shards and a held-out set.

    Deterministic: the same config gives identical tensors in any process. Raises ValueError naming
    the fields to change when the dataset is too small, the kinds disagree or a name is unknown.
    """
    corpus = _corpus(config)
    data, num_clusters = config.data, config.network.num_clusters
    needed = data.eval_samples + num_clusters * data.samples_per_cluster
    if corpus.keys.size < needed:
        raise ValueError(_too_small_message(config, corpus.keys.size, needed))
    split = split_samples(
        corpus.keys,
        eval_samples=data.eval_samples,
        num_clusters=num_clusters,
        samples_per_cluster=data.samples_per_cluster,
        dirichlet_alpha=data.dirichlet_alpha,
        seed=config.seed,
    )
    return DatasetBundle(
        name=corpus.name,
        kind=corpus.kind,
        src_vocab=corpus.src_vocab,
        tgt_vocab=corpus.tgt_vocab,
        shards=tuple(_shard(corpus, rows) for rows in split.clusters),
        eval=_shard(corpus, split.eval),
        licence=LICENCES[corpus.name],
    )


def _shard(corpus: Corpus, rows: Indices) -> Shard:
    # Fancy indexing copies, so the tensors own writable memory and the cached corpus stays intact.
    return Shard(src=torch.from_numpy(corpus.src[rows]), tgt=torch.from_numpy(np.asarray(corpus.tgt[rows])))


def _too_small_message(config: ExperimentConfig, available: int, needed: int) -> str:
    data = config.data
    lengths = ""
    if config.data.dataset == "cmudict":
        lengths = ", or raise model.seq_len / model.target_len to keep longer words"
    elif config.data.dataset == "django-langid":
        lengths = ", or add languages to data.languages"
    elif config.data.dataset.startswith("synthetic"):
        lengths = ", or raise model.seq_len so that more distinct strings fit"
    return (
        f"dataset {data.dataset!r} has {available} samples after filtering but the config needs {needed}: "
        f"data.eval_samples ({data.eval_samples}) + network.num_clusters ({config.network.num_clusters}) "
        f"x data.samples_per_cluster ({data.samples_per_cluster}); lower data.eval_samples, "
        f"data.samples_per_cluster or network.num_clusters{lengths}"
    )
