"""The ``collapipe`` command line: run experiments, inspect schedules, export the config schema.

Bad input exits with status 2 and one clear message (no traceback).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from collapipe_core.config import config_json_schema
from collapipe_core.progress import progress_bar
from collapipe_core.validation import ConfigError, load_config

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="CollaPipe: collaborative edge LLM training"
)
config_app = typer.Typer(no_args_is_help=True, help="Inspect and check experiment configs")
app.add_typer(config_app, name="config")
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks of the repository's bench/ folder")
app.add_typer(bench_app, name="bench")
err_console = Console(stderr=True, soft_wrap=True)  # paths stay whole: a terminal wraps lines itself
UNLIMITED_WIDTH = 100_000  # columns of output that is not a terminal: tables and lines keep their width


def stdout_console() -> Console:
    """Standard output for tables and lines: a terminal's width, or (a pipe, a file) no limit unless
    COLUMNS sets one; rich would fold and cut everything to 80 columns."""
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=UNLIMITED_WIDTH if wide else None)


ConfigPath = Annotated[Path, typer.Argument(help="experiment config (YAML or JSON)")]


def _fail(message: str) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code=2)


def _load(path: Path, overrides: dict[str, Any]) -> Any:
    try:
        return load_config(path, {k: v for k, v in overrides.items() if v is not None})
    except ConfigError as err:
        raise _fail(f"{path}: {err}") from None


def read_config(path: Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The config file's own mapping, parsed but not validated: only what the file sets (comments are
    not kept), with ``overrides`` (dotted field -> value; None leaves the field alone) set in it.

    ConfigError naming the file when it cannot be read or parsed, or holds no mapping."""
    from collapipe_core.validation import ConfigProblem, read_yaml

    def refused(message: str, field: str = "(file)", value: Any = None) -> ConfigError:
        return ConfigError([ConfigProblem(field, str(path) if value is None else value, message)])

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise refused(f"cannot read the config: {err.strerror}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else read_yaml(text)
    except (ValueError, yaml.YAMLError) as err:
        raise refused(f"not valid YAML/JSON: {err}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise refused(f"must be a mapping of sections (network:, model:, ...), not a {type(data).__name__}")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        node = data
        for depth, key in enumerate(parents, start=1):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                field = ".".join(parents[:depth])
                raise refused(f"must be a mapping to set {dotted}", field, node)
        node[leaf] = value
    return data


@app.command()
def run(
    config_path: ConfigPath,
    executor: Annotated[str | None, typer.Option(help="analytic | simulated | distributed")] = None,
    rounds: Annotated[int | None, typer.Option(help="override training.rounds")] = None,
    policy: Annotated[str | None, typer.Option(help="override scheduler.policy")] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="one JSON object per round, then a summary")
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="directory for records.jsonl, checkpoints and, at the end, the trained model/"),
    ] = None,
    resume: Annotated[bool, typer.Option(help="continue from the checkpoint in --out")] = False,
) -> None:
    """Run an experiment without a server."""
    from collapipe_core.runner import Runner
    from collapipe_core.sinks import FanOutSink, JsonLinesSink, MemorySink, RecordSink

    config = _load(config_path, {"executor": executor, "training.rounds": rounds, "scheduler.policy": policy})
    if resume and out is None:
        raise _fail("--resume needs --out (the directory holding the checkpoint)")
    sinks: list[RecordSink] = [MemorySink()]
    if out is not None:
        if not resume and out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(config.model_dump_json(indent=2, by_alias=True))
    try:
        runner = Runner(config, FanOutSink(), checkpoint_dir=out)
        start = runner.resume() if resume else 0
    except ValueError as err:
        raise _fail(str(err)) from None
    if out is not None:
        _truncate_records(out / "records.jsonl", start)
        sinks.append(JsonLinesSink(out / "records.jsonl"))
    runner.sink = FanOutSink(*sinks)
    if runner.data_truncated_rows:
        err_console.print(
            f"data: {runner.data_truncated_rows} rows were longer than model.seq_len (or target_len) and "
            "were cut; data.truncate: false refuses such files instead",
            highlight=False,
        )
    if json_output:
        _run_printing_json(runner)
    else:
        summary = _run_with_progress(runner, config.name, start, config.training.rounds)
        _print_summary(summary, sinks[0])
    runner.sink.close()
    if out is not None:
        _export(config, runner, out / "model")


def _run_printing_json(runner: Any) -> None:
    """What ``--json`` prints: one ``{"round": {...}, "devices": [...]}`` per round, then
    ``{"summary": {...}}``."""
    summary = runner.run(on_round=lambda r: print(json.dumps(r.to_json()), flush=True))
    print(json.dumps({"summary": vars(summary)}), flush=True)


def _export(config: Any, runner: Any, directory: Path) -> None:
    """The trained model into ``directory`` (replaced); a note instead for the analytic executor."""
    from collapipe_core.export import NothingToExport, export_model

    if directory.exists():
        shutil.rmtree(directory)
    try:
        export_model(config, runner.executor.state_dict(), directory)
    except NothingToExport:
        err_console.print("no model/ written: the analytic executor trains no weights", highlight=False)
        return
    err_console.print(f"model: {directory} (docs/models.md, Getting the model out)", highlight=False)


def _truncate_records(path: Path, start: int) -> None:
    """On resume keep only the records of rounds before the checkpoint (a later one may be half-done)."""
    if not path.exists():
        return
    kept = [
        line for line in path.read_text().splitlines() if line and json.loads(line)["round"]["round"] < start
    ]
    path.write_text("".join(line + "\n" for line in kept))


def _run_with_progress(runner: Any, name: str, start: int, total: int) -> Any:
    with progress_bar(err_console) as progress:
        task = progress.add_task(name, total=total, completed=start, status="")

        def on_round(result: Any) -> None:
            r = result.round
            status = f"latency {r.latency_s:.3f} s"
            if r.eval_loss is not None:
                status += f"  eval loss {r.eval_loss:.3f}"
            progress.update(task, advance=1, status=status)

        return runner.run(on_round=on_round)


def _print_summary(summary: Any, memory_sink: Any) -> None:
    console = stdout_console()
    results = memory_sink.results
    metrics = sorted({k for r in results for k in r.round.eval_metrics})
    table = Table(title="Per round (latency, energy, memory modeled; losses from real training)")
    columns = ["round", "latency s", "max makespan s", "energy J", "train loss", "eval loss"]
    for column in columns + [m.removeprefix("eval_").replace("_", " ") for m in metrics]:
        table.add_column(column, justify="right")
    step = max(1, len(results) // 12)
    shown = results[::step] + ([results[-1]] if results and (len(results) - 1) % step else [])
    for result in shown:
        r = result.round
        energy = sum(d.energy_j for d in result.devices)
        table.add_row(
            str(r.round) + ("" if r.feasible else " !"),
            f"{r.latency_s:.4f}",
            f"{max(r.makespan_s):.4f}",
            f"{energy:.3f}",
            _fmt(r.train_loss),
            _fmt(r.eval_loss),
            *(_fmt(r.eval_metrics.get(m)) for m in metrics),
        )
    console.print(table)
    devices = Table(title="Per device (modeled)")
    for column in ("device", "profile", "blocks", "energy J/round", "budget J", "peak MiB", "capacity MiB"):
        devices.add_column(column, justify="right")
    last = {d.device_id: d for d in results[-1].devices} if results else {}
    for device, energy in summary.mean_energy_j.items():
        d = last.get(device)
        if d is None:
            continue
        devices.add_row(
            device,
            d.profile,
            str(d.num_blocks),
            f"{energy:.4f}",
            f"{d.energy_budget_j:.3f}",
            f"{summary.peak_memory_bytes[device] / 2**20:.1f}",
            f"{d.memory_capacity_bytes / 2**20:.0f}",
        )
    console.print(devices)
    final = ", ".join(f"{k} {v:.4f}" for k, v in summary.final_eval.items()) or "(analytic: no training)"
    console.print(
        f"rounds {summary.rounds_done}/{summary.total_rounds}   mean round latency "
        f"{summary.mean_latency_s:.4f} s   infeasible rounds {summary.infeasible_rounds} (marked !)\n"
        f"final {final}"
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


@app.command()
def schedule(
    config_path: ConfigPath,
    policy: Annotated[str | None, typer.Option(help="policy name or package.module:Class")] = None,
    rounds: Annotated[int, typer.Option(help="rounds to schedule")] = 10,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="what run --json prints: one JSON object per round, then a summary"),
    ] = False,
) -> None:
    """Print each round's decision and its modeled latency, energy, memory and objective: the config
    run with the analytic executor (no training); each round starts from the placement the one before
    left, so moved blocks are charged."""
    from collapipe_core.runner import Runner
    from collapipe_core.sinks import FanOutSink

    overrides = {"executor": "analytic", "training.rounds": rounds, "scheduler.policy": policy}
    config = _load(config_path, overrides)
    console = stdout_console()

    def print_round(result: Any) -> None:
        r = result.round
        console.print(
            f"round {r.round:>4}  objective {r.objective:.4f}  latency {r.latency_s:.4f} s  "
            f"moved {r.blocks_moved}  M {r.num_microbatches}  "
            f"blocks {[[d['num_blocks'] for d in c['devices']] for c in r.decision['clusters']]}",
            highlight=False,
        )

    try:
        runner = Runner(config, FanOutSink())
        if json_output:
            _run_printing_json(runner)
        else:
            runner.run(on_round=print_round)
    except ValueError as err:
        raise _fail(str(err)) from None


@app.command()
def calibrate(
    config_path: ConfigPath,
    rounds: Annotated[int, typer.Option(help="rounds of the short training")] = 5,
    microbatches: Annotated[
        int | None,
        typer.Option(help="micro-batches per step, at least 2 (default: scheduler.num_microbatches)"),
    ] = None,
    output: Annotated[
        Path | None, typer.Option(help="where to write the config (default: CONFIG itself, rewritten)")
    ] = None,
) -> None:
    """Measure the gradient noise scale in a short training; write it to scheduler.gradient_noise_scale.

    Trains the config's model and data with the simulated executor and the uniform policy at a fixed
    number of micro-batches, for runs that do not measure it themselves (the analytic executor).
    """
    from collapipe_core.calibration import CalibrationError
    from collapipe_core.calibration import calibrate as measure

    config = _load(config_path, {})
    try:
        with progress_bar(err_console) as progress:
            task = progress.add_task("calibrating", total=rounds, status="")

            def on_round(result: Any) -> None:
                value = result.round.gradient_noise_scale
                status = "B_noise -" if value is None else f"B_noise {value:.4g}"
                progress.update(task, advance=1, status=status)

            found = measure(config, rounds, microbatches, on_round=on_round)
    except (CalibrationError, ConfigError) as err:
        raise _fail(str(err)) from None
    target = output or config_path
    data = read_config(config_path)
    data.setdefault("scheduler", {})["gradient_noise_scale"] = found.gradient_noise_scale
    text = json.dumps(data, indent=2) + "\n" if target.suffix.lower() == ".json" else _yaml_text(data)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as err:
        raise _fail(f"{target}: cannot write the config: {err.strerror}") from None
    stdout_console().print(
        f"B_noise = {found.gradient_noise_scale:.4g} samples (tr(Σ) {found.gradient_variance:.4g}, "
        f"|G|² {found.gradient_sq_norm:.4g}; {found.rounds} rounds of {found.num_microbatches} "
        f"micro-batches of {found.microbatch_size})\nwrote scheduler.gradient_noise_scale to {target}",
        highlight=False,
    )


def _yaml_text(data: dict[str, Any]) -> str:
    return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))


@config_app.command("schema")
def config_schema() -> None:
    """Print the JSON Schema of experiment configs."""
    print(json.dumps(config_json_schema(), indent=2))


@config_app.command("validate")
def config_validate(config_path: ConfigPath) -> None:
    """Check a config; exit 2 with every problem when it cannot run."""
    config = _load(config_path, {})
    stdout_console().print(
        f"ok: {config.name} ({config.model.kind}, {config.data.dataset}, policy {config.scheduler.policy})"
    )


@bench_app.command(
    "paper",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
)
def bench_paper(ctx: typer.Context) -> None:
    """DSSDA against every baseline (bench/paper.py: --json --out DIR --rounds R --train-rounds R --seeds
    1,2,3,4,5 --convergence noise_scale|variance --skip-extras; --help lists all)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "paper.py"
    spec = importlib.util.spec_from_file_location("collapipe_bench_paper", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise _fail(f"{path} not found: `collapipe bench` runs from a source checkout")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(list(ctx.args))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
