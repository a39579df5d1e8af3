"""The driver of a distributed run whose ranks are spread over hosts (tests/integration/test_multi_host.py).

``python -m tests.integration.multi_host_driver CONFIG.json RECORDS.jsonl --master-addr A --master-port P
--local-ranks 0,1`` runs the config's rounds with the documented multi-host options
(docs/distributed.md, "Several hosts"): the rendezvous store listens at A:P, this host starts only the
listed ranks, and the others are started on other hosts with torchrun's variables. The round records
are written as JSON lines (``collapipe_core.sinks.read_json_lines`` reads them back).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from collapipe_core.pipeline.distributed import DistributedExecutor, DistributedOptions
from collapipe_core.runner import Runner
from collapipe_core.sinks import JsonLinesSink
from collapipe_core.validation import parse_config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config", type=Path)
    parser.add_argument("records", type=Path)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--local-ranks", required=True, help="comma-separated ranks this host starts")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    args = parser.parse_args(argv)

    config = parse_config(json.loads(args.config.read_text()))
    options = DistributedOptions(
        master_addr=args.master_addr,
        master_port=args.master_port,
        local_ranks=tuple(int(rank) for rank in args.local_ranks.split(",")),
        timeout_s=args.timeout_s,
        startup_timeout_s=args.timeout_s,
    )
    sink = JsonLinesSink(args.records)
    runner = Runner(config, sink)
    bundle = runner.executor.bundle  # type: ignore[attr-defined]
    # the Runner's executor with the multi-host options (its ranks start at the first round)
    runner.executor = executor = DistributedExecutor(config, bundle, options)
    try:
        runner.run()
    finally:
        executor.close()
        sink.close()


if __name__ == "__main__":
    main()
