from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import EOS_ID, PAD_ID, DatasetBundle, dataset_size, load_dataset, vocab_sizes
from collapipe_core.data.pydoc_topics import load_pydoc_corpus, parse_topics, topic_documents

MakeConfig = Callable[..., ExperimentConfig]  # the conftest fixture


def test_reading_the_topics_neither_imports_nor_runs_pydoc_data() -> None:
    # A fresh interpreter, so modules imported by other tests cannot hide an import.
    code = (
        "import sys\n"
        "from collapipe_core.data.pydoc_topics import topic_documents\n"
        "documents = topic_documents()\n"
        "print(len(documents), sum(len(text) for _, text in documents))\n"
        "print(any(name.startswith('pydoc_data') for name in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    num_topics, num_chars, imported = out.split()
    assert int(num_topics) >= 70 and 400_000 < int(num_chars) < 1_000_000 and imported == "False"


def test_topics_are_sorted_prose() -> None:
    documents = topic_documents()
    names = [name for name, _ in documents]
    assert names == sorted(names) and "assert" in names
    assert dict(documents)["assert"].startswith('The "assert" statement')


def test_parse_evaluates_only_a_literal() -> None:
    assert parse_topics("# comment\ntopics = {'a': 'x' 'y'}\n") == {"a": "xy"}
    with pytest.raises(ValueError, match="malformed"):
        parse_topics("topics = {'a': __import__('os').getcwd()}\n")
    with pytest.raises(ValueError, match=r"no 'topics = \{\.\.\.\}'"):
        parse_topics("other = {'a': 'b'}\n")


def test_windows_are_seq_len_plus_one_tokens_of_consecutive_text(make_config: MakeConfig) -> None:
    config = make_config("pydoc-topics", model={"seq_len": 32}, dirichlet_alpha=None)
    bundle = load_dataset(config)
    assert bundle.kind == "causal_lm" and bundle.licence.startswith("PSF-2.0")
    assert bundle.src_vocab[:4] == ("<pad>", "<bos>", "<eos>", "<unk>") and bundle.src_vocab_size <= 2000
    for shard in [*bundle.shards, bundle.eval]:
        assert shard.src.shape == shard.tgt.shape == (len(shard), 32)
        assert torch.equal(shard.src[:, 1:], shard.tgt[:, :-1]) and not (shard.src == PAD_ID).any()
    corpus = load_pydoc_corpus(config, None)
    stream = np.concatenate([corpus.src, corpus.tgt[:, -1:]], axis=1)  # each window: seq_len + 1 tokens
    assert stream.shape[1] == 33 and (stream == EOS_ID).sum() >= len(topic_documents()) - 1
    assert vocab_sizes(config) == (bundle.src_vocab_size, bundle.src_vocab_size)
    assert dataset_size(config) == corpus.keys.size > 3000


def _topic_tv(bundle: DatasetBundle, config: ExperimentConfig) -> float:
    """Mean total-variation distance between each shard's topic mix and the pooled one."""
    corpus = load_pydoc_corpus(config, None)
    topic_of = {row.tobytes(): int(key) for row, key in zip(corpus.src, corpus.keys, strict=True)}
    shards = [np.array([topic_of[row.tobytes()] for row in s.src.numpy()]) for s in bundle.shards]
    pooled = np.bincount(np.concatenate(shards), minlength=len(topic_documents())) / sum(map(len, shards))
    mixes = [np.bincount(s, minlength=len(topic_documents())) / len(s) for s in shards]
    return float(np.mean([0.5 * np.abs(mix - pooled).sum() for mix in mixes]))


def test_small_alpha_gives_each_cluster_few_topics(make_config: MakeConfig) -> None:
    def tv(alpha: float | None) -> float:
        config = make_config("pydoc-topics", num_clusters=4, samples_per_cluster=200, dirichlet_alpha=alpha)
        return _topic_tv(load_dataset(config), config)

    assert tv(0.05) > 0.5 > 0.3 > tv(None)
