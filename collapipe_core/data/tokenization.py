"""Subword tokenizers for user files and pydoc-topics (``data.tokenizer``), trained with ``tokenizers``.

``bpe`` and ``wordpiece`` are trained on the training texts only (the caller leaves held-out rows
out), offline, in well under a second for a few MB of text:

- **Size**: at most ``data.tokenizer.vocab_size`` tokens, capped at ``model.vocab_size`` when that is
  set (so every id fits the model's embedding, as with the character vocabularies). Little text may
  give fewer tokens; the bundle's vocabulary is what was trained.
- **Specials** at the ids of :mod:`collapipe_core.data.vocab`: ``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2,
  ``<unk>`` 3. Texts are NFC-normalised, case is kept.
- **Alphabet**: the most frequent characters of the training texts (ties by character), as many as
  the size leaves room for; other characters encode as ``<unk>``.
- **bpe**: SentencePiece-style: a space becomes ``▁`` at the start of the next word, BPE merges build
  pieces across characters; decoding restores the spaces.
- **wordpiece**: BERT-style: words split at whitespace and punctuation, pieces that continue a word
  start with ``##``. The library's WordPiece trainer numbers pieces in hash order (a different
  vocabulary in every process), so the vocabulary is derived from a BPE trained on ``▁word``
  strings instead: ``▁``-initial pieces start words, the others continue them; ids in sorted order.
- **Deterministic**: same texts and size, same vocabulary and ids, in any process. Trained
  tokenizers are cached per process by (kind, size, digest of the training texts), so validation and
  the run train once.

``pretrained`` loads ``model.pretrained_path`` (:mod:`collapipe_core.data.pretrained_tokenizer`).
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from collapipe_core.config import ExperimentConfig
from collapipe_core.data.errors import needed_workspace
from collapipe_core.data.vocab import SPECIAL_TOKENS, UNK_ID, SpecialIds
from collapipe_core.workspace import Workspace

WORD_START = "\u2581"  # ▁
CONTINUATION = "##"
MAX_CACHED = 8
ENCODE_CHUNK = 8192
_trained: dict[tuple[str, int, str], TextTokenizer] = {}


@dataclass(frozen=True)
class TextTokenizer:
    """A tokenizer with the ids its special tokens have and its vocabulary (id -> token)."""

    tokenizer: Tokenizer
    specials: SpecialIds
    vocab: tuple[str, ...]

    def encode(self, texts: Sequence[str], max_tokens: int | None = None) -> list[list[int]]:
        """Token ids of each text, without special tokens (the callers add them), encoded
        :data:`ENCODE_CHUNK` texts at a time: an encoding holds tokens, offsets and masks besides the
        ids, so a million of them at once took gigabytes. TooManyTokens as soon as the texts hold more
        than ``max_tokens``."""
        ids: list[list[int]] = []
        count = 0
        for start in range(0, len(texts), ENCODE_CHUNK):
            chunk = list(texts[start : start + ENCODE_CHUNK])
            encodings = self.tokenizer.encode_batch_fast(chunk, add_special_tokens=False)  # no offsets
            ids.extend(encoding.ids for encoding in encodings)
            count += sum(len(row) for row in ids[start:])
            if max_tokens is not None and count > max_tokens:
                raise TooManyTokens(count)
        return ids


class TooManyTokens(Exception):
    """Texts hold more tokens than the caller takes (``count``: at least this many)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} tokens")
        self.count = count


def make_tokenizer(
    config: ExperimentConfig, workspace: Workspace | None, training_texts: Sequence[str]
) -> TextTokenizer:
    """The tokenizer ``data.tokenizer`` asks for: trained on ``training_texts`` or the pretrained one
    (read through ``workspace``, which may be None only for trained ones)."""
    kind = config.data.tokenizer.kind
    if kind == "pretrained":
        from collapipe_core.data.pretrained_tokenizer import pretrained_tokenizer

        return pretrained_tokenizer(config, needed_workspace(workspace, "model.pretrained_path"))
    return trained_tokenizer(kind, training_texts, target_vocab_size(config))


def target_vocab_size(config: ExperimentConfig) -> int:
    """``data.tokenizer.vocab_size``, capped at ``model.vocab_size`` when that is set."""
    size = config.data.tokenizer.vocab_size
    return size if config.model.vocab_size is None else min(size, config.model.vocab_size)


def trained_tokenizer(
    kind: Literal["bpe", "wordpiece"], texts: Sequence[str], vocab_size: int
) -> TextTokenizer:
    """A ``kind`` tokenizer of at most ``vocab_size`` tokens trained on ``texts`` (cached per process)."""
    normalized = [unicodedata.normalize("NFC", text) for text in texts]
    key = (kind, vocab_size, _digest(normalized))
    if key not in _trained:
        train = _train_bpe if kind == "bpe" else _train_wordpiece
        tokenizer = train(normalized, vocab_size)
        vocab = tuple(tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size()))
        if len(_trained) >= MAX_CACHED:
            _trained.pop(next(iter(_trained)))
        _trained[key] = TextTokenizer(tokenizer, SpecialIds(), vocab)
    return _trained[key]


def _digest(texts: Sequence[str]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _alphabet(counts: Counter[str], size: int) -> list[str]:
    """The ``size`` most frequent characters (ties broken by the character), sorted."""
    return sorted(sorted(counts, key=lambda char: (-counts[char], char))[: max(1, size)])


def _train_bpe(texts: list[str], vocab_size: int) -> Tokenizer:
    counts = Counter(char for text in texts for char in text.replace(" ", WORD_START))
    counts[WORD_START] += 1
    alphabet = _alphabet(counts, vocab_size - len(SPECIAL_TOKENS))
    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(  # a fixed initial alphabet: the library breaks frequency ties by hash
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def _train_wordpiece(texts: list[str], vocab_size: int) -> Tokenizer:
    splitter = pre_tokenizers.BertPreTokenizer()
    words = [WORD_START + word for text in texts for word, _ in splitter.pre_tokenize_str(text)]
    # Room for each character twice (word start and ##continuation) and for the merges.
    alphabet = _alphabet(Counter(char for word in words for char in word[1:]), (vocab_size - 5) // 2)
    bpe = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))  # no pre-tokenizer: one "▁word" each
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(alphabet) + 1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=[WORD_START, *alphabet],
        limit_alphabet=len(alphabet) + 1,
        show_progress=False,
    )
    bpe.train_from_iterator(words, trainer=trainer)
    pieces = {
        piece[1:] if piece.startswith(WORD_START) else CONTINUATION + piece
        for piece in bpe.get_vocab()
        if piece not in SPECIAL_TOKENS and piece != WORD_START
    }
    pieces |= set(alphabet) | {CONTINUATION + char for char in alphabet}
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + tuple(sorted(pieces)))}
    tokenizer = Tokenizer(
        models.WordPiece(vocab, unk_token=SPECIAL_TOKENS[UNK_ID], continuing_subword_prefix=CONTINUATION)
    )
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = splitter
    tokenizer.decoder = decoders.WordPiece(prefix=CONTINUATION)
    return tokenizer
