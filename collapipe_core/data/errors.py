"""The one error the data layer raises for a user's data: :class:`DataError`, naming the config field.

A bad file, a missing column, a row that does not fit or a dataset too small for the config is
refused before a run starts. The message names the config field (``data.files.train``,
``data.files.label_column``, ``data.samples_per_cluster`` ...), the file and the row (1-based: the
line an editor shows for JSONL and CSV, the row number for Parquet) where that applies, and what to
do. It quotes at most a short prefix of a value (:func:`collapipe_core.quote.short`), never a row.
Validation turns it into a problem on ``field`` (HTTP 422 on the service).
"""

from __future__ import annotations

from collapipe_core.config import ExperimentConfig
from collapipe_core.quote import short
from collapipe_core.workspace import MAX_NAME_CHARS, FileRefused, Workspace


class DataError(ValueError):
    """The config's data cannot be used; ``field`` is the config field to change, ``value`` its value."""

    def __init__(self, field: str, value: object, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.value = value
        self.message = message

    @staticmethod
    def refused(err: FileRefused) -> DataError:
        """The workspace's refusal (missing file, name outside the data directory, too big) as a DataError."""
        return DataError(err.field, err.value, err.message)


def quoted_name(name: str) -> str:
    """A file name from a config, quoted whole (a config allows 255 characters): a long path keeps its end."""
    return short(name, MAX_NAME_CHARS)


class FileContext:
    """Where a problem lies: the config field naming a file and the file's name, for messages."""

    def __init__(self, field: str, name: str) -> None:
        self.field = field
        self.name = name

    def error(self, message: str, *, field: str | None = None, value: object = None) -> DataError:
        """A DataError about this file: ``message`` follows the quoted file name."""
        value = self.name if value is None else value
        return DataError(field or self.field, value, f"{quoted_name(self.name)} {message}")


class TooFewSamples(DataError):
    """The dataset holds fewer samples than the config draws; ``available``: how many it holds."""

    def __init__(self, field: str, value: object, message: str, available: int) -> None:
        super().__init__(field, value, message)
        self.available = available


def too_few_samples(
    config: ExperimentConfig, available: int, source: str, unit: str, hint: str = ""
) -> TooFewSamples:
    """The dataset (``source``) holds fewer samples than eval_samples + num_clusters x samples_per_cluster."""
    data, clusters = config.data, config.network.num_clusters
    needed = data.eval_samples + clusters * data.samples_per_cluster
    return TooFewSamples(
        "data.samples_per_cluster",
        data.samples_per_cluster,
        f"{source} has {available} {unit} but the config needs {needed}: data.eval_samples "
        f"({data.eval_samples}) + network.num_clusters ({clusters}) x data.samples_per_cluster "
        f"({data.samples_per_cluster}); lower data.eval_samples, data.samples_per_cluster or "
        f"network.num_clusters{hint}",
        available,
    )


def needed_workspace(workspace: Workspace | None, field: str) -> Workspace:
    """``workspace``, or TypeError: a config that names files (``field``) is read only through one."""
    if workspace is None:
        raise TypeError(f"this config reads files ({field}); pass the Workspace that may read them")
    return workspace
