from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    DataError,
    dataset_size,
    load_dataset,
    vocab_sizes,
)
from collapipe_core.workspace import Workspace

MakeFilesConfig = Callable[..., ExperimentConfig]  # the conftest fixtures
WriteRows = Callable[[list[dict[str, Any]], str], str]
LOCAL = Workspace.local()
FORMATS = ["jsonl", "csv", "parquet"]
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
]


def _text(i: int, length: int) -> str:
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(length))


def _rows(kind: str, num_rows: int = 150) -> list[dict[str, Any]]:
    groups = ["north", "south", "east", "west"]
    if kind == "classifier":
        return [
            {"text": _text(i, 2 + i % 5), "label": ["neg", "pos", "mid"][i % 3], "site": groups[i % 4]}
            for i in range(num_rows)
        ]
    if kind == "seq2seq":
        return [{"source": _text(i, 2 + i % 4), "target": _text(i + 1, 1 + i % 3)} for i in range(num_rows)]
    return [{"text": _text(i, 20 + i % 10), "site": groups[i % 4]} for i in range(num_rows)]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", ["classifier", "seq2seq", "causal_lm"])
def test_each_kind_loads_from_each_format(
    write_rows: WriteRows, make_files_config: MakeFilesConfig, kind: str, fmt: str
) -> None:
    config = make_files_config(kind, write_rows(_rows(kind), f"train.{fmt}"), num_clusters=3)
    bundle = load_dataset(config, LOCAL)
    assert bundle.kind == kind and bundle.name == "files" and "user" in bundle.licence
    assert [len(s) for s in bundle.shards] == [40, 40, 40] and len(bundle.eval) == 20
    assert (bundle.pad_id, bundle.bos_id, bundle.eos_id) == (PAD_ID, BOS_ID, EOS_ID)
    for shard in [*bundle.shards, bundle.eval]:
        assert shard.src.shape == (len(shard), 12) and shard.src.dtype == torch.int64
        assert int(shard.src.max()) < bundle.src_vocab_size
        if kind == "classifier":
            assert shard.tgt.shape == (len(shard),) and (shard.src[:, 0] == BOS_ID).all()
            assert int(shard.tgt.max()) < 3 and bundle.tgt_vocab == ("mid", "neg", "pos")
        elif kind == "seq2seq":
            assert shard.tgt.shape == (len(shard), 9) and (shard.tgt[:, 0] == BOS_ID).all()
            assert ((shard.tgt == EOS_ID).sum(dim=1) == 1).all()
        else:
            assert shard.tgt.shape == (len(shard), 12) and not (shard.src == PAD_ID).any()
            assert torch.equal(shard.src[:, 1:], shard.tgt[:, :-1])  # next-token targets
    assert vocab_sizes(config, LOCAL) == (bundle.src_vocab_size, bundle.tgt_vocab_size)
    assert dataset_size(config, LOCAL) >= 140


def test_causal_lm_windows_are_consecutive_text_with_eos_between_documents(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    config = make_files_config("causal_lm", write_rows(_rows("causal_lm"), "t.jsonl"), dirichlet_alpha=None)
    bundle = load_dataset(config, LOCAL)
    windows = torch.cat([bundle.eval.src, *(s.src for s in bundle.shards)])
    assert (windows == EOS_ID).any() and not (windows == PAD_ID).any()
    assert dataset_size(config, LOCAL) > 140  # ~ every 13 tokens of ~3,000 make one window


def test_an_eval_file_is_the_held_out_set(write_rows: WriteRows, make_files_config: MakeFilesConfig) -> None:
    held = [{"text": _text(i, 3), "label": "neg"} for i in range(25)]
    config = make_files_config(
        "classifier", write_rows(_rows("classifier", 80), "t.csv"), eval=write_rows(held, "e.csv")
    )
    bundle = load_dataset(config, LOCAL)
    assert len(bundle.eval) == 20 and set(bundle.eval.tgt.tolist()) == {bundle.tgt_vocab.index("neg")}
    assert sum(map(len, bundle.shards)) == 80  # every training row trains when an eval file is given


def _mean_tv(groups: list[np.ndarray]) -> float:
    """Mean total-variation distance between each shard's group distribution and the pooled one."""
    size = int(max(g.max() for g in groups)) + 1
    pooled = np.bincount(np.concatenate(groups), minlength=size) / sum(map(len, groups))
    return float(
        np.mean([0.5 * np.abs(np.bincount(g, minlength=size) / len(g) - pooled).sum() for g in groups])
    )


def test_small_alpha_skews_labels_across_clusters(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    rows = [{"text": _text(i, 3), "label": i % 4} for i in range(600)]
    train = write_rows(rows, "t.parquet")

    def tv(alpha: float | None) -> float:
        config = make_files_config(
            "classifier", train, num_clusters=4, samples_per_cluster=100, dirichlet_alpha=alpha
        )
        return _mean_tv([s.tgt.numpy() for s in load_dataset(config, LOCAL).shards])

    assert tv(0.05) > 0.4 > 0.15 > tv(None)


def test_small_alpha_skews_a_group_column_across_clusters(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    # The target names the row's group, so each shard's targets show which groups it holds.
    sites = ["alpha", "beta", "gamma", "delta"]
    rows = [{"source": _text(i, 3), "target": sites[i % 4], "site": sites[i % 4]} for i in range(600)]
    train = write_rows(rows, "t.jsonl")

    def tv(alpha: float | None) -> float:
        config = make_files_config(
            "seq2seq",
            train,
            files={"group_column": "site"},
            num_clusters=4,
            samples_per_cluster=100,
            dirichlet_alpha=alpha,
        )
        shards = load_dataset(config, LOCAL).shards
        ids: dict[tuple[int, ...], int] = {}
        return _mean_tv(
            [np.array([ids.setdefault(tuple(r), len(ids)) for r in s.tgt.tolist()]) for s in shards]
        )

    assert tv(0.05) > 0.4 > 0.15 > tv(None)


def test_long_rows_are_cut_and_counted(write_rows: WriteRows, make_files_config: MakeFilesConfig) -> None:
    rows = [{"text": "alpha beta" if i % 3 else _text(i, 40), "label": i % 2} for i in range(120)]
    bundle = load_dataset(make_files_config("classifier", write_rows(rows, "t.jsonl")), LOCAL)
    assert bundle.truncated_rows == 40
    assert max(int((s.src != PAD_ID).sum(dim=1).max()) for s in bundle.shards) == 12


def test_truncate_false_refuses_the_first_long_row(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    rows = [{"source": "alpha beta", "target": "gamma"} for _ in range(120)]
    rows[6]["target"] = _text(1, 30)
    config = make_files_config("seq2seq", write_rows(rows, "t.jsonl"), truncate=False)
    with pytest.raises(DataError, match=r"t\.jsonl' line 7 is longer than the model takes") as error:
        load_dataset(config, LOCAL)
    assert error.value.field == "data.files.train" and "data.truncate: true" in error.value.message


def test_same_files_and_config_give_the_same_tensors(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    train = write_rows(_rows("classifier"), "t.jsonl")
    first = load_dataset(make_files_config("classifier", train), LOCAL)
    again = load_dataset(make_files_config("classifier", train), LOCAL)
    other = load_dataset(make_files_config("classifier", train, seed=1), LOCAL)
    assert all(torch.equal(a.src, b.src) for a, b in zip(first.shards, again.shards, strict=True))
    assert not torch.equal(first.eval.src, other.eval.src)
    first.shards[0].src.zero_()  # a bundle's tensors are its own, the cached corpus stays intact
    assert (load_dataset(make_files_config("classifier", train), LOCAL).shards[0].src[:, 0] == BOS_ID).all()


def test_files_are_read_only_through_a_workspace(
    write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    config = make_files_config("classifier", write_rows(_rows("classifier"), "t.jsonl"))
    with pytest.raises(TypeError, match=r"pass the Workspace"):
        load_dataset(config)
    with pytest.raises(DataError, match=r"must be a name inside the data directory") as error:
        load_dataset(config, Workspace(data_dir=Path(config.data.files.train).parent))  # type: ignore[union-attr]
    assert error.value.field == "data.files.train"


def test_the_service_reads_names_inside_its_data_directory(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig
) -> None:
    write_rows(_rows("seq2seq"), "pairs.csv")
    bundle = load_dataset(make_files_config("seq2seq", "pairs.csv"), Workspace(data_dir=tmp_path))
    assert len(bundle.eval) == 20


GOOD_ROWS = [f'{{"text": "row {i}", "label": "l{i % 2}"}}\n' for i in range(100)]
GOOD = "".join(GOOD_ROWS)
NEW_LABEL = [f'{{"text": "e{i}", "label": "new"}}\n' for i in range(30)]
TEXT, LABEL, TRAIN = "data.files.text_column", "data.files.label_column", "data.files.train"
# case: ({file name: content}, data.files settings, field, message fragment)
BAD_FILES: dict[str, tuple[dict[str, str | bytes], dict[str, str], str, str]] = {
    "missing file": ({"other.jsonl": GOOD}, {}, TRAIN, "no file named 'train.jsonl' in the data directory"),
    "unknown format": ({"t.txt": GOOD}, {"train": "t.txt"}, TRAIN, "'t.txt' has no suffix CollaPipe reads"),
    "bad json line": ({"train.jsonl": GOOD + '{"text": "x",\n'}, {}, TRAIN, "line 101 is not valid JSON"),
    "broken csv": ({"t.csv": 'text,label\n"a,1\n'}, {"train": "t.csv"}, TRAIN, "line 2 is not valid CSV"),
    "not parquet": ({"t.parquet": GOOD}, {"train": "t.parquet"}, TRAIN, "is not a readable Parquet file"),
    "empty file": ({"train.jsonl": "\n \n"}, {}, TRAIN, "'train.jsonl' is empty"),
    "no rows": ({"t.csv": "text,label\n"}, {"train": "t.csv"}, TRAIN, "'t.csv' has no rows"),
    "missing column": (
        {"train.jsonl": GOOD},
        {"label_column": "y"},
        "data.files.label_column",
        "no column 'y'",
    ),
    "mixed labels": (
        {"train.jsonl": GOOD + '{"text": "t", "label": 3}\n'},
        {},
        LABEL,
        "'train.jsonl' line 101: column 'label' holds a whole number (3) but line 1 holds text",
    ),
    "null text": (
        {"train.jsonl": '{"text": "a"}\n{"label": 1}\n'},
        {},
        TEXT,
        "line 2: column 'text' is missing",
    ),
    "number text": (
        {"train.jsonl": '{"text": 1, "label": 1}\n'},
        {},
        TEXT,
        "line 1: column 'text' holds a whole",
    ),
    "too few rows": (
        {"train.jsonl": "".join(GOOD_ROWS[:70])},
        {},
        "data.samples_per_cluster",
        "has 70 rows but the config needs",
    ),
    "unseen eval label": (
        {"train.jsonl": GOOD, "eval.jsonl": "".join(NEW_LABEL)},
        {"eval": "eval.jsonl"},
        LABEL,
        "'eval.jsonl' line 1: label 'new' does not occur in the training file",
    ),
    "small eval file": (
        {"train.jsonl": GOOD, "eval.jsonl": "".join(NEW_LABEL[:5]).replace("new", "l1")},
        {"eval": "eval.jsonl"},
        "data.eval_samples",
        "the eval file 'eval.jsonl' (data.files.eval) has 5 rows but data.eval_samples is 20",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_gets_one_error_naming_the_field_the_file_and_the_row(
    tmp_path: Path, make_files_config: MakeFilesConfig, case: str
) -> None:
    contents, settings, field, fragment = BAD_FILES[case]
    for name, content in contents.items():
        (tmp_path / name).write_bytes(content.encode() if isinstance(content, str) else content)
    files = {"train": "train.jsonl", **settings}
    config = make_files_config("classifier", files.pop("train"), eval=files.pop("eval", None), files=files)
    with pytest.raises(DataError) as error:
        load_dataset(config, Workspace(data_dir=tmp_path))
    assert error.value.field == field and fragment in error.value.message
    assert "\n" not in error.value.message and "row 5" not in error.value.message  # no file content quoted


def test_validation_s_questions_parse_a_file_once_and_a_changed_file_again(
    tmp_path: Path, write_rows: WriteRows, make_files_config: MakeFilesConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load_dataset, dataset_size and vocab_sizes each ask for the corpus: the file is read each time,
    parsed once (a 10^6-line JSONL was parsed three times per validation)."""
    from collapipe_core.data import records

    parsed: list[str] = []
    parse = records.parse_table

    def counting(context: Any, *args: Any) -> Any:
        parsed.append(context.name)
        return parse(context, *args)

    monkeypatch.setattr(records, "parse_table", counting)
    write_rows(_rows("classifier", 151), "once.jsonl")
    config = make_files_config("classifier", "once.jsonl")
    workspace = Workspace(data_dir=tmp_path)
    load_dataset(config, workspace), dataset_size(config, workspace), vocab_sizes(config, workspace)
    assert parsed == ["once.jsonl"]
    write_rows(_rows("classifier", 152), "once.jsonl")
    assert dataset_size(config, workspace) == 152 and parsed == ["once.jsonl"] * 2
    more_clusters = make_files_config("classifier", "once.jsonl", num_clusters=4)
    with pytest.raises(DataError, match="has 152 rows but the config needs 180"):
        dataset_size(more_clusters, workspace)  # the cluster count is checked on a cached corpus too


@pytest.mark.parametrize("kind", ["classifier", "seq2seq", "causal_lm"])
def test_a_corpus_past_the_id_limit_is_refused_before_its_arrays_exist(
    kind: str,
    tmp_path: Path,
    write_rows: WriteRows,
    make_files_config: MakeFilesConfig,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collapipe_core.data import user_files

    write_rows(_rows(kind), "big.jsonl")
    config = make_files_config(kind, "big.jsonl")
    workspace = Workspace(data_dir=tmp_path)
    needed = dataset_size(config, workspace)  # fits the real limit
    user_files._built.clear()
    monkeypatch.setattr(user_files, "MAX_CORPUS_IDS", 1000)
    with pytest.raises(DataError) as error:
        dataset_size(config, workspace)
    assert needed and error.value.field == "data.files.train"
    assert "more than the 1,000 token ids CollaPipe holds for a dataset" in error.value.message
