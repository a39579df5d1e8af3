"""The paper comparison over seeds: per policy and scenario, means with Student-t 95 % intervals.

Pure functions over the per-seed figures ``bench/paper.py`` computes (one figures dict per policy, per
scenario and seed). Rules, all explicit:

- **Time to target.** A seed where the policy reached the target gives its time; a seed where it did
  not gives the modeled time of every round it trained (its target lies later), a *lower bound*. The mean
  over seeds is then a lower bound too and has no interval; the seeds it did not reach are counted and
  named, never dropped.
- **Rounds to target**: over the seeds that reached it.
- **Budgets.** A policy holds the energy budgets when, in *every* seed, its worst device's time-average
  E/Ē is at most :data:`BUDGET_TOLERANCE` (the strict reading: the maximum over seeds, not the mean).
- **Ratios to DSSDA** are paired: DSSDA's time over the policy's in each seed, then the mean and interval
  of those ratios. A seed where DSSDA did not reach the target gives a lower bound of its ratio; a seed
  where the baseline did not gives none (the ratio could be anything below the bound's), and is counted.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from collapipe_core.intervals import CONFIDENCE, mean_interval

BUDGET_TOLERANCE = 1.05
"""Worst device time-average E/Ē up to which a policy counts as holding the energy budgets."""


def interval_of(values: Sequence[float], lower_bound: bool = False) -> dict[str, Any]:
    """Mean and Student-t interval of ``values``; a lower bound has its mean only."""
    found = mean_interval(values, CONFIDENCE)
    exact = not lower_bound
    return {
        "mean": found.mean,
        "low": found.low if exact else None,
        "high": found.high if exact else None,
        "n": found.n,
        "lower_bound": lower_bound,
    }


def seed_time(figures: dict[str, Any]) -> tuple[float, bool]:
    """(time to target, reached) of one seed: the time, or the trained rounds' time as a lower bound."""
    if figures["time_to_target_s"] is not None:
        return float(figures["time_to_target_s"]), True
    return float(figures["elapsed_trained_s"]), False


def aggregate_policy(per_seed: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """One policy's figures over seeds (``per_seed[i]``: its figures dict in seed ``seeds[i]``)."""
    times, reached = zip(*(seed_time(f) for f in per_seed), strict=True)
    energy = [float(f["energy_over_budget_max"]) for f in per_seed]
    rounds = [float(f["rounds_to_target"]) for f in per_seed if f["rounds_to_target"] is not None]
    return {
        "seeds": list(seeds),
        "time_to_target_s": interval_of(times, lower_bound=not all(reached)),
        "time_to_target_per_seed_s": [t if r else None for t, r in zip(times, reached, strict=True)],
        "not_reached_seeds": [s for s, r in zip(seeds, reached, strict=True) if not r],
        "rounds_to_target": interval_of(rounds),
        "mean_latency_s": interval_of([float(f["mean_latency_s"]) for f in per_seed]),
        "mean_microbatches": interval_of([float(f["mean_microbatches"]) for f in per_seed]),
        "mean_blocks_moved": interval_of([float(f["mean_blocks_moved"]) for f in per_seed]),
        "energy_over_budget_max_worst_seed": max(energy),
        "energy_over_budget_max_mean": statistics.fmean(energy),
        "holds_budgets": max(energy) <= BUDGET_TOLERANCE,
    }


def paired_ratio(
    dssda: Sequence[dict[str, Any]], baseline: Sequence[dict[str, Any]], seeds: Sequence[int]
) -> dict[str, Any]:
    """DSSDA's time to target over ``baseline``'s, per seed, with mean and interval (module docstring)."""
    ratios: dict[int, float] = {}
    bounded, undefined = [], []
    for seed, d, b in zip(seeds, dssda, baseline, strict=True):
        (d_time, d_reached), (b_time, b_reached) = seed_time(d), seed_time(b)
        if not b_reached:
            undefined.append(seed)
            continue
        ratios[seed] = d_time / b_time
        if not d_reached:
            bounded.append(seed)
    out = interval_of(list(ratios.values()), lower_bound=bool(bounded))
    out.update(per_seed=ratios, dssda_not_reached_seeds=bounded, baseline_not_reached_seeds=undefined)
    return out


def verdict(dssda: dict[str, Any], other: dict[str, Any]) -> bool | None:
    """Whether DSSDA's mean time to target is no higher than ``other``'s (both :func:`aggregate_policy`);
    None when the lower bounds leave it open."""
    d, o = dssda["time_to_target_s"], other["time_to_target_s"]
    no_higher = bool(d["mean"] <= o["mean"])
    if not d["lower_bound"] and not o["lower_bound"]:
        return no_higher
    if not d["lower_bound"]:  # the other's mean is at least its bound
        return True if no_higher else None
    if not o["lower_bound"]:  # DSSDA's mean is at least its bound
        return False if not no_higher else None
    return None


def aggregate(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario, over its seeds: every policy's figures, DSSDA's paired ratios to each baseline and
    whether it is no slower than every policy that holds the budgets. ``runs``: one entry per scenario
    and seed with ``scenario``, ``seed``, ``target_eval_loss`` and ``figures`` (policy → figures)."""
    out = []
    for name in dict.fromkeys(r["scenario"] for r in runs):
        mine = [r for r in runs if r["scenario"] == name]
        seeds = [int(r["seed"]) for r in mine]
        policies = list(mine[0]["figures"])
        per_policy = {p: [r["figures"][p] for r in mine] for p in policies}
        policy_figures = {p: aggregate_policy(per_policy[p], seeds) for p in policies}
        holding = [p for p in policies if p != "dssda" and policy_figures[p]["holds_budgets"]]
        checks = {p: verdict(policy_figures["dssda"], policy_figures[p]) for p in holding}
        out.append(
            {
                "scenario": name,
                "seeds": seeds,
                "target_eval_loss": [float(r["target_eval_loss"]) for r in mine],
                "gradient_noise_scale": [r.get("gradient_noise_scale") for r in mine],
                "policies": policy_figures,
                "ratios_dssda_to": {
                    p: paired_ratio(per_policy["dssda"], per_policy[p], seeds)
                    for p in policies
                    if p != "dssda"
                },
                "budget_holding": holding,
                "dssda_no_slower_than": checks,
                "dssda_no_slower_than_every_budget_holder": (
                    False if False in checks.values() else True if all(checks.values()) else None
                ),
            }
        )
    return out


# -- the table --------------------------------------------------------------------------------------


def _num(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def _interval(i: dict[str, Any], spec: str) -> str:
    if i["mean"] is None:
        return "—"
    if i["lower_bound"]:
        return f"≥ {i['mean']:{spec}}"
    if i["low"] is None:
        return format(i["mean"], spec)
    return f"{i['mean']:{spec}} [{i['low']:{spec}}, {i['high']:{spec}}]"


def _pct(i: dict[str, Any]) -> str:
    """A ratio's mean and interval as a change in per cent."""
    if i["mean"] is None:
        return "—"
    change = {k: None if i[k] is None else 100 * (i[k] - 1) for k in ("mean", "low", "high")}
    return _interval({**i, **change}, "+.1f") + " %"


def seeds_table(aggregated: Sequence[dict[str, Any]], paper_latency_reduction_pct: float) -> str:
    """The readable summary over seeds: each policy's mean time to target with its interval."""
    pct = f"{100 * CONFIDENCE:.0f} %"
    lines = []
    for s in aggregated:
        n = len(s["seeds"])
        lines.append(
            f"== {s['scenario']} over {n} seeds {s['seeds']}  (means with Student-t {pct} intervals;"
            f" worst device E/Ē: the maximum over seeds, budgets held at ≤ {BUDGET_TOLERANCE})"
        )
        lines.append(
            "   target eval loss per seed "
            + ", ".join(f"{t:.3f}" for t in s["target_eval_loss"])
            + "; B_noise per seed "
            + ", ".join(_num(b, ".2f") for b in s["gradient_noise_scale"])
        )
        lines.append(
            "policy        to_target_s          rounds              latency_s              M"
            "  E/Ē_max  holds  DSSDA/policy (paired)"
        )
        for p, f in s["policies"].items():
            missing = f["not_reached_seeds"]
            note = f"  not reached in seeds {missing}" if missing else ""
            ratio = ""
            if p != "dssda":
                r = s["ratios_dssda_to"][p]
                ratio = _interval(r, ".2f") + (f" ({r['n']} of {n} seeds)" if r["n"] < n else "")
            lines.append(
                f"  {p:12s}{_interval(f['time_to_target_s'], '.0f'):>19s}"
                f"  {_interval(f['rounds_to_target'], '.1f'):>18s}"
                f"  {_interval(f['mean_latency_s'], '.1f'):>21s}"
                f"  {f['mean_microbatches']['mean']:4.1f}"
                f"  {f['energy_over_budget_max_worst_seed']:7.2f}"
                f"  {'yes' if f['holds_budgets'] else 'no':5s}  {ratio}{note}"
            )
        lines.append(
            "   time to target per seed (s): "
            + "; ".join(
                f"{p} " + " ".join(_num(t, ".0f") for t in f["time_to_target_per_seed_s"])
                for p, f in s["policies"].items()
            )
        )
        uniform = s["ratios_dssda_to"]["uniform"]
        lines.append(
            f"   DSSDA / uniform time to target: {_interval(uniform, '.3f')}, i.e. {_pct(uniform)}"
            " (per seed "
            + ", ".join(
                f"{'≥ ' if seed in uniform['dssda_not_reached_seeds'] else ''}{r:.3f}"
                for seed, r in uniform["per_seed"].items()
            )
            + f"); paper: −{paper_latency_reduction_pct} % latency"
        )
        checks = s["dssda_no_slower_than"]
        answer = {True: "yes", False: "no", None: "open (lower bounds)"}
        lines.append(
            f"   budget holders (besides DSSDA): {', '.join(s['budget_holding']) or 'none'};"
            f" DSSDA's mean time to target no higher than each: "
            + (", ".join(f"{p} {answer[v]}" for p, v in checks.items()) or "—")
            + f"; than every one: {answer[s['dssda_no_slower_than_every_budget_holder']]}"
        )
    return "\n".join(lines)
