"""Analytic executor at scale: time for 1,000 rounds × 100 devices, and the growth to 1,000 devices.

Runs the full rounds loop (observe → uniform policy → cost model → records → queue update) with no
training and no output, for 100 and 1,000 devices side by side, and prints the times and their ratio.
Goal: ≤ 5 s for 1,000 rounds × 100 devices; linear growth (ratio ≈ 10 for 10× the devices).

    .venv/bin/python bench/analytic_scale.py [--rounds 1000] [--policy uniform]
"""

from __future__ import annotations

import argparse
import json
import time

from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink
from collapipe_core.validation import parse_config


def scenario(num_clusters: int, devices_per_cluster: int, rounds: int, policy: str) -> dict[str, object]:
    return {
        "name": f"scale-{num_clusters * devices_per_cluster}",
        "executor": "analytic",
        "network": {"num_clusters": num_clusters, "devices_per_cluster": devices_per_cluster},
        "model": {
            "kind": "seq2seq",
            "d_model": 128,
            "num_heads": 4,
            "ffn_dim": 512,
            "num_blocks": 12,
            "num_decoder_layers": 2,
            "seq_len": 16,
            "target_len": 16,
        },
        "data": {"dataset": "cmudict", "samples_per_cluster": 64, "eval_samples": 64},
        "training": {"rounds": rounds, "microbatch_size": 8},
        "scheduler": {"policy": policy, "num_microbatches": 4},
    }


def time_run(num_clusters: int, devices_per_cluster: int, rounds: int, policy: str) -> float:
    config = parse_config(scenario(num_clusters, devices_per_cluster, rounds, policy))
    runner = Runner(config, MemorySink())
    started = time.perf_counter()
    runner.run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--policy", default="uniform")
    args = parser.parse_args()
    time_run(2, 5, 5, args.policy)  # warm-up: imports and data-file parsing
    small = time_run(20, 5, args.rounds, args.policy)
    large = time_run(200, 5, args.rounds, args.policy)
    print(
        json.dumps(
            {
                "policy": args.policy,
                "rounds": args.rounds,
                "devices_100_s": round(small, 3),
                "devices_1000_s": round(large, 3),
                "ratio_1000_to_100": round(large / small, 2),
                "per_round_ms_100": round(1000 * small / args.rounds, 3),
                "per_round_ms_1000": round(1000 * large / args.rounds, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
