"""The paper comparison over seeds: per reading, scenario and policy, means with Student-t 95 % intervals,
DSSDA's paired ratios and the paper's three claims.

Pure functions over the per-seed figures ``bench/paper.py`` computes (one figures dict per policy, per
reading of micro-batching, scenario and seed). Rules, all explicit:

- **Time to target.** A seed where the policy reached the target gives its time; a seed where it did
  not gives the modeled time of every round it trained (its target lies later), a *lower bound*. The mean
  over seeds is then a lower bound too and has no interval; the seeds it did not reach are counted and
  named, never dropped.
- **Rounds to target**: over the seeds that reached it.
- **Budgets.** A policy holds the energy budgets in a seed when its worst device's time-average E/Ē is
  at most :data:`BUDGET_TOLERANCE` (1: within Ē). A baseline that holds them in every seed is a *budget
  holder*; one that holds them in some seeds only is a *budget holder in those seeds*: DSSDA is compared
  with it over those seeds only (its paired ratio and the verdict), and the seeds are named.
- **Ratios to DSSDA** are paired: DSSDA's time over the policy's in each seed, then the mean and interval
  of those ratios. A seed where DSSDA did not reach the target gives a lower bound of its ratio; a seed
  where the baseline did not gives none (the ratio could be anything below the bound's), and is counted.
- **The paper's claims** (:data:`PAPER_CLAIMS`), each a paired ratio over the seeds, DSSDA's figure over
  the reference policy's: (a) round latency and time to target against ``uniform``, met when the mean
  reduction is at least the paper's; (b) computation efficiency against ``uniform`` — the busy share of
  the devices holding blocks and of all devices (:func:`claims`) — met when the mean gain is at least the
  paper's; (c) peak device memory against ``fl``, met when the mean ratio is below the paper's.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from collapipe_core.intervals import CONFIDENCE, mean_interval

BUDGET_TOLERANCE = 1.0
"""Worst device time-average E/Ē up to which a policy holds the energy budgets in a seed."""

PAPER_CLAIMS = {"latency_reduction_pct": 48.98, "efficiency_gain_pct": 15.09, "memory_ratio_to_fl": 0.5}
"""The paper's figures: end-to-end latency at least 48.98 % lower and computation efficiency up to
15.09 % higher than its baseline, device memory below half of federated learning's."""


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
        "budget_held_seeds": [s for s, e in zip(seeds, energy, strict=True) if e <= BUDGET_TOLERANCE],
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


def paired_figure(
    dssda: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]], key: str, seeds: Sequence[int]
) -> dict[str, Any]:
    """DSSDA's figure ``key`` over ``other``'s, per seed, with mean and interval."""
    ratios = {
        seed: float(d[key]) / float(o[key]) for seed, d, o in zip(seeds, dssda, other, strict=True) if o[key]
    }
    out = interval_of(list(ratios.values()))
    out["per_seed"] = ratios
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


def _at_most(ratio: dict[str, Any], bound: float) -> bool | None:
    """Whether the mean ratio is at most ``bound``; None when it is a lower bound at or below it."""
    if ratio["mean"] is None:
        return None
    if ratio["lower_bound"]:
        return False if ratio["mean"] > bound else None
    return bool(ratio["mean"] <= bound)


def claims(
    per_policy: Mapping[str, Sequence[dict[str, Any]]],
    seeds: Sequence[int],
    paper: Mapping[str, float] = PAPER_CLAIMS,
) -> dict[str, Any]:
    """The paper's three claims over ``seeds`` (module docstring), each None when its reference policy
    did not run. Computation efficiency is the share of the round the devices compute: per round
    Σ_k compute_s / (devices × T), of the devices holding blocks (``efficiency_holders``) and of all
    devices (``efficiency``), averaged over rounds."""
    dssda = per_policy["dssda"]
    out: dict[str, Any] = {"latency": None, "efficiency": None, "memory": None}
    if "uniform" in per_policy:
        uniform = per_policy["uniform"]
        reduced = 1 - paper["latency_reduction_pct"] / 100
        round_latency = paired_figure(dssda, uniform, "mean_latency_s", seeds)
        to_target = paired_ratio(dssda, uniform, seeds)
        out["latency"] = {
            "paper_reduction_pct": paper["latency_reduction_pct"],
            "round_latency_ratio": round_latency,
            "time_to_target_ratio": to_target,
            "round_latency_met": _at_most(round_latency, reduced),
            "time_to_target_met": _at_most(to_target, reduced),
        }
        gained = 1 + paper["efficiency_gain_pct"] / 100
        efficiency: dict[str, Any] = {"paper_gain_pct": paper["efficiency_gain_pct"]}
        for name, key in (("holders", "efficiency_holders"), ("all_devices", "efficiency")):
            ratio = paired_figure(dssda, uniform, key, seeds)
            efficiency[name] = {
                "dssda": interval_of([float(f[key]) for f in dssda]),
                "uniform": interval_of([float(f[key]) for f in uniform]),
                "ratio": ratio,
            }
            efficiency[f"{name}_met"] = ratio["mean"] is not None and bool(ratio["mean"] >= gained)
        out["efficiency"] = efficiency
    if "fl" in per_policy:
        fl = per_policy["fl"]
        peak = paired_figure(dssda, fl, "peak_memory_bytes", seeds)
        out["memory"] = {
            "paper_ratio_to_fl": paper["memory_ratio_to_fl"],
            "peak_ratio_to_fl": peak,
            "mean_ratio_to_fl": paired_figure(dssda, fl, "mean_memory_bytes", seeds),
            "met": peak["mean"] is not None and bool(peak["mean"] < paper["memory_ratio_to_fl"]),
        }
    return out


def aggregate(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per reading and scenario, over its seeds: every policy's figures, DSSDA's paired ratios to each
    baseline (over every seed, and to each budget holder over the seeds it holds the budgets), whether
    it is no slower than every budget holder, and the paper's claims. ``runs``: one entry per reading,
    scenario and seed with ``reading``, ``scenario``, ``seed``, ``target_eval_loss`` and ``figures``
    (policy → figures)."""
    out = []
    for reading, name in dict.fromkeys((r["reading"], r["scenario"]) for r in runs):
        mine = [r for r in runs if (r["reading"], r["scenario"]) == (reading, name)]
        seeds = [int(r["seed"]) for r in mine]
        policies = list(mine[0]["figures"])
        per_policy = {p: [r["figures"][p] for r in mine] for p in policies}
        policy_figures = {p: aggregate_policy(per_policy[p], seeds) for p in policies}
        held = {
            p: policy_figures[p]["budget_held_seeds"]
            for p in policies
            if p != "dssda" and policy_figures[p]["budget_held_seeds"]
        }
        to_holders, checks = {}, {}
        for p, held_seeds in held.items():
            chosen = [seeds.index(s) for s in held_seeds]
            dssda, other = [per_policy["dssda"][i] for i in chosen], [per_policy[p][i] for i in chosen]
            to_holders[p] = paired_ratio(dssda, other, held_seeds)
            checks[p] = verdict(aggregate_policy(dssda, held_seeds), aggregate_policy(other, held_seeds))
        out.append(
            {
                "reading": reading,
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
                "budget_holding": [p for p in held if policy_figures[p]["holds_budgets"]],
                "budget_holding_some_seeds": {
                    p: s for p, s in held.items() if not policy_figures[p]["holds_budgets"]
                },
                "ratios_dssda_to_budget_holders": to_holders,
                "dssda_no_slower_than": checks,
                "dssda_no_slower_than_every_budget_holder": (
                    False if False in checks.values() else True if all(checks.values()) else None
                ),
                "claims": claims(per_policy, seeds),
            }
        )
    return out


# -- the table --------------------------------------------------------------------------------------

READING_TITLES = {"batch": "fixed batch", "microbatch": "fixed micro-batch"}


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


ANSWER = {True: "yes", False: "no", None: "open (lower bounds)"}
MET = {True: "met", False: "not met", None: "open (lower bounds)"}


def claims_lines(found: dict[str, Any], paper: dict[str, float]) -> list[str]:
    """The three claims of one reading and scenario (:func:`claims`) beside the paper's."""
    lines = []
    latency = found["latency"]
    if latency is not None:
        lines.append(
            f"   (a) latency against uniform: round {_pct(latency['round_latency_ratio'])}"
            f" ({MET[latency['round_latency_met']]}), time to target"
            f" {_pct(latency['time_to_target_ratio'])} ({MET[latency['time_to_target_met']]});"
            f" paper: at least −{paper['latency_reduction_pct']} %"
        )
    efficiency = found["efficiency"]
    if efficiency is not None:
        parts = []
        for name, label in (("holders", "devices holding blocks"), ("all_devices", "all devices")):
            e = efficiency[name]
            parts.append(
                f"{label} {_interval(e['dssda'], '.3f')} against {_interval(e['uniform'], '.3f')},"
                f" {_pct(e['ratio'])} ({MET[efficiency[f'{name}_met']]})"
            )
        lines.append(
            "   (b) computation efficiency (busy share) against uniform: "
            + "; ".join(parts)
            + f"; paper: up to +{paper['efficiency_gain_pct']} %"
        )
    memory = found["memory"]
    if memory is not None:
        lines.append(
            f"   (c) peak device memory {_interval(memory['peak_ratio_to_fl'], '.2f')} × fl"
            f" ({MET[memory['met']]}; mean over the devices holding blocks"
            f" {_interval(memory['mean_ratio_to_fl'], '.2f')} × fl's);"
            f" paper: below {paper['memory_ratio_to_fl']} × fl"
        )
    return lines


def seeds_table(aggregated: Sequence[dict[str, Any]], paper: dict[str, float]) -> str:
    """The readable summary over seeds: each policy's mean time to target with its interval, DSSDA
    against the budget holders and the paper's claims, per reading and scenario."""
    pct = f"{100 * CONFIDENCE:.0f} %"
    lines = []
    for s in aggregated:
        n = len(s["seeds"])
        lines.append(
            f"== {READING_TITLES.get(s['reading'], s['reading'])}: {s['scenario']} over {n} seeds"
            f" {s['seeds']}  (means with Student-t {pct} intervals; worst device E/Ē: the maximum over"
            f" seeds, budgets held at ≤ {BUDGET_TOLERANCE})"
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
            held = f["budget_held_seeds"]
            holds = "yes" if f["holds_budgets"] else "no" if not held else "some"
            lines.append(
                f"  {p:12s}{_interval(f['time_to_target_s'], '.0f'):>19s}"
                f"  {_interval(f['rounds_to_target'], '.1f'):>18s}"
                f"  {_interval(f['mean_latency_s'], '.1f'):>21s}"
                f"  {f['mean_microbatches']['mean']:4.1f}"
                f"  {f['energy_over_budget_max_worst_seed']:7.2f}"
                f"  {holds:5s}  {ratio}{note}"
            )
        lines.append(
            "   time to target per seed (s): "
            + "; ".join(
                f"{p} " + " ".join(_num(t, ".0f") for t in f["time_to_target_per_seed_s"])
                for p, f in s["policies"].items()
            )
        )
        if "uniform" in s["ratios_dssda_to"]:
            uniform = s["ratios_dssda_to"]["uniform"]
            lines.append(
                "   DSSDA / uniform time to target per seed: "
                + ", ".join(
                    f"{'≥ ' if seed in uniform['dssda_not_reached_seeds'] else ''}{r:.3f}"
                    for seed, r in uniform["per_seed"].items()
                )
            )
        holders = [
            *s["budget_holding"],
            *(f"{p} in seeds {v}" for p, v in s["budget_holding_some_seeds"].items()),
        ]
        lines.append(
            f"   budget holders (besides DSSDA): {', '.join(holders) or 'none'}; DSSDA / holder over the"
            " seeds it holds them: "
            + (
                ", ".join(
                    f"{p} {_interval(r, '.2f')}" for p, r in s["ratios_dssda_to_budget_holders"].items()
                )
                or "—"
            )
        )
        checks = s["dssda_no_slower_than"]
        lines.append(
            "   DSSDA's mean time to target no higher than each holder's: "
            + (", ".join(f"{p} {ANSWER[v]}" for p, v in checks.items()) or "—")
            + f"; than every one: {ANSWER[s['dssda_no_slower_than_every_budget_holder']]}"
        )
        lines += claims_lines(s["claims"], paper)
    return "\n".join(lines)
