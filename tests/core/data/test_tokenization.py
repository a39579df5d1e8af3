from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any, Literal

import pytest

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import UNK_ID, load_dataset
from collapipe_core.data.tokenization import target_vocab_size, trained_tokenizer
from collapipe_core.data.vocab import SPECIAL_TOKENS
from collapipe_core.workspace import Workspace

MakeFilesConfig = Callable[..., ExperimentConfig]  # the conftest fixtures
WriteRows = Callable[[list[dict[str, Any]], str], str]
TokenizerKind = Literal["bpe", "wordpiece"]
KINDS: list[TokenizerKind] = ["bpe", "wordpiece"]
TEXTS = [f"the quick brown fox {i} jumps over the lazy dog, again and again" for i in range(50)]


@pytest.mark.parametrize("kind", KINDS)
def test_specials_sit_at_the_fixed_ids_and_text_round_trips(kind: TokenizerKind) -> None:
    tokenizer = trained_tokenizer(kind, TEXTS, 120)
    assert tokenizer.vocab[:4] == SPECIAL_TOKENS and len(tokenizer.vocab) <= 120
    ids = tokenizer.encode(["the lazy fox"])[0]
    assert UNK_ID not in ids and tokenizer.tokenizer.decode(ids) == "the lazy fox"


@pytest.mark.parametrize("kind", KINDS)
def test_vocabulary_never_exceeds_the_target_even_with_many_characters(kind: TokenizerKind) -> None:
    texts = ["".join(chr(0x400 + (i * 7 + j) % 200) for j in range(40)) for i in range(30)]
    tokenizer = trained_tokenizer(kind, texts, 64)
    assert len(tokenizer.vocab) <= 64 and len(set(tokenizer.vocab)) == len(tokenizer.vocab)
    assert UNK_ID in tokenizer.encode(texts[:1])[0]  # the rarest characters did not fit


def test_model_vocab_size_caps_the_tokenizer(make_files_config: MakeFilesConfig) -> None:
    config = make_files_config("causal_lm", "t.jsonl", tokenizer={"vocab_size": 500})
    assert target_vocab_size(config) == 500
    capped = make_files_config(
        "causal_lm", "t.jsonl", tokenizer={"vocab_size": 500}, model={"vocab_size": 99}
    )
    assert target_vocab_size(capped) == 99


@pytest.mark.parametrize("kind", KINDS)
def test_same_texts_give_the_cached_tokenizer(kind: TokenizerKind) -> None:
    first = trained_tokenizer(kind, TEXTS, 100)
    assert trained_tokenizer(kind, list(TEXTS), 100) is first
    assert trained_tokenizer(kind, TEXTS[:-1], 100) is not first


def test_vocabularies_are_the_same_in_every_process() -> None:
    # The tokenizers library numbers WordPiece pieces in hash order; ours must not depend on it.
    code = (
        "import hashlib\n"
        "from collapipe_core.data.tokenization import trained_tokenizer\n"
        "texts = [f'word{i % 13} piece{i % 7}, more-text {i}' for i in range(200)]\n"
        "for kind in ('bpe', 'wordpiece'):\n"
        "    saved = trained_tokenizer(kind, texts, 90).tokenizer.to_str().encode()\n"
        "    print(hashlib.sha256(saved).hexdigest())\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in "ab"
    ]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout.split()) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_held_out_rows_stay_out_of_the_vocabulary(
    write_rows: WriteRows, make_files_config: MakeFilesConfig, kind: TokenizerKind
) -> None:
    # Each row carries one character no other row has: held-out rows' characters must be unknown.
    rows = [{"text": f"some shared words {chr(0x4E00 + i)}", "label": i % 2} for i in range(100)]
    config = make_files_config(
        "classifier", write_rows(rows, "t.jsonl"), tokenizer={"kind": kind, "vocab_size": 2000}
    )
    bundle = load_dataset(config, Workspace.local())
    vocab = "".join(bundle.src_vocab)
    unique = {chr(0x4E00 + i) for i in range(100)}
    seen = {char for char in unique if char in vocab}
    assert len(seen) == 100 - config.data.eval_samples
    assert (bundle.eval.src == UNK_ID).any(dim=1).all()  # every held-out row has its unknown character
    assert not any((shard.src == UNK_ID).any() for shard in bundle.shards)


@pytest.mark.parametrize("kind", KINDS)
def test_a_token_only_in_the_eval_file_is_not_in_the_vocabulary(
    write_rows: WriteRows, make_files_config: MakeFilesConfig, kind: TokenizerKind
) -> None:
    train = write_rows([{"text": f"plain words number {i} " * 8} for i in range(60)], "train.jsonl")
    held = write_rows([{"text": f"zebraqu \u03a9 {i} words " * 8} for i in range(60)], "eval.jsonl")
    config = make_files_config("causal_lm", train, eval=held, tokenizer={"kind": kind, "vocab_size": 300})
    bundle = load_dataset(config, Workspace.local())
    assert not any("\u03a9" in token or "zebra" in token for token in bundle.src_vocab)
    assert (bundle.eval.src == UNK_ID).any()
