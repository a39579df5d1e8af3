"""The paper comparison's order of work: uniform's bench-scale training (one run for both readings of
micro-batching) sets the target and measures the B_noise that DSSDA's and myopic's modeled runs then
use; with a fixed batch every policy's time to target adds its own latencies up to uniform's round, with
a fixed micro-batch the other M trajectories train to that target. The runs themselves are replaced by
stand-ins that record how they were called."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import paper

UNIFORM_LOSSES = [3.0, 2.6, 2.3]
M_OF = {"dssda": 1, "myopic": 1, "split": 1, "uniform": 4, "proportional": 4, "fl": 4, "random": 8}


def uniform_noise(seed: int | None, scenario: str) -> list[float | None]:
    """Smoothed B_noise per round of uniform's stand-in training: unresolved at first, then growing."""
    final = 10.0 * (seed or 1) + (1.0 if scenario == "paper-bert" else 0.0)
    return [None, final / 2, final]


class StandIns:
    """Stand-ins for the bench's analytic and training runs; ``calls`` records them in order."""

    def __init__(self, noise: Any = uniform_noise, replay_drift: float = 0.0) -> None:
        self.calls: list[tuple[str, str, Any, dict[str, Any]]] = []
        self.noise = noise
        self.replay_drift = replay_drift  # added to a fixed-batch replay's losses (0: M changes nothing)

    def analytic(
        self, path: Path, policy: str, rounds: int, overrides: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        self.calls.append(("analytic", path.stem, policy, dict(overrides or {})))
        m = M_OF[policy]
        figures = {
            "mean_latency_s": 10.0 * m,
            "latency_per_sample_s": 1.0,
            "mean_samples_per_round": 64.0 * m,
            "mean_microbatches": float(m),
            "efficiency": 0.1 * m,
            "efficiency_holders": 0.2 * m,
            "peak_memory_bytes": 1e9 * m,
            "mean_memory_bytes": 5e8 * m,
            "energy_over_budget_max": 0.25 * m,
            "energy_over_budget_mean": 0.2 * m,
            "infeasible_rounds": 0,
            "mean_blocks_moved": 0.0,
            "moves_latency_share": 0.0,
        }
        return {
            "figures": figures,
            "latency_series": [10.0 * m] * rounds,
            "microbatches": [[m] * 4 for _ in range(rounds)],
            "decision_log": [],
        }

    def train(
        self,
        path: Path,
        microbatches: list[list[int]] | None,
        max_rounds: int,
        target: float | None,
        seed: int | None = None,
        reading: str = "batch",
    ) -> dict[str, list[Any]]:
        self.calls.append(
            (
                "train",
                path.stem,
                microbatches,
                {"target": target, "max_rounds": max_rounds, "reading": reading, "seed": seed},
            )
        )
        if microbatches is None:  # uniform itself
            rounds = len(UNIFORM_LOSSES[:max_rounds])
            return {
                "eval_loss": UNIFORM_LOSSES[:max_rounds],
                "train_loss": UNIFORM_LOSSES[:max_rounds],
                "gradient_noise_scale": self.noise(seed, path.stem)[:max_rounds],
                "microbatches": [[4] * 4 for _ in range(rounds)],
            }
        if reading == "batch":  # with a fixed batch M does not change the training: uniform's losses
            losses = [x + self.replay_drift for x in UNIFORM_LOSSES[:max_rounds]]
            return {
                "eval_loss": losses,
                "train_loss": losses,
                "gradient_noise_scale": [None] * len(losses),
                "microbatches": microbatches[: len(losses)],
            }
        losses = [3.0 - 0.2 * r for r in range(max_rounds)]  # reaches 2.3 after 5 rounds
        reached = next(
            (r + 1 for r, x in enumerate(losses) if target is not None and x <= target), max_rounds
        )
        return {
            "eval_loss": losses[:reached],
            "train_loss": losses[:reached],
            "gradient_noise_scale": [None] * reached,
            "microbatches": microbatches[:reached],
        }


@pytest.fixture
def stand_ins(monkeypatch: pytest.MonkeyPatch) -> StandIns:
    found = StandIns()
    monkeypatch.setattr(paper, "analytic_task", found.analytic)
    monkeypatch.setattr(paper, "train_task", found.train)
    return found


PLAN = paper.Plan(rounds=8, train_rounds=3, max_train_rounds=8, seeds=(1, 2), extras=False)


def test_b_noise_is_the_final_smoothed_estimate_of_uniforms_training() -> None:
    assert paper.measured_noise_scale([None, 7.2, 9.1, 22.4], "paper-transformer", 1) == 22.4


def test_a_training_that_measured_no_b_noise_at_its_end_is_refused_with_what_to_change() -> None:
    with pytest.raises(ValueError, match=r"--train-rounds.*--convergence variance"):
        paper.measured_noise_scale([7.2, None], "paper-bert", 3)
    with pytest.raises(ValueError, match="paper-bert seed 3"):
        paper.measured_noise_scale([], "paper-bert", 3)


def test_uniform_trains_first_and_dssda_and_myopic_use_the_b_noise_it_measured(stand_ins: StandIns) -> None:
    runs, _ = paper.compare(PLAN, workers=1)
    kinds = [c[0] for c in stand_ins.calls]
    first_analytic = kinds.index("analytic")
    assert [c[2] for c in stand_ins.calls[:first_analytic]] == [None] * 4  # uniform, 2 seeds × 2 scenarios
    modeled = [c for c in stand_ins.calls[first_analytic:] if c[0] == "analytic"]
    assert {"dssda", "myopic"} <= {c[2] for c in modeled}
    for _, scenario, _, overrides in modeled:
        assert overrides["scheduler.convergence"] == "noise_scale"
        assert overrides["scheduler.gradient_noise_scale"] == uniform_noise(overrides["seed"], scenario)[-1]
    assert {(r["scenario"], r["seed"]): r["gradient_noise_scale"] for r in runs} == {
        ("paper-transformer", 1): 10.0,
        ("paper-bert", 1): 11.0,
        ("paper-transformer", 2): 20.0,
        ("paper-bert", 2): 21.0,
    }


def test_with_a_fixed_micro_batch_the_other_trajectories_train_after_the_modeled_runs_to_uniforms_target(
    stand_ins: StandIns,
) -> None:
    runs, _ = paper.compare(PLAN._replace(readings=("microbatch",)), workers=1)
    last_analytic = max(i for i, c in enumerate(stand_ins.calls) if c[0] == "analytic")
    replays = [c for c in stand_ins.calls if c[0] == "train" and c[2] is not None]
    assert len(replays) == 4 * 2  # per case the M = 1 and the M = 8 trajectory; M = 4 shares uniform's run
    assert all(stand_ins.calls.index(c) > last_analytic for c in replays)
    assert {c[3]["target"] for c in replays} == {UNIFORM_LOSSES[-1]}
    assert {c[3]["max_rounds"] for c in replays} == {PLAN.max_train_rounds}
    assert {c[3]["reading"] for c in replays} == {"microbatch"}
    for run in runs:
        assert run["reading"] == "microbatch"
        assert run["target_eval_loss"] == UNIFORM_LOSSES[-1]
        assert run["eval_loss"]["proportional"] == run["eval_loss"]["uniform"] == UNIFORM_LOSSES
        assert run["figures"]["dssda"]["rounds_to_target"] == 5


def test_the_variance_term_takes_no_b_noise_even_when_uniforms_training_resolved_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unresolved = StandIns(noise=lambda seed, scenario: [None, None, None])
    monkeypatch.setattr(paper, "analytic_task", unresolved.analytic)
    monkeypatch.setattr(paper, "train_task", unresolved.train)
    runs, _ = paper.compare(PLAN._replace(convergence="variance"), workers=1)
    analytic = [c[3] for c in unresolved.calls if c[0] == "analytic"]
    assert all(o["scheduler.convergence"] == "variance" for o in analytic)
    assert not any("scheduler.gradient_noise_scale" in o for o in analytic)
    assert all(r["gradient_noise_scale"] is None for r in runs)
    with pytest.raises(ValueError, match="did not resolve the gradient"):
        paper.compare(PLAN, workers=1)


def test_without_train_rounds_each_scenario_trains_uniform_its_own_and_caps_the_others_at_twice_that(
    stand_ins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        paper,
        "TRAINING",
        {
            "paper-transformer": paper.TrainingSettings(lr=0.005, eval_samples=128, train_rounds=2),
            "paper-bert": paper.TrainingSettings(lr=0.001, eval_samples=512, train_rounds=3),
        },
    )
    plan = paper.Plan(rounds=8, seeds=(1,), extras=False, readings=("microbatch",))
    runs, _ = paper.compare(plan, workers=1)
    trains = [c for c in stand_ins.calls if c[0] == "train"]
    assert {(c[1], c[3]["max_rounds"]) for c in trains if c[2] is None} == {
        ("paper-transformer", 2),
        ("paper-bert", 3),
    }
    assert {(c[1], c[3]["max_rounds"]) for c in trains if c[2] is not None} == {
        ("paper-transformer", 4),
        ("paper-bert", 6),
    }
    assert {r["scenario"]: r["target_eval_loss"] for r in runs} == {
        "paper-transformer": UNIFORM_LOSSES[1],
        "paper-bert": UNIFORM_LOSSES[2],
    }


def test_the_copy_takes_its_scenarios_training_settings_and_the_modeled_scenario_keeps_its_own() -> None:
    for path in paper.SCENARIOS.values():
        settings = paper.TRAINING[path.stem]
        copy, full = paper.training_config(path, seed=3), paper.scenario_config(path)
        assert (copy.training.lr, copy.data.eval_samples, copy.seed) == (
            settings.lr,
            settings.eval_samples,
            3,
        )
        assert copy.model.d_model == paper.TRAINING_SCALE["model.d_model"] < full.model.d_model
        assert (copy.data.dataset, copy.training.microbatch_size) == (
            full.data.dataset,
            full.training.microbatch_size,
        )


def test_a_scenario_whose_training_rounds_exceed_the_modeled_rounds_is_refused_with_what_to_change(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rounds = max(t.train_rounds for t in paper.TRAINING.values()) - 1
    with pytest.raises(SystemExit):
        paper.main(["--rounds", str(rounds)])
    assert "raise --rounds or lower --train-rounds" in capsys.readouterr().err


def test_uniform_trains_once_for_both_readings_and_each_reading_models_its_own_config(
    stand_ins: StandIns,
) -> None:
    runs, _ = paper.compare(PLAN, workers=1)
    uniform = [c for c in stand_ins.calls if c[0] == "train" and c[2] is None]
    assert len(uniform) == 2 * 2  # seeds × scenarios, not × readings
    modeled = [c for c in stand_ins.calls if c[0] == "analytic"]
    assert len(modeled) == 2 * 2 * 2 * len(paper.POLICIES)
    micro = {c[1]: c[3] for c in modeled if "training.microbatch_size" in c[3]}
    assert micro == {
        stem: {**overrides, "training.batch_size": None, "training.microbatch_size": b}
        for stem, overrides, b in (
            ("paper-transformer", micro["paper-transformer"], 64 // 4),
            ("paper-bert", micro["paper-bert"], 32 // 4),
        )
    }
    assert sum("training.microbatch_size" not in c[3] for c in modeled) == len(modeled) // 2
    assert [(r["reading"], r["seed"], r["scenario"]) for r in runs] == [
        (reading, seed, stem)
        for reading in ("batch", "microbatch")
        for seed in (1, 2)
        for stem in ("paper-transformer", "paper-bert")
    ]


def test_with_a_fixed_batch_every_policy_shares_uniforms_training_and_adds_its_own_latencies(
    stand_ins: StandIns,
) -> None:
    runs, _ = paper.compare(PLAN._replace(readings=("batch",)), workers=1)
    replays = [c for c in stand_ins.calls if c[0] == "train" and c[2] is not None]
    # one round per case replaying a policy whose M differs from uniform's: the check that M does
    # not change the training; no trajectory trains to the target
    assert [(c[2], c[3]["max_rounds"], c[3]["reading"]) for c in replays] == [([[1] * 4], 1, "batch")] * 4
    for run in runs:
        assert run["training_groups"] == [list(paper.POLICIES)]
        assert run["fixed_batch_check"]["policy"] == "dssda"
        assert run["fixed_batch_check"]["relative_difference"] == 0.0
        for policy, figures in run["figures"].items():
            assert run["eval_loss"][policy] == UNIFORM_LOSSES
            # uniform's loss reaches its own final value at round 3: three of the policy's latencies
            assert figures["rounds_to_target"] == 3
            assert figures["time_to_target_s"] == 3 * 10.0 * M_OF[policy]


def test_with_a_fixed_batch_a_replay_that_trains_differently_stops_the_bench(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    drifting = StandIns(replay_drift=1e-3)
    monkeypatch.setattr(paper, "analytic_task", drifting.analytic)
    monkeypatch.setattr(paper, "train_task", drifting.train)
    with pytest.raises(AssertionError, match=r"paper-transformer seed 1.*dssda.*M does not change"):
        paper.compare(PLAN._replace(readings=("batch",)), workers=1)


def test_the_fixed_micro_batch_reading_is_derived_from_the_scenarios_fixed_batch() -> None:
    for path in paper.SCENARIOS.values():
        written = paper.scenario_config(path)
        batch, m = written.training.batch_size, written.scheduler.num_microbatches
        assert batch is not None and written.training.microbatch_size is None
        assert paper.reading_overrides(path, "batch") == {}
        derived = paper.scenario_config(path, **paper.reading_overrides(path, "microbatch"))
        assert (derived.training.batch_size, derived.training.microbatch_size) == (None, batch // m)
        # the baselines' fixed M trains the same samples per step in both readings
        assert derived.training.samples_per_step(m) == written.training.samples_per_step(m) == batch
        copy = paper.training_config(path, seed=2, reading="microbatch")
        assert (copy.training.batch_size, copy.training.microbatch_size, copy.seed) == (None, batch // m, 2)


def test_the_json_summary_is_one_object_on_stdout_with_both_readings(
    stand_ins: StandIns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = ["--rounds", "8", "--train-rounds", "3", "--seeds", "1,2", "--skip-extras", "--workers", "1"]
    paper.main(["--json", *plan, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    summary = json.loads(out)
    assert summary["plan"]["readings"] == ["batch", "microbatch"]
    assert {(a["reading"], a["scenario"]) for a in summary["over_seeds"]} == {
        (r, s) for r in ("batch", "microbatch") for s in ("paper-transformer", "paper-bert")
    }
    assert all(a["claims"]["memory"] is not None for a in summary["over_seeds"])
    assert set(summary["ours"]) == {"batch", "microbatch"}
    assert (tmp_path / "paper-decisions.json").is_file() and (tmp_path / "paper.html").is_file()


def test_an_unknown_reading_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        paper.main(["--readings", "batch,minibatch"])
    assert "--readings 'batch,minibatch': give batch, microbatch or both" in capsys.readouterr().err


def test_the_decision_log_gives_each_holders_memory_and_compute_and_dssdas_explanation() -> None:
    path = paper.SCENARIOS["bert"]
    results = paper.run_policy(paper.scenario_config(path), "dssda", 1, "analytic")
    (entry,) = paper.decision_log(results, explained=True)
    holders = [d for d in results[0].devices if d.num_blocks > 0]
    assert entry["blocks"] == {d.device_id: d.num_blocks for d in holders}
    assert entry["memory_bytes"] == {d.device_id: d.memory_bytes for d in holders}
    assert entry["compute_s"] == {d.device_id: d.compute_s for d in holders}
    assert entry["explanation"]["sentence"] == results[0].round.explanation["sentence"] != ""
    assert "explanation" not in paper.decision_log(results)[0]
