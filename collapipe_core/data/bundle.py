"""The data layer's entry points: load a config's dataset as per-cluster shards plus a held-out set.

``load_dataset`` = corpus (whole dataset, encoded, cached) -> split (seeded, IID or Dirichlet
non-IID) -> tensors. ``vocab_sizes`` and ``dataset_size`` answer the questions validation and model
building ask; for the bundled character datasets they are cheap and never split or encode, for
pydoc-topics and user files they build (and cache) the tokenised corpus.

Every entry point takes the :class:`~collapipe_core.workspace.Workspace` that may read the config's
files (``data.files``, a pretrained tokenizer in ``model.pretrained_path``). The bundled datasets
read no config file and accept ``None``; a config that names files refuses ``None`` (TypeError), so
no caller reads them past the workspace by accident. Problems with the user's data or a dataset too
small for the config are :class:`~collapipe_core.data.errors.DataError` s naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from collapipe_core.config import DATASETS_CAUSAL_LM, USER_FILES, ExperimentConfig
from collapipe_core.data import pydoc_topics, user_files
from collapipe_core.data.corpus import LICENCES, Corpus, corpus_key, dataset_kind, load_corpus, vocabularies
from collapipe_core.data.errors import DataError, needed_workspace, quoted_name, too_few_samples
from collapipe_core.data.partition import Indices, hold_out, split_pool, split_samples
from collapipe_core.data.vocab import BOS_ID, EOS_ID, PAD_ID, IdMatrix
from collapipe_core.workspace import Workspace

if TYPE_CHECKING:
    from collapipe_core.data.tokenization import TextTokenizer


@dataclass(frozen=True)
class Shard:
    """One cluster's training data or the held-out set (ids as in the bundle's ``*_id`` fields)."""

    src: torch.Tensor  # (n, seq_len) int64, PAD-padded; classifiers have CLS (=BOS) at position 0
    tgt: torch.Tensor  # seq2seq: (n, target_len + 1) int64 [BOS, t.., EOS, PAD..]; classifier: (n,) labels;
    # causal_lm: (n, seq_len) int64, src shifted by one token (never padded)

    def __len__(self) -> int:
        return int(self.src.shape[0])


@dataclass(frozen=True)
class DatasetBundle:
    """Everything a run needs from the data: vocabularies, one shard per cluster and the eval set."""

    name: str
    kind: Literal["seq2seq", "classifier", "causal_lm"]
    src_vocab: tuple[str, ...]  # id -> token, specials included
    tgt_vocab: tuple[str, ...]  # seq2seq, causal_lm: id -> token, specials included; classifier: class names
    shards: tuple[Shard, ...]  # one per cluster
    eval: Shard
    licence: str
    pad_id: int | None = PAD_ID  # None: the tokenizer has no padding token (causal_lm only, never padded)
    bos_id: int = BOS_ID  # start of a seq2seq target; a classifier's CLS token at position 0
    eos_id: int = EOS_ID  # end of a seq2seq target; between documents of a causal_lm
    truncated_rows: int = 0  # user files: rows cut to the model's lengths (data.truncate)
    tokenizer: TextTokenizer | None = None  # the subword tokenizer of the texts (None: characters)

    @property
    def src_vocab_size(self) -> int:
        return len(self.src_vocab)

    @property
    def tgt_vocab_size(self) -> int:
        """Target vocabulary size (seq2seq) or number of classes (classifier)."""
        return len(self.tgt_vocab)


def _corpus(config: ExperimentConfig, workspace: Workspace | None) -> Corpus:
    name = config.data.dataset
    if name == USER_FILES:
        return user_files.load_file_corpus(config, needed_workspace(workspace, "data.files"))
    _checked_kind(config)
    if name in DATASETS_CAUSAL_LM:
        return pydoc_topics.load_pydoc_corpus(config, workspace)
    return load_corpus(corpus_key(config))


def _checked_kind(config: ExperimentConfig) -> None:
    kind = dataset_kind(config.data.dataset)
    if kind != config.model.kind:
        raise ValueError(
            f"data.dataset {config.data.dataset!r} is a {kind} dataset but model.kind is "
            f"{config.model.kind!r}; set model.kind to {kind!r} or pick a {config.model.kind} dataset"
        )


def vocab_sizes(config: ExperimentConfig, workspace: Workspace | None = None) -> tuple[int, int]:
    """(source vocabulary size, target vocabulary size or number of classes), specials included.

    Cheap for the character datasets: reads (once per process) only what the vocabulary needs.
    """
    if config.data.dataset == USER_FILES or config.data.dataset in DATASETS_CAUSAL_LM:
        corpus = _corpus(config, workspace)
        return len(corpus.src_vocab), len(corpus.tgt_vocab)
    _checked_kind(config)
    src_vocab, tgt_vocab = vocabularies(corpus_key(config))
    return len(src_vocab), len(tgt_vocab)


def dataset_size(config: ExperimentConfig, workspace: Workspace | None = None) -> int:
    """Samples available: after length filtering (seq2seq), truncation and de-duplication (classifier),
    windows (causal_lm); user files count the training and the held-out file's samples together."""
    train, held_out = dataset_counts(config, workspace)
    return train + (held_out or 0)


def dataset_counts(config: ExperimentConfig, workspace: Workspace | None = None) -> tuple[int, int | None]:
    """(the samples the clusters' shards are drawn from — and the held-out set, without an eval file —,
    the eval file's samples or None), counted as :func:`dataset_size` counts them."""
    corpus = _corpus(config, workspace)
    return int(corpus.keys.size), (len(corpus.held_out[0]) if corpus.held_out is not None else None)


def load_dataset(config: ExperimentConfig, workspace: Workspace | None = None) -> DatasetBundle:
    """The config's dataset split into ``network.num_clusters`` training shards and a held-out set.

    Deterministic: the same config (and files) give identical tensors in any process. Raises
    DataError naming the field to change when the data is bad or too small, ValueError when the kinds
    disagree or a name is unknown.
    """
    corpus = _corpus(config, workspace)
    data, num_clusters, seed = config.data, config.network.num_clusters, config.seed
    if corpus.held_out is None:
        if corpus.keys.size < data.eval_samples + num_clusters * data.samples_per_cluster:
            raise too_few_samples(config, int(corpus.keys.size), *size_words(config))
        split = split_samples(
            corpus.keys,
            eval_samples=data.eval_samples,
            num_clusters=num_clusters,
            samples_per_cluster=data.samples_per_cluster,
            dirichlet_alpha=data.dirichlet_alpha,
            seed=seed,
        )
        eval_shard, clusters = _shard(corpus.src, corpus.tgt, split.eval), split.clusters
    else:
        eval_src, eval_tgt = corpus.held_out
        _check_held_out_sizes(config, corpus.keys.size, len(eval_src))
        eval_shard = _shard(eval_src, eval_tgt, hold_out(len(eval_src), data.eval_samples, seed)[0])
        clusters = split_pool(
            corpus.keys,
            hold_out(corpus.keys.size, 0, seed)[1],
            num_clusters=num_clusters,
            samples_per_cluster=data.samples_per_cluster,
            dirichlet_alpha=data.dirichlet_alpha,
            seed=seed,
        )
    return DatasetBundle(
        name=corpus.name,
        kind=corpus.kind,
        src_vocab=corpus.src_vocab,
        tgt_vocab=corpus.tgt_vocab,
        shards=tuple(_shard(corpus.src, corpus.tgt, rows) for rows in clusters),
        eval=eval_shard,
        licence=_licence(corpus.name),
        pad_id=corpus.specials.pad,
        bos_id=corpus.specials.bos,
        eos_id=corpus.specials.eos,
        truncated_rows=corpus.truncated_rows,
        tokenizer=corpus.tokenizer,
    )


def _shard(src: IdMatrix, tgt: IdMatrix, rows: Indices) -> Shard:
    # Fancy indexing copies, so the tensors own writable memory and the cached corpus stays intact.
    return Shard(src=torch.from_numpy(src[rows]), tgt=torch.from_numpy(np.asarray(tgt[rows])))


def _licence(name: str) -> str:
    if name in LICENCES:
        return LICENCES[name]
    return pydoc_topics.LICENCE if name == pydoc_topics.NAME else user_files.LICENCE


def size_words(config: ExperimentConfig) -> tuple[str, str, str]:
    """(source, unit, hint) of the too-small message for ``config``'s dataset."""
    name, seq_len = config.data.dataset, config.model.seq_len
    if name == USER_FILES:
        assert config.data.files is not None
        if config.model.kind != "causal_lm":
            return quoted_name(config.data.files.train), "rows", ", or add rows to the file"
        hint = ", lower model.seq_len, or add text to the file"
        windows = f"windows of model.seq_len + 1 = {seq_len + 1} tokens"
        return quoted_name(config.data.files.train), windows, hint
    hint = ""
    if name == "cmudict":
        hint = ", or raise model.seq_len / model.target_len to keep longer words"
    elif name == "django-langid":
        hint = ", or add languages to data.languages"
    elif name.startswith("synthetic"):
        hint = ", or raise model.seq_len so that more distinct strings fit"
    elif name in DATASETS_CAUSAL_LM:
        windows = f"windows of model.seq_len + 1 = {seq_len + 1} tokens"
        return f"dataset {name!r}", windows, ", or lower model.seq_len"
    return f"dataset {name!r}", "samples after filtering", hint


def _check_held_out_sizes(config: ExperimentConfig, num_train: int, num_eval: int) -> None:
    """With an eval file: it must hold data.eval_samples samples, the training file the clusters' shards."""
    data, files = config.data, config.data.files
    if files is None or files.eval is None:  # rows held out of the training file: counted when split
        return
    unit = "windows" if config.model.kind == "causal_lm" else "rows"
    if num_eval < data.eval_samples:
        raise DataError(
            "data.eval_samples",
            data.eval_samples,
            f"the eval file {quoted_name(files.eval)} (data.files.eval) has {num_eval} {unit} but "
            f"data.eval_samples is {data.eval_samples}; lower data.eval_samples or add to the eval file",
        )
    needed = config.network.num_clusters * data.samples_per_cluster
    if num_train < needed:
        raise DataError(
            "data.samples_per_cluster",
            data.samples_per_cluster,
            f"{quoted_name(files.train)} has {num_train} {unit} but network.num_clusters "
            f"({config.network.num_clusters}) x data.samples_per_cluster ({data.samples_per_cluster}) = "
            f"{needed}; lower data.samples_per_cluster or network.num_clusters, or add to the training file",
        )
