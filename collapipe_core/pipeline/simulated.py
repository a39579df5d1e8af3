"""The ``simulated`` executor: trains the real split model in one process, exactly as the pipeline would.

Per round and cluster n: load the global weights, cut the model by the cluster's segments δ, and run I
local iterations; each iteration draws a step's samples of the cluster's shard (M·b, or the fixed batch
B; seeded by run seed, round, cluster and iteration), pushes M micro-batches of b (or B/M) through the
stages (CU embedding → device segments → edge head) accumulating the gradient of the step's
token-weighted loss (Σ loss terms of all M micro-batches / their number,
:mod:`collapipe_core.models.losses`: with a fixed batch the step's loss and gradient do not depend on
M), and takes one optimizer step. The stages run in the training precision, and a device recomputes its
blocks' activations where ``recompute_flags`` says (:mod:`collapipe_core.pipeline.split`). The clusters'
trainable tensors (with LoRA the adapters: :mod:`collapipe_core.federated.exchange`) are then averaged
with FedAvg weighted by data size — the frozen weights are never averaged and stay as built — and the
model is evaluated on the held-out set. Each cluster keeps its own optimizer state across rounds.
Timings, energy and memory are the cost model's. The squared gradient norms (per micro-batch and
accumulated, :mod:`collapipe_core.pipeline.gradient_norms`) of the measured steps, local iterations 0,
2, 4, … (:func:`collapipe_core.gradient_noise.is_measured_iteration`), give the round's estimate of the
gradient noise (:func:`collapipe_core.gradient_noise.estimate_round`).

The ``fl`` baseline's decisions (mode "replicated", data parallel inside a cluster) compute the same
gradient (the loss over the same M·b samples), so they train through the same path.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import torch

from collapipe_core.config import ExperimentConfig
from collapipe_core.data import DatasetBundle, batch_indices
from collapipe_core.decision import Decision
from collapipe_core.federated.exchange import averaged_keys
from collapipe_core.federated.fedavg import fedavg
from collapipe_core.gradient_noise import GradientNormSums, estimate_round, is_measured_iteration
from collapipe_core.models import EncoderStackModel, build_model, loss_for, source_mask
from collapipe_core.pipeline.executor import TrainingOutcome, recompute_flags
from collapipe_core.pipeline.gradient_norms import GradientNormProbe
from collapipe_core.pipeline.quality import evaluate_model
from collapipe_core.pipeline.split import accumulate_microbatches, split_model
from collapipe_core.state import RoundState


def make_optimizer(config: ExperimentConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The run's optimizer over the parameters of ``model`` that train (with LoRA the adapters and
    ``modules_to_save``; frozen parameters have no optimizer state), in ``named_parameters()`` order."""
    t = config.training
    params = [p for p in model.parameters() if p.requires_grad]
    if t.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=t.lr, weight_decay=t.weight_decay)
    momentum = 0.9 if t.optimizer == "momentum" else 0.0
    return torch.optim.SGD(params, lr=t.lr, momentum=momentum, weight_decay=t.weight_decay)


def build_run_model(
    config: ExperimentConfig, bundle: DatasetBundle, pretrained_dir: Path | None
) -> EncoderStackModel:
    """The run's model: the config's, sized to the data (vocabulary, outputs, special ids), seeded
    by the run's seed or loaded from ``pretrained_dir`` (model.pretrained_path resolved), with the
    run's adapters (training.peft) and its frozen weights stored at training.precision."""
    return build_model(
        config.model,
        bundle.src_vocab_size,
        bundle.tgt_vocab_size,
        config.seed,
        pad_id=bundle.pad_id,
        bos_id=bundle.bos_id,
        eos_id=bundle.eos_id,
        pretrained_dir=pretrained_dir,
        peft=config.training.peft,
        precision=config.training.precision,
    )


def _seed(*words: int) -> int:
    return int(np.random.SeedSequence(list(words)).generate_state(1)[0])


class SimulatedExecutor:
    name = "simulated"

    def __init__(
        self, config: ExperimentConfig, bundle: DatasetBundle, pretrained_dir: Path | None = None
    ) -> None:
        """``pretrained_dir``: model.pretrained_path resolved by the run's workspace."""
        self.config = config
        self.bundle = bundle
        self.pad_id = bundle.pad_id  # the data's padding id (None: windows without padding)
        self.model = build_run_model(config, bundle, pretrained_dir)
        self.loss = loss_for(config.model.kind, pad_id=self.pad_id)
        self.averaged = averaged_keys(self.model)  # what trains and FedAvg averages
        self.global_state = copy.deepcopy(self.model.state_dict())
        self.optimizer_states: list[dict[str, Any] | None] = [None] * len(bundle.shards)

    def execute(self, state: RoundState, decision: Decision) -> TrainingOutcome:
        t, settings = state.round_index, state.settings
        precision = self.config.training.precision
        recompute = recompute_flags(self.config.training, decision)
        cluster_states, losses = [], []
        norms: list[list[GradientNormSums]] = []  # per cluster, per measured local iteration
        for n, (shard, cluster) in enumerate(zip(self.bundle.shards, decision.clusters, strict=True)):
            torch.manual_seed(_seed(self.config.seed, t, n, 0xD0))  # dropout stream, resumable
            self._load_averaged()  # the frozen weights never change
            optimizer = make_optimizer(self.config, self.model)
            saved = self.optimizer_states[n]
            if saved is not None:
                optimizer.load_state_dict(saved)
            if decision.mode == "pipeline":
                blocks, again = list(cluster.num_blocks), list(recompute[n])
            else:  # replicated (fl): the whole model on each device
                blocks = [self.config.model.num_blocks]
                again = [self.config.training.activation_checkpointing == "all"]
            stages = split_model(self.model, blocks, recompute=again, precision=precision)
            self.model.train()
            cluster_loss = 0.0
            norms.append([])
            with GradientNormProbe(self.model.parameters()) as probe:
                for it in range(state.settings.local_iterations):
                    m, measured = cluster.num_microbatches, is_measured_iteration(it)
                    idx = batch_indices(
                        len(shard), settings.samples_per_step(m), (self.config.seed, t, n, it)
                    )
                    src, tgt = shard.src[idx], shard.tgt[idx]
                    optimizer.zero_grad(set_to_none=True)
                    if measured:
                        probe.start_step()
                    cluster_loss += accumulate_microbatches(
                        stages, self.loss, src, source_mask(src, self.pad_id), tgt, m
                    )
                    if measured:
                        norms[-1].append(probe.finish_step(m, settings.samples_per_microbatch(m)))
                    optimizer.step()
            losses.append(cluster_loss / state.settings.local_iterations)
            trained = self.model.state_dict()
            cluster_states.append({key: trained[key].detach().clone() for key in self.averaged})
            self.optimizer_states[n] = copy.deepcopy(optimizer.state_dict())
        sizes = [len(shard) for shard in self.bundle.shards]
        self.global_state = {**self.global_state, **fedavg(cluster_states, sizes)}
        self._load_averaged()
        eval_loss, metrics = evaluate_model(
            self.model,
            self.bundle.eval,
            pad_id=self.pad_id,
            bos_id=self.bundle.bos_id,
            eos_id=self.bundle.eos_id,
            precision=precision,
        )
        train_loss = float(np.average(losses, weights=sizes))
        return TrainingOutcome(
            train_loss=train_loss,
            eval_loss=eval_loss,
            eval_metrics=metrics,
            gradient_noise=estimate_round(norms, sizes),
        )

    def _load_averaged(self) -> None:
        """The global values of what trains into the model (the frozen weights are the model's own)."""
        self.model.load_state_dict({key: self.global_state[key] for key in self.averaged}, strict=False)

    def state_dict(self) -> dict[str, Any]:
        return {"global_state": self.global_state, "optimizer_states": self.optimizer_states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_state = state["global_state"]
        self.optimizer_states = list(state["optimizer_states"])
        self.model.load_state_dict(self.global_state)
