"""What the split costs in training time: the ``simulated`` executor against plain loops, side by side.

For a builtin model (the quickstart's encoder-decoder), a transformers model (the llm-causal example's
LLaMA-style decoder) and that model trained as LLMs are trained at the edge — LoRA adapters from the peft
library (r 8 on q/k/v/o_proj, the rest frozen) in fp32, in bf16 mixed precision, and in bf16 with every
block's activations recomputed —, one round of the same decision (uniform segments, M micro-batches of
b samples, I local iterations per cluster) is trained four ways, interleaved (each repeat runs every
way once, in a rotated order) and repeated; per way the median time per training sample and the
spread (min–max) over the repeats are printed, and the ratios:

- ``simulated_train``: the simulated executor's own training steps (its ``accumulate_microbatches``
  through the split stages, ``zero_grad`` and ``optimizer.step``, timed inside ``execute``): FedAvg,
  loading the global weights and the per-cluster state copies are OUTSIDE the timed part;
- ``simulated_round``: the whole ``execute`` minus its evaluation: FedAvg and the copies INSIDE;
- ``plain_accumulated``: the same unsplit model in one plain loop over the same micro-batches,
  ``loss.sum(chunk) / N`` backward per micro-batch, one optimizer step (goal: simulated_train at
  most 1.05 × this). For a transformers model that is the transformers model itself, called as its
  users call it (``model(input_ids, attention_mask).logits``), not the split parts; with LoRA the same
  peft-adapted model (the adapters peft injects, the base frozen), in bf16 under the same CPU autocast with
  its frozen base stored in bf16, and with recomputation through transformers' own
  ``activation_checkpointing_enable`` (non-reentrant): a plain peft training loop at the same precision;
- ``plain_full_batch``: the same samples as one batch (the cost of micro-batching itself);
- ``simulated_train_no_noise`` / ``simulated_round_no_noise``: the simulated executor without its
  gradient noise measurement (its ``GradientNormProbe`` replaced by one without hooks), so that the
  measurement's cost is the ratio of ``simulated_train`` to this, side by side in the same run. The
  measurement's work is inside ``simulated_train``: the hooks run in the backward passes and the
  probe's ``finish_step`` (the accumulated gradient's norm) is timed with the training steps.

One torch thread. Print: ``.venv/bin/python bench/training_overhead.py [--repeats 7] [--models NAME ...]``
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from collapipe_core import api  # noqa: E402
from collapipe_core.config import ExperimentConfig  # noqa: E402
from collapipe_core.data import batch_indices, load_dataset  # noqa: E402
from collapipe_core.decision import Decision  # noqa: E402
from collapipe_core.gradient_noise import GradientNormSums  # noqa: E402
from collapipe_core.models import split_targets  # noqa: E402
from collapipe_core.models.losses import source_mask  # noqa: E402
from collapipe_core.models.precision import autocast, to_loss  # noqa: E402
from collapipe_core.pipeline import simulated as simulated_module  # noqa: E402
from collapipe_core.pipeline.simulated import SimulatedExecutor, make_optimizer  # noqa: E402
from collapipe_core.state import RoundState, build_environment, observe  # noqa: E402

LORA = {"training.peft": {"method": "lora", "r": 8, "alpha": 16}}
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "builtin seq2seq (quickstart)": ("examples/quickstart.yaml", {}),
    "transformers llama (llm-causal)": ("examples/llm-causal.yaml", {}),
    "llama + LoRA (fp32)": ("examples/llm-causal.yaml", LORA),
    "llama + LoRA, bf16": ("examples/llm-causal.yaml", {**LORA, "training.precision": "bf16"}),
    "llama + LoRA, bf16, recomputation": (
        "examples/llm-causal.yaml",
        {**LORA, "training.precision": "bf16", "training.activation_checkpointing": "all"},
    ),
}


class Timer:
    """Seconds spent in the wrapped calls, since the last reset."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        return timed


class NoProbe:
    """The gradient norm probe without hooks: the simulated executor without its noise measurement."""

    def __init__(self, parameters: Any, kept: Any = ()) -> None:
        pass

    def __enter__(self) -> NoProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def start_step(self) -> None:
        pass

    def finish_step(self, num_microbatches: int, microbatch_size: int) -> GradientNormSums:
        return GradientNormSums(0.0, 0.0, num_microbatches, microbatch_size)


@contextmanager
def instrumented(train: Timer, evaluation: Timer, measure_noise: bool = True) -> Iterator[None]:
    """Time the simulated executor's training steps and its evaluation from inside ``execute``;
    ``measure_noise`` False runs it without the gradient noise measurement."""
    original_accumulate = simulated_module.accumulate_microbatches
    original_optimizer = simulated_module.make_optimizer
    original_evaluate = simulated_module.evaluate_model
    original_probe = simulated_module.GradientNormProbe

    class TimedProbe(original_probe):  # type: ignore[misc, valid-type]
        def finish_step(self, num_microbatches: int, microbatch_size: int) -> GradientNormSums:
            finish = train.wrap(super().finish_step)
            sums: GradientNormSums = finish(num_microbatches, microbatch_size)
            return sums

    def timed_optimizer(config: ExperimentConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
        optimizer = original_optimizer(config, model)
        optimizer.step = train.wrap(optimizer.step)  # type: ignore[method-assign]
        optimizer.zero_grad = train.wrap(optimizer.zero_grad)  # type: ignore[method-assign]
        return optimizer

    simulated_module.accumulate_microbatches = train.wrap(original_accumulate)
    simulated_module.make_optimizer = timed_optimizer
    simulated_module.evaluate_model = evaluation.wrap(original_evaluate)
    simulated_module.GradientNormProbe = TimedProbe if measure_noise else NoProbe  # type: ignore[misc]
    try:
        yield
    finally:
        simulated_module.accumulate_microbatches = original_accumulate
        simulated_module.make_optimizer = original_optimizer
        simulated_module.evaluate_model = original_evaluate
        simulated_module.GradientNormProbe = original_probe  # type: ignore[misc]


class Plain:
    """The unsplit model trained in a plain loop on the simulated executor's batches."""

    def __init__(self, executor: SimulatedExecutor) -> None:
        self.executor = executor
        self.model = copy.deepcopy(executor.model)
        self.hf_model = getattr(self.model, "hf_model", None)  # the transformers model the parts wrap
        self.precision = executor.config.training.precision
        if self.hf_model is not None and executor.config.training.activation_checkpointing == "all":
            self.hf_model.activation_checkpointing_enable(
                activation_checkpointing_kwargs={"use_reentrant": False}
            )
        self.optimizers = [make_optimizer(executor.config, self.model) for _ in executor.bundle.shards]

    def logits(self, src: torch.Tensor, mask: torch.Tensor, dec_in: torch.Tensor | None) -> torch.Tensor:
        if self.hf_model is None:
            out: torch.Tensor = self.model(src, mask, dec_in)
            return out
        kwargs: dict[str, Any] = {"input_ids": src, "attention_mask": mask.long(), "use_cache": False}
        if dec_in is not None:
            kwargs["decoder_input_ids"] = dec_in
        with autocast(self.precision):
            logits: torch.Tensor = self.hf_model(**kwargs).logits
        return to_loss(logits, self.precision)

    def round(self, state: RoundState, decision: Decision, microbatched: bool) -> float:
        ex, settings = self.executor, state.settings
        started = time.perf_counter()
        for n, (shard, cluster) in enumerate(zip(ex.bundle.shards, decision.clusters, strict=True)):
            optimizer, micro = self.optimizers[n], cluster.num_microbatches
            for it in range(state.settings.local_iterations):
                step = settings.samples_per_step(micro)
                idx = batch_indices(len(shard), step, (ex.config.seed, state.round_index, n, it))
                src, tgt = shard.src[idx], shard.tgt[idx]
                mask = source_mask(src, ex.pad_id)
                optimizer.zero_grad(set_to_none=True)
                num_terms = ex.loss.checked_terms(split_targets(ex.model.kind, tgt)[1])
                chunks = micro if microbatched else 1
                for s, m, y in zip(
                    *(torch.split(x, src.shape[0] // chunks) for x in (src, mask, tgt)), strict=True
                ):
                    dec_in, labels = split_targets(ex.model.kind, y)
                    (ex.loss.sum(self.logits(s, m, dec_in), labels) / num_terms).backward()
                optimizer.step()
        return time.perf_counter() - started


def measure(path: str, overrides: dict[str, Any], repeats: int) -> dict[str, Any]:
    config = api.load_config(REPO / path, {"executor": "simulated", **overrides})
    bundle = load_dataset(config)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    executor = SimulatedExecutor(config, bundle)
    plain = Plain(executor)
    state = observe(env, 0)
    decision = api.decide("uniform", state)
    samples = config.training.samples_per_round(c.num_microbatches for c in decision.clusters)
    train, evaluation = Timer(), Timer()
    ways: dict[str, Callable[[], tuple[float, float]]] = {}

    def simulated(measure_noise: bool = True) -> tuple[float, float]:
        train.seconds = evaluation.seconds = 0.0
        started = time.perf_counter()
        with instrumented(train, evaluation, measure_noise):
            executor.execute(state, decision)
        whole = time.perf_counter() - started - evaluation.seconds
        return train.seconds, whole

    ways["simulated"] = simulated
    ways["simulated_no_noise"] = lambda: simulated(measure_noise=False)
    ways["plain_accumulated"] = lambda: (plain.round(state, decision, True),) * 2
    ways["plain_full_batch"] = lambda: (plain.round(state, decision, False),) * 2
    simulated()  # warm-up: allocator, lazy imports
    plain.round(state, decision, True)
    times: dict[str, list[float]] = {
        "simulated_train": [],
        "simulated_round": [],
        "simulated_train_no_noise": [],
        "simulated_round_no_noise": [],
        "plain_accumulated": [],
        "plain_full_batch": [],
    }
    order = list(ways)
    for r in range(repeats):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            first, second = ways[name]()
            if name.startswith("simulated"):
                suffix = name.removeprefix("simulated")
                times[f"simulated_train{suffix}"].append(first / samples)
                times[f"simulated_round{suffix}"].append(second / samples)
            else:
                times[name].append(first / samples)
    median = {k: statistics.median(v) for k, v in times.items()}
    return {
        "samples_per_round": samples,
        "ms_per_sample": {
            k: {
                "median": round(1e3 * median[k], 4),
                "min": round(1e3 * min(v), 4),
                "max": round(1e3 * max(v), 4),
            }
            for k, v in times.items()
        },
        "ratios": {
            "simulated_train / plain_accumulated (goal <= 1.05)": round(
                median["simulated_train"] / median["plain_accumulated"], 3
            ),
            "simulated_round / plain_accumulated (FedAvg, copies inside)": round(
                median["simulated_round"] / median["plain_accumulated"], 3
            ),
            "plain_accumulated / plain_full_batch (micro-batching itself)": round(
                median["plain_accumulated"] / median["plain_full_batch"], 3
            ),
            "simulated_train / simulated_train_no_noise (the gradient noise measurement)": round(
                median["simulated_train"] / median["simulated_train_no_noise"], 3
            ),
            "simulated_train_no_noise / plain_accumulated": round(
                median["simulated_train_no_noise"] / median["plain_accumulated"], 3
            ),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models", nargs="*", choices=list(MODELS), help="default: every model")
    args = parser.parse_args()
    torch.set_num_threads(1)
    parser_models = args.models or list(MODELS)
    report: dict[str, Any] = {name: measure(*MODELS[name], repeats=args.repeats) for name in parser_models}
    report["threads"] = torch.get_num_threads()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
