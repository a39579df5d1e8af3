"""How many samples a config's data hold, and the largest data.samples_per_cluster and data.eval_samples
they allow: what the check counts against, and what the launch form offers."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from collapipe_core.config import ExperimentConfig
from collapipe_core.problems import ConfigProblem
from collapipe_core.workspace import Workspace


@dataclass(frozen=True)
class DataCapacity:
    """What the config's data hold, and the largest data.samples_per_cluster and data.eval_samples they
    allow, each with the other as the config sets it (0: none fits)."""

    source: str  # "'datasets/own.jsonl'" or "dataset 'cmudict'"
    unit: str  # "rows", "samples after filtering", "windows of model.seq_len + 1 = 65 tokens"
    train: int  # the samples the clusters' shards are drawn from (and, without an eval file, eval's)
    held_out: int | None  # the eval file's samples; None: data.eval_samples come out of ``train``
    max_samples_per_cluster: int
    max_eval_samples: int
    read: bool  # False: the files were only counted (too few rows to hold eval rows out of them)

    def problems(self, config: ExperimentConfig) -> list[ConfigProblem]:
        """data.samples_per_cluster and data.eval_samples against what the data hold."""
        d, clusters = config.data, config.network.num_clusters
        what = f"{self.source} has {self.train} usable {self.unit}"
        if self.held_out is None:
            needed = d.eval_samples + clusters * d.samples_per_cluster
            if needed <= self.train:
                return []
            fits = (
                f"with data.eval_samples {d.eval_samples}, data.samples_per_cluster may be at most "
                f"{self.max_samples_per_cluster}"
                if self.max_samples_per_cluster
                else f"data.eval_samples leaves no sample for the clusters; lower it below {self.train}"
            )
            return [
                ConfigProblem(
                    "data.samples_per_cluster",
                    d.samples_per_cluster,
                    f"{what} but the config needs {needed}: data.eval_samples ({d.eval_samples}) + "
                    f"network.num_clusters ({clusters}) x data.samples_per_cluster "
                    f"({d.samples_per_cluster}); {fits}",
                )
            ]
        problems = []
        if d.eval_samples > self.held_out:
            problems.append(
                ConfigProblem(
                    "data.eval_samples",
                    d.eval_samples,
                    f"the eval file (data.files.eval) has {self.held_out} {self.unit}; data.eval_samples "
                    f"may be at most {self.held_out}",
                )
            )
        if clusters * d.samples_per_cluster > self.train:
            problems.append(
                ConfigProblem(
                    "data.samples_per_cluster",
                    d.samples_per_cluster,
                    f"{what} but network.num_clusters ({clusters}) x data.samples_per_cluster "
                    f"({d.samples_per_cluster}) = {clusters * d.samples_per_cluster}; "
                    f"data.samples_per_cluster may be at most {self.max_samples_per_cluster}",
                )
            )
        return problems

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def data_capacity(config: ExperimentConfig, workspace: Workspace) -> DataCapacity:
    """How many samples ``config``'s data hold (reading and checking them as a run would); DataError
    (or ValueError) when they cannot be read."""
    from collapipe_core.data import TooFewSamples, dataset_counts, size_words

    source, unit, _ = size_words(config)
    read = True
    try:
        train, held_out = dataset_counts(config, workspace)
    except TooFewSamples as err:  # a file's rows are counted before eval rows are held out of them
        train, held_out, read = err.available, None, False
    d, clusters = config.data, config.network.num_clusters
    shared = 0 if held_out is not None else d.eval_samples
    left = held_out if held_out is not None else max(0, train - clusters * d.samples_per_cluster)
    return DataCapacity(
        source=source,
        unit=unit,
        train=train,
        held_out=held_out,
        max_samples_per_cluster=max(0, (train - shared) // clusters),
        max_eval_samples=left,
        read=read,
    )
