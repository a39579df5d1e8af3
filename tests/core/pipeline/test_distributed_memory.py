"""The cost model's device memory against what distributed ranks really hold.

One cluster, CU → c0-d0 (4 TEBs) → c0-d1 (none) → c0-d2 (2 TEBs) → edge; a classifier with d = 128,
h = 4, f = 512, s = 64, b = 8, M = 4, AdamW. After a warm-up round, one GPipe and one 1F1B round: on
every scheduled device the tensor peak the rank measured (weights, gradients, optimizer state, and
the peak of activations, receive buffers and temporaries) is within 20 % of the modeled memory without
the runtime overhead (``costmodel.device_memory_bytes``, from the profile measured on the modules).
"""

from __future__ import annotations

import dataclasses

import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.data import load_dataset
from collapipe_core.decision import Decision
from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.state import build_environment, observe
from collapipe_core.validation import parse_config

SEGMENTS = [4, 0, 2]
MICROBATCHES = 4

pytestmark = pytest.mark.distributed


def test_modeled_device_memory_is_within_20_percent_of_the_ranks_tensor_peak() -> None:
    config = parse_config(
        {
            "seed": 1,
            "executor": "distributed",
            "network": {"num_clusters": 1, "devices_per_cluster": len(SEGMENTS)},
            "model": {
                "kind": "classifier",
                "d_model": 128,
                "num_heads": 4,
                "ffn_dim": 512,
                "num_blocks": 6,
                "seq_len": 64,
            },
            "data": {"dataset": "synthetic-parity", "samples_per_cluster": 128, "eval_samples": 32},
            "training": {"rounds": 3, "local_iterations": 1, "microbatch_size": 8, "optimizer": "adamw"},
            "scheduler": {"policy": "fixed", "segments": SEGMENTS, "num_microbatches": MICROBATCHES},
        }
    )
    bundle = load_dataset(config)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    overhead = config.network.runtime_overhead_bytes
    ratios = {}
    with DistributedExecutor(config, bundle, DistributedOptions()) as executor:
        for t, schedule in enumerate(["gpipe", "gpipe", "1f1b"]):
            state = observe(
                dataclasses.replace(env, settings=dataclasses.replace(env.settings, schedule=schedule)), t
            )
            shares = [1.0 if blocks else 0.0 for blocks in SEGMENTS]
            decision = Decision.from_arrays(
                [SEGMENTS], [[s / sum(shares) for s in shares]], [shares], MICROBATCHES
            )
            measured = executor.execute(state, decision).measured
            if t == 0:
                continue  # warm-up: the ranks' first round also builds their schedules
            modeled = evaluate(state, decision).memory_bytes
            for k, blocks in enumerate(SEGMENTS):
                if blocks:
                    peak = measured[f"c0-d{k}"]["peak_tensor_bytes"]
                    ratios[(schedule, k)] = peak / (float(modeled[0, k]) - overhead)
    assert len(ratios) == 4
    assert all(0.8 <= r <= 1.2 for r in ratios.values()), ratios
