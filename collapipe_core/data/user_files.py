"""The user's own dataset (``data.dataset: files``) as a :class:`~collapipe_core.data.corpus.Corpus`.

The task kind is ``model.kind``; the files and their columns are ``data.files`` (read and checked by
:mod:`~collapipe_core.data.records`), the tokenizer is ``data.tokenizer``
(:mod:`~collapipe_core.data.tokenization`).

- **Held-out set**: ``data.files.eval`` when given (the bundle draws ``data.eval_samples`` of its
  samples); otherwise ``data.eval_samples`` rows of the training file, chosen by the seeded split of
  :mod:`~collapipe_core.data.partition`. Classifier and seq2seq rows are held out *before* the
  tokenizer is trained, so it never sees them. A causal_lm's samples are windows, which exist only
  after tokenising: without an eval file its tokenizer is trained on the whole training file and the
  held-out windows are a seeded split of all windows (give ``files.eval`` to keep held-out text out of
  the vocabulary).
- **Classes** (classifier): the training file's distinct labels in sorted order (numbers by value);
  the class names are the labels as text. An eval-file label the training file lacks is refused.
- **Lengths**: classifier and seq2seq rows longer than the model takes are cut and counted
  (``truncated_rows``), or refused with ``data.truncate: false``; causal_lm text is cut into windows.
- **Non-IID key**: ``data.files.group_column`` when set, else the label (classifier), else one group
  for all (an IID split). A causal_lm window belongs to the document its first token comes from.

The encoded corpus is cached per process by the files' content, the tokenizer and the config fields
that shape it, so validation and the run do the work once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from collapipe_core.config import ExperimentConfig
from collapipe_core.data.corpus import Corpus
from collapipe_core.data.errors import quoted_name, too_few_samples
from collapipe_core.data.partition import Indices, hold_out
from collapipe_core.data.pretrained_tokenizer import tokenizer_files_digest
from collapipe_core.data.records import Label, Records, file_digest, parse_records, read_file
from collapipe_core.data.sequences import Flags, causal_windows, classifier_rows, seq2seq_rows
from collapipe_core.data.tokenization import TextTokenizer, TooManyTokens, make_tokenizer, target_vocab_size
from collapipe_core.data.vocab import IdMatrix
from collapipe_core.quote import short
from collapipe_core.workspace import Workspace

NAME = "files"
LICENCE = "the user's own data (data.files): its licence is the user's to honour"
MAX_CACHED = 4
MAX_CORPUS_IDS = 2**27
"""Most token ids a dataset's id matrices hold (1 GiB as int64): rows × padded length for classifier
and seq2seq files (checked before encoding), tokens for causal_lm (counted while encoding)."""
_built: dict[tuple[object, ...], Corpus] = {}


def load_file_corpus(config: ExperimentConfig, workspace: Workspace) -> Corpus:
    """The user's files encoded for ``model.kind``; DataError names the field, file and row of a problem.

    The files are read every time and parsed only when what is built from them is not cached: the key
    is their bytes' digests (and the tokenizer files'), with every config field the corpus depends on.
    """
    files, kind, model = config.data.files, config.model.kind, config.model
    assert files is not None
    train_data = read_file(config, workspace, "train")
    held_data = read_file(config, workspace, "eval") if files.eval is not None else None
    key: tuple[object, ...] = (file_digest(train_data), held_data and file_digest(held_data))
    key += (_tokenizer_key(config, workspace), config.seed, config.network.num_clusters)
    key += (config.data.model_dump_json(), kind, model.seq_len, model.target_len, model.vocab_size)
    if key not in _built:
        train = parse_records(config, workspace, "train", train_data)
        held = parse_records(config, workspace, "eval", held_data) if held_data is not None else None
        del train_data, held_data  # the parsed rows are what is kept while the corpus is built
        corpus = _built_corpus(config, workspace, train, held)
        if len(_built) >= MAX_CACHED:
            _built.pop(next(iter(_built)))
        _built[key] = corpus
    return _built[key]


def _tokenizer_key(config: ExperimentConfig, workspace: Workspace) -> tuple[object, ...]:
    """What, besides the training texts, decides the tokenizer: its kind and size, or its files."""
    tokenizer = config.data.tokenizer
    if tokenizer.kind == "pretrained" and config.model.pretrained_path is not None:
        return ("pretrained", tokenizer_files_digest(config, workspace))
    return (tokenizer.kind, target_vocab_size(config))


def _built_corpus(
    config: ExperimentConfig, workspace: Workspace, train: Records, held: Records | None
) -> Corpus:
    files, kind = config.data.files, config.model.kind
    assert files is not None
    rows = np.arange(train.table.num_rows)
    held_rows: Indices | None = None
    if held is None and kind != "causal_lm":  # hold rows out before the tokenizer sees the data
        data = config.data
        if rows.size < data.eval_samples + config.network.num_clusters * data.samples_per_cluster:
            hint = ", or add rows to the file"
            raise too_few_samples(config, int(rows.size), quoted_name(files.train), "rows", hint)
        held_rows, rest = hold_out(rows.size, data.eval_samples, config.seed)
        rows = np.sort(rest)
    tokenizer = make_tokenizer(config, workspace, _training_texts(train, rows))
    if kind == "causal_lm":
        return _causal_lm(config, tokenizer, train, held)
    return _rows_corpus(config, tokenizer, train, held, rows, held_rows)


def _training_texts(train: Records, rows: Indices) -> list[str]:
    texts = [train.texts[i] for i in rows.tolist()]
    return texts + [train.targets[i] for i in rows.tolist()] if train.targets is not None else texts


def _encoded(
    config: ExperimentConfig,
    tokenizer: TextTokenizer,
    records: Records,
    classes: dict[tuple[str, Label], int],
) -> tuple[IdMatrix, IdMatrix, Flags]:
    """(src, tgt, cut) of every row of one file."""
    model, specials = config.model, tokenizer.specials
    if records.targets is not None:
        sources, targets = tokenizer.encode(records.texts), tokenizer.encode(records.targets)
        return seq2seq_rows(sources, targets, model.seq_len, model.target_len, specials)
    src, cut = classifier_rows(tokenizer.encode(records.texts), model.seq_len, specials)
    assert records.labels is not None
    keys = [_label_key(label) for label in records.labels]
    for row, (label, key) in enumerate(zip(records.labels, keys, strict=True)):
        if key not in classes:
            raise records.context.error(
                f"{records.where(row)}: label {short(label)} does not occur in the training file, so the "
                "model cannot learn it; fix the label or add training rows with it",
                field="data.files.label_column",
            )
    labels = np.array([classes[key] for key in keys], dtype=np.int64)
    return src, labels, cut


def _rows_corpus(
    config: ExperimentConfig,
    tokenizer: TextTokenizer,
    train: Records,
    held: Records | None,
    rows: Indices,
    held_rows: Indices | None,
) -> Corpus:
    """Classifier or seq2seq: ``rows`` of the training file train; the eval file or ``held_rows`` are held
    out."""
    kind, model = config.model.kind, config.model
    width = model.seq_len + (model.target_len + 1 if kind == "seq2seq" else 0)
    rows_in_all = train.table.num_rows + (held.table.num_rows if held is not None else 0)
    if rows_in_all * width > MAX_CORPUS_IDS:
        lengths = "model.seq_len" + (" + model.target_len + 1" if kind == "seq2seq" else "")
        raise train.context.error(
            f"holds{' with data.files.eval' if held is not None else ''} {rows_in_all:,} rows of {width} "
            f"token ids each ({lengths}), {rows_in_all * width:,} in all, more than the "
            f"{MAX_CORPUS_IDS:,} token ids CollaPipe holds for a dataset; use fewer rows or shorter sequences"
        )
    ordered = sorted(set(train.labels or []), key=_label_order)
    classes = {_label_key(label): i for i, label in enumerate(ordered)}
    src, tgt, cut = _encoded(config, tokenizer, train, classes)
    if train.groups is not None:
        keys = _group_ids(train.groups)
    else:
        keys = tgt.copy() if kind == "classifier" else np.zeros(len(src), dtype=np.int64)
    if held is not None:
        eval_src, eval_tgt, eval_cut = _encoded(config, tokenizer, held, classes)
        _refuse_cut(config, [(train, cut), (held, eval_cut)])
        truncated = int(cut.sum() + eval_cut.sum())
    else:
        assert held_rows is not None
        _refuse_cut(config, [(train, cut)])
        eval_src, eval_tgt, truncated = src[held_rows], tgt[held_rows], int(cut.sum())
    names = tuple(_class_name(label) for label in ordered) if kind == "classifier" else tokenizer.vocab
    src, tgt, keys, eval_src, eval_tgt = _read_only(src[rows], tgt[rows], keys[rows], eval_src, eval_tgt)
    held_out = (eval_src, eval_tgt)
    return Corpus(
        NAME, kind, tokenizer.vocab, names, src, tgt, keys, held_out, tokenizer.specials, truncated, tokenizer
    )


def _causal_lm(
    config: ExperimentConfig, tokenizer: TextTokenizer, train: Records, held: Records | None
) -> Corpus:
    """Windows of the training file's documents; held out: the eval file's windows (or none: a split)."""
    eos = tokenizer.specials.eos
    documents = _documents(tokenizer, [train] + ([held] if held is not None else []))
    src, tgt, first_doc = causal_windows(documents[0], config.model.seq_len, eos)
    keys = _group_ids(train.groups)[first_doc] if train.groups is not None else np.zeros_like(first_doc)
    held_out = None
    if held is not None:
        eval_src, eval_tgt, _ = causal_windows(documents[1], config.model.seq_len, eos)
        eval_src, eval_tgt = _read_only(eval_src, eval_tgt)
        held_out = (eval_src, eval_tgt)
    src, tgt, keys = _read_only(src, tgt, keys)
    vocab = tokenizer.vocab
    return Corpus(NAME, "causal_lm", vocab, vocab, src, tgt, keys, held_out, tokenizer.specials, 0, tokenizer)


def _documents(tokenizer: TextTokenizer, files: Sequence[Records]) -> list[list[list[int]]]:
    """Each file's texts as token ids; DataError once they hold more than :data:`MAX_CORPUS_IDS`."""
    encoded: list[list[list[int]]] = []
    budget = MAX_CORPUS_IDS
    for records in files:
        try:
            encoded.append(tokenizer.encode(records.texts, max_tokens=budget))
        except TooManyTokens:
            raise files[0].context.error(
                f"holds{' with data.files.eval' if len(files) > 1 else ''} more than the "
                f"{MAX_CORPUS_IDS:,} token ids CollaPipe holds for a dataset; use less text"
            ) from None
        budget -= sum(len(ids) for ids in encoded[-1])
    return encoded


def _read_only(*arrays: IdMatrix) -> tuple[IdMatrix, ...]:
    """The arrays, made read-only: they are cached and shared."""
    for array in arrays:
        array.flags.writeable = False
    return arrays


def _refuse_cut(config: ExperimentConfig, files: Sequence[tuple[Records, Flags]]) -> None:
    """With ``data.truncate: false``, refuse the first row that does not fit."""
    if config.data.truncate:
        return
    model = config.model
    room = (
        f"model.seq_len = {model.seq_len} source and model.target_len - 1 = {model.target_len - 1} "
        "target tokens"
        if model.kind == "seq2seq"
        else f"model.seq_len - 1 = {model.seq_len - 1} tokens after the CLS token"
    )
    for records, cut in files:
        if cut.any():
            row = int(np.argmax(cut))
            raise records.context.error(
                f"{records.where(row)} is longer than the model takes ({room}); raise model.seq_len"
                f"{' or model.target_len' if model.kind == 'seq2seq' else ''}, shorten the row, or set "
                "data.truncate: true to cut such rows"
            )


def _group_ids(groups: Sequence[Hashable]) -> Indices:
    ids: dict[Hashable, int] = {}
    return np.fromiter((ids.setdefault(g, len(ids)) for g in groups), dtype=np.int64, count=len(groups))


def _label_key(label: Label) -> tuple[str, Label]:
    """A label with its type, so that 1, True and "1" are different classes."""
    return type(label).__name__, label


def _label_order(label: Label) -> tuple[int, str]:
    """Numbers by value, text alphabetically (a column holds one kind, checked by the reader)."""
    return (0, label) if isinstance(label, str) else (int(label), "")


def _class_name(label: Label) -> str:
    if isinstance(label, bool):
        return "true" if label else "false"
    return str(label)
