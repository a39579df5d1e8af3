from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from collapipe_core.config import ExperimentConfig
from collapipe_core.data.corpus import corpus_key, dataset_kind, load_corpus, vocabularies
from collapipe_core.data.vocab import BOS_ID, UNK_ID

MakeConfig = Callable[..., ExperimentConfig]  # the conftest fixture


def test_dataset_kinds() -> None:
    assert dataset_kind("cmudict") == dataset_kind("synthetic-reverse") == "seq2seq"
    assert dataset_kind("django-langid") == dataset_kind("synthetic-parity") == "classifier"
    with pytest.raises(ValueError, match=r"unknown data\.dataset 'imdb'; choose one of cmudict,"):
        dataset_kind("imdb")


def test_cmudict_drops_words_that_do_not_fit(make_config: MakeConfig) -> None:
    roomy = load_corpus(corpus_key(make_config("cmudict")))
    tight = load_corpus(corpus_key(make_config("cmudict", model={"seq_len": 6, "target_len": 6})))
    assert tight.keys.size < roomy.keys.size
    letters = (tight.src != 0).sum(axis=1)
    phonemes = (tight.tgt != 0).sum(axis=1) - 2  # minus BOS and EOS
    assert letters.max() <= 6 and phonemes.max() <= 5
    assert tight.src_vocab == roomy.src_vocab  # the vocabulary does not depend on the lengths


def test_langid_truncates_after_cls_and_labels_by_language_order(make_config: MakeConfig) -> None:
    corpus = load_corpus(
        corpus_key(make_config("django-langid", languages=["fr", "de"], model={"seq_len": 12}))
    )
    assert corpus.src.shape[1] == 12 and (corpus.src[:, 0] == BOS_ID).all()
    assert corpus.tgt_vocab == ("fr", "de") and set(corpus.tgt.tolist()) == {0, 1}
    rows = {(tuple(r), int(t)) for r, t in zip(corpus.src.tolist(), corpus.tgt.tolist(), strict=True)}
    assert len(rows) == corpus.keys.size  # no duplicate (text, language) after truncation


def test_repeated_language_is_an_error(make_config: MakeConfig) -> None:
    with pytest.raises(ValueError, match=r"data\.languages lists de more than once"):
        corpus_key(make_config("django-langid", languages=["de", "fr", "de"]))


def test_smaller_model_vocab_maps_rare_tokens_to_unk(make_config: MakeConfig) -> None:
    corpus = load_corpus(corpus_key(make_config("cmudict", model={"vocab_size": 20})))
    assert len(corpus.src_vocab) == 20 and "e" in corpus.src_vocab and "q" not in corpus.src_vocab
    assert corpus.src.max() < 20 and (corpus.src == UNK_ID).any()


def test_synthetic_vocab_needs_no_generation_and_corpus_is_read_only(make_config: MakeConfig) -> None:
    key = corpus_key(make_config("synthetic-parity"))
    assert vocabularies(key) == (("<pad>", "<bos>", "<eos>", "<unk>", *"abcdefgh"), ("even", "odd"))
    corpus = load_corpus(key)
    assert not corpus.src.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        np.copyto(corpus.src, 0)


def test_seed_matters_only_for_synthetic_data(make_config: MakeConfig) -> None:
    assert corpus_key(make_config("cmudict", seed=1)) == corpus_key(make_config("cmudict", seed=2))
    assert corpus_key(make_config("synthetic-reverse", seed=1)) != corpus_key(
        make_config("synthetic-reverse", seed=2)
    )
