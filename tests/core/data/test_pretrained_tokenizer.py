from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import DataError, dataset_size, load_dataset
from collapipe_core.scheduler import PolicyRegistry
from collapipe_core.workspace import Workspace

MakeFilesConfig = Callable[..., ExperimentConfig]  # the conftest fixtures
WriteRows = Callable[[list[dict[str, Any]], str], str]
TEXTS = [f"the model reads sentence number {i} and then another one" for i in range(150)]


def _save(directory: Path, specials: list[str], roles: dict[str, str], byte_level: bool = False) -> str:
    """A tokenizer trained on TEXTS, saved by save_pretrained (tokenizer.json + tokenizer_config.json)."""
    trainer: trainers.Trainer
    if byte_level:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    else:
        tokenizer = Tokenizer(models.WordPiece(unk_token=roles.get("unk_token", "[UNK]")))
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=120, special_tokens=specials)
    tokenizer.train_from_iterator(TEXTS, trainer=trainer)
    saved = PreTrainedTokenizerFast(tokenizer_object=tokenizer, **roles)  # type: ignore[no-untyped-call]
    saved.save_pretrained(directory)
    return str(directory)


def _model(architecture: str, path: str) -> dict[str, Any]:
    return {"source": "transformers", "architecture": architecture, "pretrained_path": path}


@pytest.fixture
def bert_like(tmp_path: Path) -> str:  # BERT's layout: [PAD] 0, [CLS] and [SEP] elsewhere
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    roles = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    return _save(tmp_path / "bert", specials, roles)


def test_a_bert_like_tokenizer_gives_its_cls_and_pad_ids(
    write_rows: WriteRows, make_files_config: MakeFilesConfig, bert_like: str
) -> None:
    rows = [{"text": text, "label": i % 2} for i, text in enumerate(TEXTS)]
    config = make_files_config(
        "classifier",
        write_rows(rows, "t.jsonl"),
        model=_model("bert", bert_like),
        tokenizer={"kind": "pretrained"},
    )
    bundle = load_dataset(config, Workspace.local())
    assert (bundle.pad_id, bundle.bos_id, bundle.eos_id) == (0, 2, 3)
    assert bundle.src_vocab[:5] == ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    assert (bundle.shards[0].src[:, 0] == 2).all() and (bundle.eval.src == 0).any()


def test_a_bart_like_tokenizer_pads_seq2seq_targets_with_its_pad(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    roles = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    _save(tmp_path / "bart", ["<s>", "<pad>", "</s>", "<unk>"], roles)
    write_rows([{"source": text, "target": text.split()[-1]} for text in TEXTS], "t.jsonl")
    config = make_files_config(
        "seq2seq", "t.jsonl", model=_model("bart", "bart"), tokenizer={"kind": "pretrained"}
    )
    bundle = load_dataset(config, Workspace(data_dir=tmp_path))  # the service: a name in its data directory
    assert (bundle.bos_id, bundle.pad_id, bundle.eos_id) == (0, 1, 2)
    tgt = bundle.eval.tgt
    assert (tgt[:, 0] == 0).all() and ((tgt == 2).sum(dim=1) == 1).all() and (tgt[:, -1] == 1).all()


def test_a_gpt2_like_tokenizer_without_pad_makes_unpadded_windows(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    path = _save(
        tmp_path / "gpt2",
        ["<|endoftext|>"],
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
        byte_level=True,
    )
    rows = [{"text": text} for text in TEXTS]
    config = make_files_config(
        "causal_lm",
        write_rows(rows, "t.jsonl"),
        model={"pretrained_path": path},
        tokenizer={"kind": "pretrained"},
    )
    bundle = load_dataset(config, Workspace.local())
    assert bundle.pad_id is None and bundle.bos_id == bundle.eos_id == 0
    assert (bundle.shards[0].src == 0).any()  # EOS between the documents


def test_a_classifier_needs_a_pad_token(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    path = _save(tmp_path / "nopad", ["[UNK]", "[CLS]"], {"unk_token": "[UNK]", "cls_token": "[CLS]"})
    rows = [{"text": text, "label": i % 2} for i, text in enumerate(TEXTS)]
    config = make_files_config(
        "classifier",
        write_rows(rows, "t.jsonl"),
        model=_model("bert", path),
        tokenizer={"kind": "pretrained"},
    )
    with pytest.raises(DataError, match=r"has no pad_token in tokenizer_config\.json") as error:
        load_dataset(config, Workspace.local())
    assert error.value.field == "model.pretrained_path"


def test_a_missing_tokenizer_names_the_path_and_the_file(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    write_rows([{"text": text, "label": i % 2} for i, text in enumerate(TEXTS)], "t.jsonl")
    model = _model("bert", "weights")
    config = make_files_config("classifier", "t.jsonl", model=model, tokenizer={"kind": "pretrained"})
    with pytest.raises(DataError, match=r"needs tokenizer\.json in 'weights'") as error:
        load_dataset(config, Workspace(data_dir=tmp_path))
    assert error.value.field == "model.pretrained_path"


def test_a_model_vocabulary_smaller_than_the_tokenizer_is_refused(
    write_rows: WriteRows, make_files_config: MakeFilesConfig, bert_like: str
) -> None:
    rows = [{"text": text, "label": i % 2} for i, text in enumerate(TEXTS)]
    model = {**_model("bert", bert_like), "vocab_size": 10}
    config = make_files_config(
        "classifier", write_rows(rows, "t.jsonl"), model=model, tokenizer={"kind": "pretrained"}
    )
    with pytest.raises(DataError, match=r"tokens; set model\.vocab_size to at least") as error:
        load_dataset(config, Workspace.local())
    assert error.value.field == "model.vocab_size"


def test_kind_pretrained_needs_a_pretrained_path(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    config = make_files_config(
        "seq2seq",
        write_rows([{"source": "a", "target": "b"}] * 150, "t.jsonl"),
        tokenizer={"kind": "pretrained"},
    )
    with pytest.raises(DataError, match=r"model\.pretrained_path, which is not set") as error:
        load_dataset(config, Workspace.local())
    assert error.value.field == "data.tokenizer.kind"


def test_truncation_and_padding_saved_with_a_tokenizer_are_ignored(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    tokenizer = Tokenizer(models.WordLevel({"<eos>": 0, "a": 1, "<unk>": 2}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.enable_truncation(3)
    tokenizer.enable_padding(length=5, pad_id=0)
    (tmp_path / "tok").mkdir()
    tokenizer.save(str(tmp_path / "tok" / "tokenizer.json"))
    (tmp_path / "tok" / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<eos>"}}))
    write_rows([{"text": "a " * 50}] * 10, "t.jsonl")
    config = make_files_config(
        "causal_lm",
        "t.jsonl",
        model={"pretrained_path": "tok"},
        tokenizer={"kind": "pretrained"},
        samples_per_cluster=10,
        eval_samples=5,
    )
    assert dataset_size(config, Workspace(data_dir=tmp_path)) == 10 * 51 // 13  # every token, no padding


def _word_level(directory: Path, vocab: dict[str, int], config: dict[str, Any] | None = None) -> None:
    """A WordLevel tokenizer.json of ``vocab`` written as JSON (the library's own writer takes seconds
    and gigabytes for an id of 10^9: it lists every id up to the largest)."""
    tokenizer = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    saved = json.loads(tokenizer.to_str())
    saved["model"]["vocab"] = vocab
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(saved))
    settings = config if config is not None else {"eos_token": "<eos>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings))


def _causal_lm(tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig) -> ExperimentConfig:
    write_rows([{"text": "a " * 50}] * 10, "t.jsonl")
    return make_files_config(
        "causal_lm",
        "t.jsonl",
        model={"pretrained_path": "tok"},
        tokenizer={"kind": "pretrained"},
        samples_per_cluster=10,
        eval_samples=5,
    )


def test_tokenizer_files_over_their_limits_are_refused_unread(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collapipe_core.data import pretrained_tokenizer

    _word_level(tmp_path / "tok", {"<eos>": 0, "a": 1, "<unk>": 2})
    config = _causal_lm(tmp_path, write_rows, make_files_config)
    workspace = Workspace.service(tmp_path, PolicyRegistry(), max_file_bytes=2**30, memory_limit_bytes=None)
    assert pretrained_tokenizer.MAX_BYTES == {"tokenizer.json": 32 * 2**20, "tokenizer_config.json": 2**20}
    size = (tmp_path / "tok" / "tokenizer.json").stat().st_size
    monkeypatch.setitem(pretrained_tokenizer.MAX_BYTES, "tokenizer.json", size - 1)
    with pytest.raises(DataError) as error:
        dataset_size(config, workspace)
    assert error.value.field == "model.pretrained_path"
    assert "'tok/tokenizer.json' is 0.0 MiB; a tokenizer.json may be at most 0.0 MiB" in error.value.message


@pytest.mark.parametrize(
    ("vocab", "settings", "message"),
    [
        ({"<eos>": 0, "a": 10**9, "<unk>": 2}, None, "gives id 1000000000 to a token but holds 3 tokens"),
        ({"<eos>": 0, "a": 1, "<unk>": 2}, {"eos_token": "["}, "names eos_token '['"),
    ],
)
def test_a_tokenizer_whose_ids_do_not_fit_is_refused(
    vocab: dict[str, int],
    settings: dict[str, Any] | None,
    message: str,
    tmp_path: Path,
    write_rows: WriteRows,
    make_files_config: MakeFilesConfig,
) -> None:
    _word_level(tmp_path / "tok", vocab, settings)
    config = _causal_lm(tmp_path, write_rows, make_files_config)
    with pytest.raises(DataError) as error:
        dataset_size(config, Workspace(data_dir=tmp_path))
    assert error.value.field == "model.pretrained_path" and message in error.value.message


def test_a_deeply_nested_tokenizer_config_is_refused(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    _word_level(tmp_path / "tok", {"<eos>": 0, "a": 1, "<unk>": 2})
    (tmp_path / "tok" / "tokenizer_config.json").write_text("[" * 100_000 + "]" * 100_000)
    config = _causal_lm(tmp_path, write_rows, make_files_config)
    with pytest.raises(DataError) as error:
        dataset_size(config, Workspace(data_dir=tmp_path))
    assert "cannot read the tokenizer in 'tok'" in error.value.message and len(error.value.message) < 400
