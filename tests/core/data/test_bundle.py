from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from collapipe_core.config import DataConfig, ExperimentConfig, ModelConfig, NetworkConfig
from collapipe_core.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DataError,
    DatasetBundle,
    dataset_size,
    decode_tokens,
    load_dataset,
    vocab_sizes,
)

MakeConfig = Callable[..., ExperimentConfig]  # the conftest fixture
SEQ2SEQ = ["cmudict", "synthetic-reverse"]
CLASSIFIERS = ["django-langid", "synthetic-parity"]


def _rows(bundle: DatasetBundle, which: str) -> set[tuple[int, ...]]:
    """Each sample as one tuple of source ids (+ label for classifiers), for content comparisons."""
    shards = [bundle.eval] if which == "eval" else list(bundle.shards)
    rows: set[tuple[int, ...]] = set()
    for shard in shards:
        tgt = shard.tgt.unsqueeze(1) if shard.tgt.dim() == 1 else shard.tgt
        rows |= {tuple(r) for r in torch.cat([shard.src, tgt], dim=1).tolist()}
    return rows


@pytest.mark.parametrize("dataset", SEQ2SEQ)
def test_seq2seq_shapes_and_special_ids(make_config: MakeConfig, dataset: str) -> None:
    bundle = load_dataset(make_config(dataset, num_clusters=3, model={"seq_len": 16, "target_len": 12}))
    assert bundle.kind == "seq2seq" and len(bundle.shards) == 3
    for shard in [*bundle.shards, bundle.eval]:
        assert shard.src.dtype == shard.tgt.dtype == torch.int64
        assert shard.src.shape == (len(shard), 16) and shard.tgt.shape == (len(shard), 13)
        assert (shard.tgt[:, 0] == BOS_ID).all() and ((shard.tgt == EOS_ID).sum(dim=1) == 1).all()
        assert (shard.src[:, 0] != PAD_ID).all() and (shard.src < bundle.src_vocab_size).all()
        # Padding only after the content: once PAD appears, PAD to the end.
        for ids in (shard.src, shard.tgt):
            is_pad = ids == PAD_ID
            assert (is_pad[:, :-1] <= is_pad[:, 1:]).all()
    assert [len(s) for s in bundle.shards] == [64, 64, 64] and len(bundle.eval) == 32


def test_cmudict_samples_decode_to_words_and_phonemes(make_config: MakeConfig) -> None:
    bundle = load_dataset(make_config("cmudict"))
    word = "".join(decode_tokens(bundle.eval.src[0].tolist(), bundle.src_vocab))
    phonemes = decode_tokens(bundle.eval.tgt[0].tolist(), bundle.tgt_vocab)
    assert word.isascii() and 1 <= len(word) <= 24 and 1 <= len(phonemes) <= 19
    assert bundle.tgt_vocab_size == 43 and bundle.licence.startswith("BSD-2-Clause")


@pytest.mark.parametrize("dataset", CLASSIFIERS)
def test_classifier_shapes_cls_and_labels(make_config: MakeConfig, dataset: str) -> None:
    bundle = load_dataset(make_config(dataset))
    for shard in [*bundle.shards, bundle.eval]:
        assert shard.src.shape == (len(shard), 24) and shard.tgt.shape == (len(shard),)
        assert shard.tgt.dtype == torch.int64 and (shard.src[:, 0] == BOS_ID).all()
        assert int(shard.tgt.min()) >= 0 and int(shard.tgt.max()) < bundle.tgt_vocab_size


@pytest.mark.parametrize("dataset", SEQ2SEQ + CLASSIFIERS)
def test_vocab_sizes_and_dataset_size_agree_with_the_bundle(make_config: MakeConfig, dataset: str) -> None:
    config = make_config(dataset)
    bundle = load_dataset(config)
    assert vocab_sizes(config) == (bundle.src_vocab_size, bundle.tgt_vocab_size)
    assert dataset_size(config) >= len(bundle.eval) + sum(map(len, bundle.shards))


@pytest.mark.parametrize("dataset", SEQ2SEQ + CLASSIFIERS)
def test_same_config_same_tensors_and_new_seed_new_split(make_config: MakeConfig, dataset: str) -> None:
    first, again = load_dataset(make_config(dataset)), load_dataset(make_config(dataset))
    other = load_dataset(make_config(dataset, seed=1))
    assert all(
        torch.equal(a.src, b.src) and torch.equal(a.tgt, b.tgt)
        for a, b in zip(first.shards, again.shards, strict=True)
    )
    assert torch.equal(first.eval.src, again.eval.src)
    assert not torch.equal(first.eval.src, other.eval.src)
    assert not torch.equal(first.shards[0].src, other.shards[0].src)
    assert first.src_vocab == other.src_vocab  # the vocabulary does not depend on the split


@pytest.mark.parametrize("dataset", SEQ2SEQ + CLASSIFIERS)
@pytest.mark.parametrize("alpha", [None, 0.1])
def test_eval_set_is_disjoint_from_training(
    make_config: MakeConfig, dataset: str, alpha: float | None
) -> None:
    bundle = load_dataset(make_config(dataset, num_clusters=3, dirichlet_alpha=alpha))
    assert not _rows(bundle, "eval") & _rows(bundle, "train")


def test_shards_can_be_modified_without_touching_the_cache(make_config: MakeConfig) -> None:
    config = make_config("synthetic-parity")
    load_dataset(config).shards[0].src.zero_()
    assert (load_dataset(config).shards[0].src[:, 0] == BOS_ID).all()


def _mean_tv(bundle: DatasetBundle) -> float:
    labels = [s.tgt.numpy() for s in bundle.shards]
    pooled = np.bincount(np.concatenate(labels), minlength=bundle.tgt_vocab_size) / sum(map(len, labels))
    per_shard = [np.bincount(x, minlength=bundle.tgt_vocab_size) / len(x) for x in labels]
    return float(np.mean([0.5 * np.abs(p - pooled).sum() for p in per_shard]))


def test_small_dirichlet_alpha_skews_languages_across_clusters(make_config: MakeConfig) -> None:
    def tv(alpha: float | None) -> float:
        configs = [
            make_config(
                "django-langid", seed=s, num_clusters=6, samples_per_cluster=200, dirichlet_alpha=alpha
            )
            for s in range(3)
        ]
        return float(np.mean([_mean_tv(load_dataset(c)) for c in configs]))

    skewed, mild, iid = tv(0.05), tv(100.0), tv(None)
    assert skewed > 0.5 > 0.1 > max(mild, iid)


def test_too_small_dataset_names_the_fields(make_config: MakeConfig) -> None:
    config = make_config("django-langid", languages=["de", "fr"], samples_per_cluster=1000, eval_samples=100)
    with pytest.raises(DataError) as error:
        load_dataset(config)
    assert error.value.field == "data.samples_per_cluster"
    message = str(error.value)
    assert f"has {dataset_size(config)} samples" in message and "needs 2100" in message
    for field in ("data.eval_samples", "data.samples_per_cluster", "network.num_clusters"):
        assert field in message


def test_unknown_language_is_an_error(make_config: MakeConfig) -> None:
    with pytest.raises(ValueError, match=r"unknown language code 'klingon'.*\bde\b"):
        load_dataset(make_config("django-langid", languages=["de", "klingon"]))


def test_kind_mismatch_is_an_error() -> None:
    config = ExperimentConfig(
        model=ModelConfig(kind="classifier"),
        data=DataConfig(dataset="cmudict"),
        network=NetworkConfig(num_clusters=2),
    )
    for entry_point in (load_dataset, vocab_sizes, dataset_size):
        with pytest.raises(
            ValueError, match=r"'cmudict' is a seq2seq dataset but model\.kind is 'classifier'"
        ):
            entry_point(config)


def test_default_config_loads() -> None:
    bundle = load_dataset(ExperimentConfig())
    assert (
        bundle.name == "cmudict" and [len(s) for s in bundle.shards] == [512, 512] and len(bundle.eval) == 256
    )


@pytest.mark.parametrize("dataset", SEQ2SEQ + CLASSIFIERS)
def test_character_datasets_use_the_fixed_special_ids_and_cut_nothing(
    make_config: MakeConfig, dataset: str
) -> None:
    bundle = load_dataset(make_config(dataset))
    assert (bundle.pad_id, bundle.bos_id, bundle.eos_id, bundle.truncated_rows) == (PAD_ID, BOS_ID, EOS_ID, 0)


def test_pydoc_topics_is_a_causal_lm_dataset() -> None:
    config = ExperimentConfig(data=DataConfig(dataset="pydoc-topics"), model=ModelConfig(kind="seq2seq"))
    with pytest.raises(
        ValueError, match=r"'pydoc-topics' is a causal_lm dataset but model\.kind is 'seq2seq'"
    ):
        load_dataset(config)
