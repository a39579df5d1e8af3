"""A whole dataset, filtered to the model's lengths and encoded as id matrices, before any split.

Vocabularies come from the unfiltered dataset (every word of the dictionary, every text of the chosen
languages), so they depend only on the dataset, ``data.languages`` and ``model.vocab_size``. Length
handling differs by kind: seq2seq drops words longer than ``seq_len`` or with more than
``target_len - 1`` target tokens; classifiers keep the first ``seq_len - 1`` characters (after the
CLS token) and drop texts that become duplicates within their language.

Parsing and encoding are cached per process, keyed only on the config fields that change them.

This module builds the character-level datasets; :mod:`~collapipe_core.data.pydoc_topics` and
:mod:`~collapipe_core.data.user_files` build the tokenised ones into the same :class:`Corpus`.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, cast

import numpy as np

from collapipe_core.config import DATASET_KINDS, DATASETS, ExperimentConfig
from collapipe_core.data import cmudict, po_catalogues, synthetic
from collapipe_core.data.partition import Indices
from collapipe_core.data.vocab import (
    BOS_ID,
    SPECIAL_TOKENS,
    IdMatrix,
    SpecialIds,
    build_vocab,
    encode_rows,
    encode_targets,
)

if TYPE_CHECKING:
    from collapipe_core.data.tokenization import TextTokenizer

Kind = Literal["seq2seq", "classifier", "causal_lm"]
CHARACTER_SPECIALS = SpecialIds()
LICENCES = {
    "cmudict": cmudict.LICENCE,
    "django-langid": po_catalogues.LICENCE,
    "synthetic-reverse": synthetic.LICENCE,
    "synthetic-parity": synthetic.LICENCE,
}


class CorpusKey(NamedTuple):
    """What a corpus depends on; fields a dataset ignores are normalised so caches are shared."""

    dataset: str
    seq_len: int
    target_len: int
    languages: tuple[str, ...]  # django-langid only
    vocab_size: int | None
    seed: int  # synthetic only: the strings are generated from it
    num_samples: int  # synthetic only: how many strings to generate


@dataclass(frozen=True)
class Corpus:
    """Every usable sample of one dataset, encoded. Arrays are read-only (they are cached)."""

    name: str
    kind: Kind
    src_vocab: tuple[str, ...]
    tgt_vocab: tuple[str, ...]  # seq2seq: id -> token; classifier: class names
    src: IdMatrix  # (n, seq_len)
    tgt: IdMatrix  # seq2seq: (n, target_len + 1); classifier: (n,); causal_lm: (n, seq_len)
    keys: Indices  # (n,) group of each sample for non-IID splits: label, first source token, topic ...
    held_out: tuple[IdMatrix, IdMatrix] | None = None  # (src, tgt) kept apart from src/tgt (user files)
    specials: SpecialIds = CHARACTER_SPECIALS
    truncated_rows: int = 0  # user files: rows cut to fit the model's lengths
    tokenizer: TextTokenizer | None = None  # the subword tokenizer that encoded it (None: characters)


def dataset_kind(name: str) -> Kind:
    """The task kind of a bundled dataset; unknown names raise ValueError listing the known ones."""
    if name not in DATASETS:
        raise ValueError(f"unknown data.dataset {name!r}; choose one of {', '.join(DATASETS)}")
    if name not in DATASET_KINDS:
        raise ValueError(f"data.dataset {name!r} takes its kind from model.kind")
    return cast(Kind, DATASET_KINDS[name])


def corpus_key(config: ExperimentConfig) -> CorpusKey:
    """The cache key of ``config``'s corpus, checking dataset name and languages on the way."""
    name, model, data = config.data.dataset, config.model, config.data
    dataset_kind(name)
    synthetic_size = 2 * (data.eval_samples + config.network.num_clusters * data.samples_per_cluster)
    languages = tuple(data.languages) if name == "django-langid" else ()
    repeated = sorted({code for code in languages if languages.count(code) > 1})
    if repeated:
        raise ValueError(f"data.languages lists {', '.join(repeated)} more than once; each class once")
    return CorpusKey(
        dataset=name,
        seq_len=model.seq_len,
        target_len=model.target_len if dataset_kind(name) == "seq2seq" else 0,
        languages=languages,
        vocab_size=model.vocab_size,
        seed=config.seed if name.startswith("synthetic") else 0,
        num_samples=synthetic_size if name.startswith("synthetic") else 0,
    )


def _raw_samples(key: CorpusKey) -> tuple[list[str], list[tuple[str, ...]], list[int]]:
    """(sources, seq2seq targets, classifier labels) before length handling; one list stays empty."""
    if key.dataset == "cmudict":
        entries = cmudict.load_cmudict()
        return [w for w, _ in entries], [p for _, p in entries], []
    if key.dataset == "synthetic-reverse":
        pairs = synthetic.reverse_pairs(key.seed, key.num_samples, min(key.seq_len, key.target_len - 1))
        return [s for s, _ in pairs], [t for _, t in pairs], []
    if key.dataset == "synthetic-parity":
        samples = synthetic.parity_samples(key.seed, key.num_samples, key.seq_len - 1)
        return [s for s, _ in samples], [], [label for _, label in samples]
    texts = [po_catalogues.language_texts(code) for code in key.languages]
    return [t for group in texts for t in group], [], [i for i, group in enumerate(texts) for _ in group]


def vocabularies(key: CorpusKey) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(source vocabulary, target vocabulary or class names) of the whole, unfiltered dataset."""
    return _vocabularies(key.dataset, key.languages, key.vocab_size)


@functools.lru_cache(maxsize=16)
def _vocabularies(
    dataset: str, languages: tuple[str, ...], vocab_size: int | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if dataset.startswith("synthetic"):  # fixed alphabet: nothing to generate or read
        src = build_vocab(dict.fromkeys(synthetic.ALPHABET, 1), vocab_size)
        tgt = SPECIAL_TOKENS + tuple(synthetic.ALPHABET)
        return src, tgt if dataset == "synthetic-reverse" else synthetic.PARITY_CLASSES
    if dataset == "cmudict":
        entries = cmudict.load_cmudict()
        src = build_vocab(Counter("".join(word for word, _ in entries)), vocab_size)
        return src, build_vocab(Counter(p for _, phonemes in entries for p in phonemes))
    texts = (text for code in languages for text in po_catalogues.language_texts(code))
    return build_vocab(Counter("".join(texts)), vocab_size), languages


@functools.lru_cache(maxsize=4)
def load_corpus(key: CorpusKey) -> Corpus:
    """The encoded corpus for ``key`` (see the module doc for the length rules)."""
    src_vocab, tgt_vocab = vocabularies(key)
    sources, targets, labels = _raw_samples(key)
    if dataset_kind(key.dataset) == "seq2seq":
        kept = [i for i, (s, t) in enumerate(zip(sources, targets, strict=True)) if _fits(s, t, key)]
        src = encode_rows([sources[i] for i in kept], src_vocab, key.seq_len)
        tgt = encode_targets([targets[i] for i in kept], tgt_vocab, key.target_len)
        keys = src[:, 0].copy()  # first letter
    else:
        unique = dict.fromkeys(
            (label, text[: key.seq_len - 1]) for text, label in zip(sources, labels, strict=True)
        )
        src = encode_rows([text for _, text in unique], src_vocab, key.seq_len, start=1)
        src[:, 0] = BOS_ID  # CLS
        tgt = np.fromiter((label for label, _ in unique), dtype=np.int64, count=len(unique))
        keys = tgt.copy()
    for array in (src, tgt, keys):
        array.flags.writeable = False
    return Corpus(key.dataset, dataset_kind(key.dataset), src_vocab, tgt_vocab, src, tgt, keys)


def _fits(source: str, target: tuple[str, ...], key: CorpusKey) -> bool:
    return len(source) <= key.seq_len and len(target) <= key.target_len - 1
